"""`backflip ui` over HTTP: pages, JSON, artifacts, and its security (loopback, token, paths)."""

from __future__ import annotations

import html
import http.client
import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

pytest.importorskip("flask")

from backflip import stats
from backflip.curves import run_metric_curves
from backflip.experiments.compare import interval_of
from backflip.journal import read_notes
from backflip.telemetry import read_metrics
from tests.ui.support import Server, anchor, backflip

BOOT = re.compile(r'<script type="application/json" id="boot">(.*?)</script>', re.S)


def get(server, path, headers=None, method="GET", body=None, host=None):
    """A raw request (http.client sends the path as written: no `..` normalization)."""
    u = urlsplit(server.base)
    con = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = dict(headers or {})
    if host is not None:
        con.putrequest(method, path, skip_host=True)
        con.putheader("Host", host)
        for k, v in h.items():
            con.putheader(k, v)
        con.endheaders(body.encode() if body else None)
    else:
        con.request(method, path, body=body, headers=h)
    resp = con.getresponse()
    data = resp.read()
    con.close()
    return resp, data


def test_binds_loopback_by_default(ui_server):
    assert urlsplit(ui_server.base).hostname == "127.0.0.1"
    assert ui_server.token is None
    listening = [
        c.laddr
        for c in psutil.Process(ui_server.proc.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


def test_index_lists_runs_with_question_status_and_result(ui_server, ui_archive):
    resp, body = get(ui_server, "/")
    page = body.decode()
    assert resp.status == 200
    for key in ("a", "b"):
        assert ui_archive[key] in page
    assert "question A: does the UI show this run?" in page
    assert "finished" in page and "[95% CI]" in page
    # a question that looks like HTML is shown, not interpreted
    assert "question B &lt;b&gt;not bold&lt;/b&gt;" in page and "<b>not bold</b>" not in page


def test_index_filters(ui_server, ui_archive):
    page = get(ui_server, "/?q=question+B")[1].decode()
    assert ui_archive["b"] in page and ui_archive["a"] not in page
    page = get(ui_server, "/?tag=ui-test")[1].decode()
    assert ui_archive["a"] in page and ui_archive["b"] not in page
    page = get(ui_server, "/?status=failed")[1].decode()
    assert ui_archive["a"] not in page and "No runs" in page


def test_run_page_has_command_config_provenance_findings_videos_checkpoints(ui_server, ui_archive):
    resp, body = get(ui_server, f"/runs/{ui_archive['a']}")
    page = body.decode()
    assert resp.status == 200
    assert f"backflip rerun {ui_archive['a']}" in page
    assert "backflip train ppo --env CartPole-v1 --seeds 2 --steps 2048" in page
    assert "packages.txt" in page and "source sha256" in page
    finding = ui_archive["finding"]  # the doctor's own, written after training
    assert html.escape(finding["message"][:40]) in page
    assert f'data-metric="{finding["metric"]}" data-step="{finding["step"]}"' in page
    assert f'href="#{anchor(finding["metric"])}"' in page
    assert ".mp4" in page and "<video" in page
    assert "final.pt" in page and f"backflip watch {ui_archive['a']} --seed 0" in page
    assert "A looks fine at a glance" in page  # the note attached with --run
    assert get(ui_server, "/runs/nonexistent-run")[0].status == 404


def test_curves_api_aligns_seeds_and_its_iqm_is_the_stats_iqm(ui_server, ui_archive):
    resp, body = get(ui_server, f"/api/runs/{ui_archive['a']}/curves")
    data = json.loads(body)
    assert resp.status == 200
    assert data["names"][0] == "eval/return_mean"  # the result first
    assert "train/approx_kl" in data["names"] and "time/sps" in data["names"]
    c = data["curves"]["rollout/ep_return_mean"]
    home = ui_archive["home"] / ui_archive["a"]
    per_seed = []
    for s in "01":
        steps, values = read_metrics(home / "seeds" / s / "metrics.csv")["rollout/ep_return_mean"]
        per_seed.append(dict(zip(steps.tolist(), values.tolist(), strict=True)))  # last one wins
    # both seeds logged at the same steps: the grid is exactly those steps (the final step is
    # logged twice, by the loop and by `finish`; the later row counts)
    assert c["step"] == sorted(per_seed[0]) and c["seeds"] == [0, 1]
    for j in (0, len(c["step"]) // 2, -1):
        values = [p[c["step"][j]] for p in per_seed]
        assert c["values"][0][j] == pytest.approx(values[0], rel=1e-5)
        assert c["iqm"][j] == pytest.approx(stats.iqm(values), rel=1e-5)
        assert c["low"][j] <= c["iqm"][j] + 1e-9 <= c["high"][j] + 2e-9
    # the alignment and band of `backflip.curves`, the one `backflip compare` draws
    mine = run_metric_curves(home, [0, 1], ["rollout/ep_return_mean"], points=600, digits=6)
    assert c == json.loads(json.dumps(mine["rollout/ep_return_mean"]))


def test_progress_api(ui_server, ui_archive):
    data = json.loads(get(ui_server, f"/api/progress?ids={ui_archive['a']},{ui_archive['b']}")[1])
    assert [r["id"] for r in data["runs"]] == [ui_archive["a"], ui_archive["b"]]
    a = data["runs"][0]
    assert a["status"] == "finished" and a["steps_done"] == a["steps_total"] == 2 * 2048
    assert a["iqm"] is not None and "IQM" in a["result"]


def test_the_compare_page_shows_exactly_what_backflip_compare_reports(ui_server, ui_archive):
    """One answer per question: the same runs give the same numbers, verdicts, fairness notes
    and curves in the terminal (`backflip compare --json`) and in the browser."""
    home, a, b = ui_archive["home"], ui_archive["a"], ui_archive["b"]
    cli_report = json.loads(backflip(home, "compare", a, b, "--json", "--no-plot").stdout)
    page = get(ui_server, f"/compare?ids={a},{b}")[1].decode()
    shown = json.loads(BOOT.search(page).group(1))["compare"]
    ui_only = {k: shown.pop(k) for k in ("metrics", "error")}
    assert ui_only["error"] is None and ui_only["metrics"][0] == "return"
    assert shown == cli_report
    # what the verdict rests on, and the verdict itself, on the page
    (pair,) = cli_report["pairs"]
    assert pair["comparable"] and 0 <= pair["poi"] <= 1 and None not in pair["poi_ci"]
    assert pair["welch"]["p"] is not None and pair["n_a"] == pair["n_b"] == 2
    assert html.escape(pair["verdict"]) in page
    for side in cli_report["sides"]:
        assert html.escape(interval_of(side["summary"])) in page
        assert side["curve"]["metric"] == "return" and len(side["curve"]["step"]) > 10


def test_compare_page_and_journal_page(ui_server, ui_archive):
    resp, body = get(ui_server, f"/compare?ids={ui_archive['a']},{ui_archive['b']}")
    page = body.decode()
    assert resp.status == 200 and "P(" in page and "Welch p=" in page
    page = get(ui_server, f"/compare?ids={ui_archive['a']},{ui_archive['b']}&metric=nope")[1]
    # the default curve is `backflip compare`'s: the training return
    assert "not every run logged" in page.decode() and "<h2>return</h2>" in page.decode()
    resp, body = get(ui_server, "/journal")
    page = body.decode()
    assert resp.status == 200
    for section in (
        "Current focus",
        "Thoughts and hypotheses",
        "Ongoing runs",
        "Results",
        "Compute",
    ):
        assert section in page
    assert "make the UI show every run" in page
    assert resp.status == 200 and "Preference labeling" in get(ui_server, "/label/")[1].decode()


def test_artifacts_are_served_with_safe_types_and_ranges(ui_server, ui_archive):
    run = ui_archive["a"]
    resp, body = get(ui_server, f"/files/{run}/seeds/0/stderr.log")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/plain")
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    video = next((ui_archive["home"] / run / "seeds" / "0" / "videos").glob("*.mp4"))
    rel = video.relative_to(ui_archive["home"] / run).as_posix()
    resp, body = get(ui_server, f"/files/{run}/{rel}", headers={"Range": "bytes=0-99"})
    assert resp.status == 206 and len(body) == 100 and resp.getheader("Content-Type") == "video/mp4"
    assert body[4:8] == b"ftyp"  # an MP4 container
    resp, _ = get(ui_server, f"/files/{run}/seeds/0/checkpoints/final.pt")
    assert resp.status == 200 and "attachment" in resp.getheader("Content-Disposition", "")


def test_no_path_traversal_out_of_the_archive(ui_server, ui_archive, tmp_path):
    home: Path = ui_archive["home"]
    run = ui_archive["a"]
    secret = tmp_path / "secret.txt"  # outside the archive
    secret.write_text("TOP-SECRET-OUTSIDE-THE-ARCHIVE")
    link = home / run / "seeds" / "0" / "leak.txt"
    os.symlink(secret, link)
    rel_up = os.path.relpath(secret, home / run)
    attempts = [
        f"/files/{run}/{rel_up}",
        f"/files/{run}/../../../../../../etc/passwd",
        f"/files/{run}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"/files/{run}/..%2f..%2f..%2f..%2fetc%2fpasswd",
        f"/files/{run}/seeds/0/..%5c..%5c..%5cetc%5cpasswd",
        f"/files/{run}//etc/passwd",
        f"/files/{run}/%2Fetc%2Fpasswd",
        "/files/..%2F..%2F..%2F..%2Fetc/passwd",
        "/files/../../../../etc/passwd",
        f"/files/{run}/seeds/0/leak.txt",  # a symlink inside the run pointing outside
        f"/files/{run}/seeds/0/stderr.log%00.mp4",
        f"/files/%2e%2e/{home.name}/{run}/run.json",
    ]
    try:
        for path in attempts:
            resp, body = get(ui_server, path)
            assert resp.status in (400, 404), (path, resp.status)
            assert b"TOP-SECRET" not in body and b"root:" not in body, path
    finally:
        link.unlink()


def test_loopback_server_refuses_foreign_host_headers(ui_server):
    assert get(ui_server, "/", host="evil.example:8765")[0].status == 403  # DNS rebinding
    assert get(ui_server, "/", host="localhost")[0].status == 200


def test_notes_can_be_added_from_the_same_origin_only(ui_server, ui_archive):
    form = "kind=thought&text=posted+from+the+page&run="
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    resp, _ = get(
        ui_server,
        "/journal/note",
        method="POST",
        body=form,
        headers={**headers, "Origin": "http://evil.example"},
    )
    assert resp.status == 403
    # the same host on another port is another origin (the exact rule: scheme, host and port)
    other_port = re.sub(r":\d+$", ":9999", ui_server.base)
    resp, _ = get(
        ui_server,
        "/journal/note",
        method="POST",
        body=form,
        headers={**headers, "Origin": other_port},
    )
    assert resp.status == 403
    origin = ui_server.base
    resp, _ = get(
        ui_server, "/journal/note", method="POST", body=form, headers={**headers, "Origin": origin}
    )
    assert resp.status == 303
    assert any(n["text"] == "posted from the page" for n in read_notes(ui_archive["home"]))


def test_non_loopback_host_requires_a_token(ui_archive):
    # bound to every interface; this test only ever connects to 127.0.0.1
    server = Server(ui_archive["home"], "--host", "0.0.0.0")
    try:
        assert server.token and len(server.token) >= 20
        # the printed address is one a colleague can open, not the wildcard it listens on
        assert "0.0.0.0" not in server.url and "token=" in server.url
        port = urlsplit(server.base).port
        local = type("S", (), {"base": f"http://127.0.0.1:{port}"})()
        assert get(local, "/")[0].status == 401
        assert get(local, f"/api/runs/{ui_archive['a']}/curves")[0].status == 401
        assert get(local, f"/files/{ui_archive['a']}/run.json")[0].status == 401
        assert get(local, "/?token=wrong")[0].status == 401
        resp, _ = get(local, f"/?token={server.token}")
        assert resp.status == 303 and resp.getheader("Location") == "/"
        cookie = resp.getheader("Set-Cookie")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert get(local, "/", headers={"Cookie": cookie.split(";")[0]})[0].status == 200
        auth = {"Authorization": f"Bearer {server.token}"}
        assert get(local, "/", headers=auth)[0].status == 200
    finally:
        server.stop()


def test_a_token_can_be_required_on_loopback_too(ui_archive):
    server = Server(ui_archive["home"], "--token", "s3cret-token-for-this-test")
    try:
        assert server.token == "s3cret-token-for-this-test"
        assert get(server, "/")[0].status == 401
        assert (
            get(server, "/", headers={"Authorization": f"Bearer {server.token}"})[0].status == 200
        )
    finally:
        server.stop()


def test_ui_rejects_a_missing_archive_and_a_busy_port(cli, tmp_path, ui_server):
    proc = cli("ui", "--home", tmp_path / "nope", check=False)
    assert (
        proc.returncode == 2 and "no archive at" in proc.stderr and "Traceback" not in proc.stderr
    )
    port = urlsplit(ui_server.base).port
    proc = cli("ui", "--port", port, check=False, timeout=60)
    assert proc.returncode == 2 and "cannot listen" in proc.stderr


def test_a_corrupt_run_is_reported_not_a_crash(home):
    from backflip.ui.app import LOOPBACK_NAMES, create_app

    (home / "20260101-000000-dead").mkdir()
    (home / "20260101-000000-dead" / "run.json").write_text('{"id": "20260101-0000')  # torn
    client = create_app(home, allowed_hosts=LOOPBACK_NAMES).test_client()
    h = {"Host": "127.0.0.1"}
    for path in ("/runs/20260101-000000-dead", "/api/runs/20260101-000000-dead/curves"):
        resp = client.get(path, headers=h)
        text = resp.get_data(as_text=True)
        assert resp.status_code == 404 and "is damaged: run.json is truncated" in text
    assert client.get("/", headers=h).status_code == 200
    assert client.get("/journal", headers=h).status_code == 200
