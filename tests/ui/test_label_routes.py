"""The labeling pages of `backflip ui` (/label): answers reach the database, the guard keeps other
sites and hosts out, finished or dead runs refuse answers, several people label one run."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from backflip.prefs.db import PreferenceDB
from backflip.runs.archive import write_json
from backflip.runs.layout import seed_dir
from tests.conftest import ROOT, cli_env
from tests.test_prefs import seg

pytest.importorskip("flask", reason="Flask (the UI's web framework) is not installed")

from backflip.ui.app import LOOPBACK_NAMES, create_app

RUN = "20260101-000000-abcd"
HOST = {"Host": "127.0.0.1"}
SAME = {**HOST, "Origin": "http://127.0.0.1"}


def fake_run(home, status="running", pid=None, queries=3, needs=1):
    """A preference run whose seed 0 has `queries` pending pairs (segments with true returns
    i+1 on the left and 0 on the right: the left is truly better)."""
    run_dir = home / RUN
    folder = seed_dir(run_dir, 0)
    folder.mkdir(parents=True)
    write_json(
        run_dir / "run.json",
        {
            "id": RUN,
            "status": "running",
            "algo": "ppo",
            "env": "MovingDotLowDim-v0",
            "created": "2026-01-01T00:00:00+00:00",
            "config": {
                "algo": "ppo",
                "env_id": "MovingDotLowDim-v0",
                "seeds": [0],
                "steps": 10_000,
                "prefs": {"labels": 9, "labeler": "human", "task": "reach the cross"},
            },
        },
    )
    write_json(
        folder / "status.json",
        {
            "seed": 0,
            "status": status,
            "pid": os.getpid() if pid is None else pid,
            "host": socket.gethostname(),
            "steps": 1234,
        },
    )
    db = PreferenceDB(folder / "prefs.sqlite")
    db.set_meta(
        env_id="MovingDotLowDim-v0",
        segment_length=1,
        labels_target=9,
        obs_shape="2",
        task="reach the cross",
    )
    ids = [
        db.add_query(seg([float(i + 1)]), seg([0.0]), 0, "random", needs=needs)
        for i in range(queries)
    ]
    db.close()
    return folder, ids


def client(home, **kwargs):
    return create_app(home, allowed_hosts=LOOPBACK_NAMES, **kwargs).test_client()


def labels(folder) -> list:
    db = PreferenceDB(folder / "prefs.sqlite")
    try:
        return db.labels()
    finally:
        db.close()


def test_the_page_serves_clips_and_answers_land_in_the_database(home):
    folder, ids = fake_run(home)
    c = client(home)
    base = f"/label/{RUN}/0/"
    listing = c.get("/label/", headers=HOST).get_data(as_text=True)
    assert f'href="{RUN}/0/"' in listing and 'href="/journal"' in listing  # in the UI's layout
    assert c.get(base[:-1], headers=HOST).headers["Location"].endswith(base)
    page = c.get(base, headers=HOST)
    assert page.status_code == 200 and b"reach the cross" in page.data
    assert b"/static/label.js" in page.data
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY"
    state = c.get(base + "api/state?person=ann", headers=HOST).get_json()
    assert state["query"]["id"] == ids[0] and state["task"] == "reach the cross"
    assert state["run"]["state"] == "running" and state["run"]["accepts"]
    assert state["target"] == 9 and state["answered"] == 0 and state["val_acc"] is None
    png = c.get(base + f"clip/{state['query']['left']}.png", headers=HOST)
    assert png.status_code == 200 and png.data.startswith(b"\x89PNG")
    ok = c.post(
        base + "api/answer", json={"query": ids[0], "choice": "left", "person": "ann"}, headers=SAME
    )
    assert ok.status_code == 200, ok.data
    after = ok.get_json()
    assert after["answered"] == 1 and after["query"]["id"] == ids[1]
    assert after["me"]["true_reward"] == {"agree": 1, "n": 1, "rate": 1.0}
    assert labels(folder) == [(ids[0], 1, 2, 1.0)]
    undo = c.post(base + "api/undo", json={"person": "ann"}, headers=SAME).get_json()
    assert undo["undone"] == ids[0] and labels(folder) == []
    bad = c.post(base + "api/answer", json={"query": ids[0], "choice": "up", "person": "ann"})
    assert bad.status_code == 400
    nameless = c.post(base + "api/answer", json={"query": ids[0], "choice": "left"}, headers=SAME)
    assert nameless.status_code == 400 and "name" in nameless.get_json()["error"]
    assert c.get(f"/label/{RUN}/7/", headers=HOST).status_code == 404
    assert c.get("/label/nope/0/", headers=HOST).status_code == 404


def test_cross_site_and_foreign_host_requests_change_nothing(home):
    folder, ids = fake_run(home)
    c = client(home)
    url = f"/label/{RUN}/0/api/answer"
    answer = {"query": ids[0], "choice": "left", "person": "mallory"}
    cross = c.post(url, json=answer, headers={**HOST, "Origin": "http://evil.example"})
    assert cross.status_code == 403
    fetch_site = c.post(url, json=answer, headers={**HOST, "Sec-Fetch-Site": "cross-site"})
    assert fetch_site.status_code == 403
    # a cross-site HTML form can post without an Origin in old browsers; it cannot send JSON
    form = c.post(url, data={"query": ids[0], "choice": "left", "person": "m"}, headers=HOST)
    assert form.status_code == 415
    rebinding = {"Host": "evil.example", "Origin": "http://evil.example"}
    assert c.post(url, json=answer, headers=rebinding).status_code == 403
    assert (
        c.get(f"/label/{RUN}/0/api/state?person=m", headers={"Host": "evil.example"}).status_code
        == 403
    )
    end = c.post(
        f"/label/{RUN}/0/api/end",
        json={"person": "m"},
        headers={**HOST, "Origin": "http://evil.example"},
    )
    assert end.status_code == 403
    assert (
        labels(folder) == []
        and "labels_ended_at" not in PreferenceDB(folder / "prefs.sqlite").meta()
    )


def test_off_loopback_the_labeling_page_needs_the_token(home):
    from backflip.ui.app import serve

    folder, ids = fake_run(home)
    ready = threading.Event()
    box = {}

    def on_ready(server, url):
        box.update(server=server, url=url)
        ready.set()

    thread = threading.Thread(
        target=serve, kwargs={"home": home, "host": "0.0.0.0", "port": 0, "on_ready": on_ready}
    )
    thread.start()
    assert ready.wait(30)
    try:
        assert "token=" in box["url"]  # off loopback a token is always made
        port = box["server"].port
        body = json.dumps({"query": ids[0], "choice": "left", "person": "eve"}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/label/{RUN}/0/api/answer",
            body,
            {"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
        assert refused.value.code == 401
        token = box["url"].split("token=")[1]
        request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request) as r:
            assert r.status == 200
    finally:
        box["server"].shutdown()
        thread.join(10)
    assert [r[0] for r in labels(folder)] == [ids[0]]


@pytest.mark.parametrize(
    "status, pid, why",
    [
        ("finished", None, "is finished: answers are no longer used"),
        ("failed", None, "is failed"),
        ("running", 2**22 + 12345, "its process is gone"),
    ],
)
def test_answers_to_a_finished_or_dead_run_are_refused(home, status, pid, why):
    folder, ids = fake_run(home, status=status, pid=pid)
    c = client(home)
    state = c.get(f"/label/{RUN}/0/api/state?person=ann", headers=HOST).get_json()
    assert not state["run"]["accepts"] and state["query"] is None
    r = c.post(
        f"/label/{RUN}/0/api/answer",
        json={"query": ids[0], "choice": "left", "person": "ann"},
        headers=SAME,
    )
    assert r.status_code == 409 and why in r.get_json()["error"]
    assert labels(folder) == []


def test_ending_labeling_early_is_recorded_and_stops_answers(home):
    _folder, ids = fake_run(home)
    c = client(home)
    ended = c.post(f"/label/{RUN}/0/api/end", json={"person": "ann"}, headers=SAME).get_json()
    assert ended["ended"]["by"] == "ann" and not ended["run"]["accepts"]
    assert "labeling ended by ann" in ended["run"]["text"]
    r = c.post(
        f"/label/{RUN}/0/api/answer",
        json={"query": ids[0], "choice": "left", "person": "ann"},
        headers=SAME,
    )
    assert r.status_code == 409 and "was ended" in r.get_json()["error"]


def test_two_people_share_a_query_and_the_run_page_shows_their_agreement(home):
    folder, ids = fake_run(home, queries=4, needs=2)
    c = client(home)
    base = f"/label/{RUN}/0/"
    # two people at once are shown different pairs
    first = c.get(base + "api/state?person=ann", headers=HOST).get_json()["query"]["id"]
    second = c.get(base + "api/state?person=bob", headers=HOST).get_json()["query"]["id"]
    assert first != second
    answers = {"ann": ["left", "left", "right", "equal"], "bob": ["left", "right", "right", "left"]}
    for person, choices in answers.items():
        for q, choice in zip(ids, choices, strict=True):
            r = c.post(
                base + "api/answer",
                json={"query": q, "choice": choice, "person": person},
                headers=SAME,
            )
            assert r.status_code == 200, r.data
    again = c.post(
        base + "api/answer", json={"query": ids[0], "choice": "left", "person": "ann"}, headers=SAME
    )
    assert again.status_code == 409
    # agreement gives the answer; left against right gives 0.5; left and equal give 0.75
    assert [r[3] for r in labels(folder)] == [1.0, 0.5, 0.0, 0.75]
    db = PreferenceDB(folder / "prefs.sqlite")
    assert {a["person"] for a in db.answers()} == {"ann", "bob"}
    assert all(a["shown_at"] is None or a["shown_at"] <= a["answered_at"] for a in db.answers())
    db.close()
    page = c.get(f"/runs/{RUN}", headers=HOST).get_data(as_text=True)
    assert f'href="/label/{RUN}/0/"' in page  # the run page links to the labeling page
    assert "ann &amp; bob" in page and "Cohen" in page
    from backflip.runs.archive import load_run
    from backflip.ui.data import labeling

    table = labeling(home / RUN, load_run(home / RUN))[0]
    pair = table["pairs"][0]
    assert pair["queries"] == 4 and pair["agreement"] == 0.5
    # ann: left,left,right,equal; bob: left,right,right,left over {left,right,equal}:
    # p_o = 2/4, p_e = (2*2 + 1*2 + 1*0) / 16 = 6/16, kappa = (0.5 - 0.375) / 0.625 = 0.2
    assert pair["kappa"] == pytest.approx(0.2)
    ann = next(p for p in table["people"] if p["person"] == "ann")
    assert ann["true_reward"]["n"] == 4 and ann["true_reward"]["agree"] == 2  # left is truly better


def _as_from_a_terminal() -> None:
    """A child's signal state as a shell gives a foreground command: SIGINT handled by default
    and nothing blocked, whatever the test worker inherited or left behind."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_backflip_label_prints_the_ui_page_and_reuses_a_running_ui(home, tmp_path):
    fake_run(home)
    env = cli_env(home)
    env.pop("BACKFLIP_UI_TOKEN", None)
    err = (tmp_path / "label.err").open("w")  # a file, not a pipe nobody reads while it serves
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "label", RUN, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        line = proc.stdout.readline()
        assert f"/label/{RUN}/0/" in line and "serving" in line, line
        url = line.split(" at ")[1].split()[0]
        port = int(url.split(":")[2].split("/")[0])
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url) as r:
            assert b"Which clip is better?" in r.read()
        # a second `backflip label` on the same port finds this UI and prints the URL
        again = subprocess.run(
            [sys.executable, "-m", "backflip", "label", RUN, "--port", str(port)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert again.returncode == 0 and f"/label/{RUN}/0/" in again.stdout, again.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            err.close()
            raise AssertionError(
                "backflip label ignored SIGINT for 20 s; its stderr:\n"
                + (tmp_path / "label.err").read_text()
            ) from None
        err.close()


def test_killing_the_ui_mid_labeling_loses_no_acknowledged_answer(home):
    folder, _ids = fake_run(home, queries=400)
    env = cli_env(home)
    env.pop("BACKFLIP_UI_TOKEN", None)
    acked = 0
    for _round in range(2):  # label, SIGKILL the server, restart, label more
        proc = subprocess.Popen(
            [sys.executable, "-m", "backflip", "ui", "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        base = proc.stdout.readline().split(" at ")[1].split()[0].rstrip("/")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        stop = threading.Event()
        seen = []

        def label(base=base, opener=opener, stop=stop, seen=seen):
            try:
                while not stop.is_set():
                    with opener.open(f"{base}/label/{RUN}/0/api/state?person=kim") as r:
                        q = json.loads(r.read())["query"]
                    request = urllib.request.Request(
                        f"{base}/label/{RUN}/0/api/answer",
                        json.dumps({"query": q["id"], "choice": "left", "person": "kim"}).encode(),
                        {"Content-Type": "application/json", "Origin": base},
                    )
                    with opener.open(request, timeout=10) as r:
                        if r.status == 200:
                            seen.append(q["id"])  # acknowledged
            except (OSError, http.client.HTTPException):  # the server was killed
                return

        worker = threading.Thread(target=label, daemon=True)
        worker.start()
        deadline = time.monotonic() + 60
        while len(seen) < 25 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # most likely mid-request
        stop.set()
        proc.wait()
        worker.join(20)
        acked += len(seen)
        stored = {r[0] for r in labels(folder)}
        assert set(seen) <= stored  # every acknowledged answer is on disk
        assert acked <= len(stored) <= acked + _round + 1  # at most the one in flight is extra


def test_a_waiting_seed_says_so_everywhere(home, cli):
    folder, _ = fake_run(home)
    status = json.loads((folder / "status.json").read_text())
    status.update(status="waiting", labels_needed=3, labels_due=15, labels_answered=7)
    write_json(folder / "status.json", status)
    runs = cli("runs", "--reindex").stdout
    assert "waiting: seed 0 needs 3 labels" in runs
    listed = json.loads(cli("runs", "--json").stdout)
    assert listed[0]["status"].startswith("waiting")
    shown = json.loads(cli("show", RUN, "--json").stdout)
    assert shown["seeds"][0]["status"] == "waiting" and shown["seeds"][0]["labels_needed"] == 3
    assert "waiting for 3 labels" in cli("show", RUN).stdout
    c = client(home)
    progress = c.get(f"/api/runs/{RUN}/progress", headers=HOST).get_json()
    assert progress["status_text"] == "waiting: seed 0 needs 3 labels"
    assert progress["seeds"][0]["status_text"] == "waiting for 3 labels"
    page = c.get(f"/runs/{RUN}", headers=HOST).get_data(as_text=True)
    assert "waiting for 3 labels" in page
    state = c.get(f"/label/{RUN}/0/api/state?person=ann", headers=HOST).get_json()
    assert state["run"]["state"] == "waiting" and "give 3 labels" in state["run"]["text"]


def test_the_progress_line_shows_a_waiting_seed():
    import io

    from rich.console import Console

    from backflip.launch.display import Display
    from backflip.launch.job import SeedJob

    jobs = [SeedJob("/nonexistent", 0, {"steps": 1000})]
    display = Display(jobs, enabled=True)
    display.console = Console(file=io.StringIO(), width=120)  # plain lines: not a terminal
    display.message(0, ("status", 0, "waiting for 4 labels"))
    display.message(0, ("status", 0, "waiting for 3 labels"))  # no new line for a new count
    display.message(0, ("status", 0, "running"))
    assert display.console.file.getvalue().splitlines() == [
        "seed 0: waiting for 4 labels",
        "seed 0: running",
    ]
    task = display.progress.tasks[display.tasks[0]]
    assert task.fields["status"] == "running"
    display.message(0, ("status", 0, "waiting for 2 labels"))
    assert task.fields["status"] == "waiting for 2 labels"  # the live table's status column
