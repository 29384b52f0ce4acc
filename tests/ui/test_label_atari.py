"""What a person sees of an Atari run on the labeling page, in a real headless Chromium: Pong's
own frames in colour at their native size or larger (not the policy's 84x84 grey stack), a
player that advances frame by frame, pauses and replays, and an answer given while the server
is away that reaches the database exactly once when it returns.

Needs Debian's `chromium`, Playwright and the Atari extra; skipped with the reason otherwise.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from backflip.prefs.db import PreferenceDB
from tests.conftest import ROOT, cli_env, stop_command
from tests.ui.support import ARTIFACTS, Server, chromium, needs_chromium

pytest.importorskip("ale_py")
pytestmark = [pytest.mark.slow, needs_chromium]

PONG_GREEN, PONG_ORANGE = (92, 186, 92), (213, 130, 74)  # the agent's paddle, the computer's


def wait_for(predicate, timeout=120.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def canvas_pixels(page, selector: str) -> np.ndarray:
    """The canvas as a person sees it: a screenshot of the element, as RGB pixels."""
    from PIL import Image

    png = page.locator(selector).screenshot()
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def near(pixels: np.ndarray, colour, tol: int = 12) -> int:
    return int((np.abs(pixels.astype(int) - np.array(colour)).max(-1) <= tol).sum())


def player(page) -> dict:
    return page.evaluate("labelingPlayer()")


def test_a_person_sees_pong_in_colour_and_an_answer_made_offline_arrives_once(home):
    run = subprocess.Popen(
        [sys.executable, "-m", "backflip", "prefs", "train", "ppo",
         "--env", "PongNoFrameskip-v4", "--labeler", "human", "--seeds", "1", "--steps", "4096",
         "--labels", "8", "--set", "prefs.initial_frac=1", "--set", "prefs.store_size=16",
         "--set", "prefs.random_envs=2", "--set", "prefs.max_pending=4", "--no-progress"],
        env=cli_env(home), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = Server(home)
    port = server.base.rsplit(":", 1)[1]
    try:
        wait_for(lambda: any(home.glob("*/seeds/0/prefs.sqlite")), 180, "the run's database")
        db_path = next(home.glob("*/seeds/0/prefs.sqlite"))
        run_id = db_path.parents[2].name
        db = PreferenceDB(db_path)
        wait_for(lambda: db.counts()["pending"] >= 2, 300, "queries for the page")
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.base}/label/{run_id}/0/")
            page.fill("#name", "pat")
            page.click("#who button[type=submit]")
            page.wait_for_function("() => !!document.body.dataset.query")
            # the template's 240×240 placeholder gives way to the clip's own size once its
            # frames are decoded (a width >= 160 alone was already true of the placeholder)
            page.wait_for_function(
                "() => { const c = document.querySelector('#left');"
                " return c.width !== 240 || c.height !== 240; }"
            )
            assert "green paddle" in page.inner_text("#task")
            # the clip: Pong's own frame, 160x210 scaled up by whole pixels, in colour
            width, height = page.evaluate(
                "[document.querySelector('#left').width, document.querySelector('#left').height]"
            )
            assert width >= 160 and width % 160 == 0 and height == width * 210 // 160
            time.sleep(0.5)
            pixels = canvas_pixels(page, "#left")
            colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
            assert colours >= 4, f"{colours} colours: not a game frame"
            assert pixels.shape[0] >= 200 and pixels.shape[1] >= 160  # not a strip
            assert near(pixels, PONG_ORANGE) > 20  # the task's colours are on the screen
            page.screenshot(path=str(ARTIFACTS / "label-pong.png"))
            # the player: frame by frame, at the env's speed; pause holds, replay restarts
            first = player(page)["frame"]
            page.wait_for_function(f"() => labelingPlayer().frame !== {first}", timeout=5000)
            page.keyboard.press(" ")
            paused = player(page)
            assert not paused["playing"]
            time.sleep(0.6)
            assert player(page)["frame"] == paused["frame"]
            assert "paused" in page.inner_text("#frame") and "frame " in page.inner_text("#frame")
            page.keyboard.press("R")  # Shift or Caps Lock change nothing
            assert player(page)["playing"] and player(page)["frame"] <= 2
            page.select_option("#speed", "0.25")
            assert player(page)["speed"] == 0.25
            # the server goes away; an answer given now is kept in the page ...
            page.wait_for_function("() => !labelingBusy() && !!document.body.dataset.query")
            qid = int(page.evaluate("document.body.dataset.query"))
            answered = db.answered()
            server.stop()
            page.keyboard.press("ArrowLeft")
            page.wait_for_function("() => document.querySelector('#flash').textContent"
                                   ".includes('kept here')", timeout=10_000)  # fmt: skip
            assert db.answered() == answered
            # ... and sent when the server is back (on the same address): recorded once
            server = Server(home, "--port", port)
            wait_for(lambda: db.answered() == answered + 1, 30, "the kept answer")
            page.wait_for_function(
                "() => !document.querySelector('#counts').textContent.includes('kept in this')",
                timeout=20_000,
            )
            time.sleep(2 * 1.5)  # a few more polls: nothing is sent twice
            mine = [a for a in db.answers() if a["person"] == "pat"]
            assert [a["query"] for a in mine].count(qid) == 1 and db.answered() == answered + 1
            assert not errors, errors
            page.close()
        # the same answer id sent again by hand is a no-op too
        next_q = db.next_queries("other")[0][0]
        body = {"query": next_q, "choice": "right", "person": "other", "answer_id": "same-id"}
        for _ in range(2):
            req = urllib.request.Request(
                f"{server.base}/label/{run_id}/0/api/answer",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Origin": server.base},
            )
            urllib.request.urlopen(req, timeout=30).read()
        assert sum(a["person"] == "other" for a in db.answers()) == 1
        db.close()
    finally:
        server.stop()
        stop_command(run)
    shot = ARTIFACTS / "label-pong.png"
    assert Path(shot).stat().st_size > 10_000


def test_a_scripted_person_gives_100_answers_on_pong_clips_and_the_run_trains_on_them(home):
    # the person: prefers the clip with the higher true return (points won minus points lost),
    # "equal" on a tie, and is wrong on 10% of the pairs that differ (Ibarz et al. 2018: people
    # made 5-10% mistakes); it reads the two clips' returns from the database, as a person reads
    # them off the screen, and answers with the page's keys
    from backflip.telemetry import read_metrics
    from tests.ui.test_label_browser import ScriptedPerson, open_labeling

    def points(db: PreferenceDB, segment: int) -> float:
        return db.segment(segment).true_return

    labels = 100
    run = subprocess.Popen(
        [sys.executable, "-m", "backflip", "prefs", "train", "ppo",
         "--env", "PongNoFrameskip-v4", "--labeler", "human", "--seeds", "1", "--steps", "2048",
         "--labels", str(labels), "--set", "prefs.initial_frac=1", "--set", "prefs.random_envs=2",
         # 20 reward-CNN updates on the answers before the policy starts, not the preset's 150:
         # each is ~1.3 s on a CPU, and the test is about the answers reaching the training
         "--set", "prefs.pretrain_updates=20", "--no-progress", "--json"],
        env=cli_env(home), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = Server(home)
    try:
        wait_for(lambda: any(home.glob("*/seeds/0/prefs.sqlite")), 180, "the run's database")
        db_path = next(home.glob("*/seeds/0/prefs.sqlite"))
        run_id = db_path.parents[2].name
        db = PreferenceDB(db_path)
        with chromium() as browser:
            page, errors = open_labeling(browser, f"{server.base}/label/{run_id}/0/", "scripted")
            person = ScriptedPerson(page, db, points)
            end = time.monotonic() + 900
            while run.poll() is None and time.monotonic() < end:
                if not person.answer():
                    time.sleep(0.05)
            assert not errors, errors
            page.close()
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        record = json.loads(out)
        answers = [a for a in db.answers() if a["person"] == "scripted"]
        counts = db.counts()
        db.close()
    finally:
        server.stop()
        stop_command(run)
    assert record["status"] == "finished"
    # 100 answers, all through the page, every one the person's
    assert person.answers == len(answers) == labels == counts["labeled"] + counts["skipped"]
    assert record["seeds"][0]["labels"] == counts["labeled"]
    differ = [a for a in answers if a["left_true"] != a["right_true"]]
    wrong = [a for a in differ if (a["choice"] == "left") != (a["left_true"] > a["right_true"])]
    assert len(differ) >= 10, f"only {len(differ)} of {labels} pairs differed in points"
    assert len(wrong) == person.mistakes  # what the database holds is what the person pressed
    # and the run trained on them: reward-model updates on those labels, then the policy on it
    m = read_metrics(db_path.parent / "metrics.csv")
    assert m["prefs/labels"][1][-1] == counts["labeled"]
    assert m["reward_model/updates"][1][-1] >= 20
    assert record["seeds"][0]["steps"] == 2048
