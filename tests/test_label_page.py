"""The human labeling page in a real headless Chromium: keys -> database -> reward model.

Needs Debian's `chromium` (apt-get install chromium) and Playwright's Python package; Playwright
never downloads a browser here (executable_path points at the system one).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backflip.prefs.db import PreferenceDB
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright's Python package is not installed"
)
pytestmark = [pytest.mark.slow]
skip_without_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not shutil.which("chromium"),
    reason="Debian chromium is not installed (apt-get install -y chromium)",
)


def wait_for(predicate, timeout=120.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@skip_without_chromium
def test_keyboard_labels_land_in_the_database_and_train_the_reward_model(home, cli):
    # a run that waits for 4 human labels (the `gather` stage, with the human labeler)
    gather = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backflip",
            "prefs",
            "gather",
            "--env",
            "MovingDotLowDim-v0",
            "--labels",
            "4",
            "--labeler",
            "human",
            "--set",
            "prefs.max_pending=3",
            "--no-progress",
        ],
        env=cli_env(home),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: any(home.glob("*/seeds/0/prefs.sqlite")), what="the run's database")
        db_path = next(home.glob("*/seeds/0/prefs.sqlite"))
        run_id = db_path.parents[2].name
        db = PreferenceDB(db_path)
        wait_for(lambda: db.counts()["pending"] >= 3, what="queries for the page")

        from backflip.prefs.web import serve

        server = serve(db_path.parent, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/"
        try:
            with playwright_api.sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page()
                page.goto(url)
                page.wait_for_function("document.body.dataset.query !== ''")
                first = int(page.evaluate("document.body.dataset.query"))
                # the clips are real images of the segments
                page.wait_for_function(
                    "document.querySelector('#left').getContext('2d')"
                    ".getImageData(0, 0, 240, 240).data.some(v => v !== 0)"
                )
                page.wait_for_function("!busy")
                page.keyboard.press("ArrowLeft")
                wait_for(lambda: db.counts()["labeled"] == 1, 20, "the first label")
                assert db.labels()[-1][0] == first and db.labels()[-1][3] == 1.0
                page.wait_for_function("!busy")  # a key pressed while a request is out is ignored
                page.keyboard.press("u")  # undo: the query is pending again
                wait_for(lambda: db.counts()["labeled"] == 0, 20, "the undo")
                page.wait_for_function(f"document.body.dataset.query === '{first}'")
                for key, count in (("ArrowRight", 1), ("ArrowUp", 2), ("ArrowDown", 2)):
                    # a key pressed while no query is shown does nothing: wait for one
                    page.wait_for_function("!busy && document.body.dataset.query !== ''")
                    before = page.evaluate("document.body.dataset.query")
                    page.keyboard.press(key)
                    page.wait_for_function(f"document.body.dataset.query !== '{before}'")
                    wait_for(lambda c=count: db.counts()["labeled"] == c, 20, key)
                assert "labeled 2 of 4" in page.inner_text("#status")
                assert db.counts()["skipped"] == 1
                page.wait_for_function("!busy && document.body.dataset.query !== ''")
                page.keyboard.press("ArrowLeft")  # the 4th answer completes the gather stage
                wait_for(lambda: db.counts()["labeled"] == 3, 20, "the last label")
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
        out, _ = gather.communicate(timeout=120)
        assert gather.returncode == 0, out
        labels = db.labels()
        assert [r[3] for r in labels] == [0.0, 0.5, 1.0]
        db.close()
    finally:
        if gather.poll() is None:
            gather.kill()

    # the reward model trains on exactly those labels
    pre = cli(
        "prefs",
        "pretrain",
        "--prefs",
        run_id,
        "--set",
        "prefs.pretrain_updates=10",
        "--set",
        "prefs.round_updates=10",
        "--no-progress",
    )
    assert pre.returncode == 0
    runs = sorted(p for p in home.iterdir() if p.is_dir() and p.name != run_id)
    metrics = read_metrics(runs[-1] / "seeds" / "0" / "metrics.csv")
    assert metrics["prefs/labels"][1][-1] == 3  # the 'equal' counts; 'can't tell' is dropped
    assert metrics["reward_model/updates"][1][-1] == 10
    pairs = metrics["reward_model/pairs_train"][1][-1] + metrics["reward_model/pairs_val"][1][-1]
    assert pairs == 3
