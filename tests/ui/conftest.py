"""Fixtures of the UI tests: a real archive with two trained runs, and a live server.

Both are session-scoped: the runs are trained once (two PPO runs of 2 seeds × 2,048 CartPole
steps, one with videos; about 10 s on 2 idle cores) and one `backflip ui` process serves them.
"""

from __future__ import annotations

import pytest

from tests.ui.support import Server, backflip, real_finding, run_id_of


@pytest.fixture(scope="session")
def ui_archive(tmp_path_factory) -> dict:
    """Two finished runs, both with rewards ×1000 (a fault the doctor flags; the same scale, so
    their scores compare): A with videos, B with an HTML-looking question."""
    home = tmp_path_factory.mktemp("ui") / "archive"
    home.mkdir()
    common = ["--env", "CartPole-v1", "--seeds", "2", "--workers", "2", "--steps", "2048"]
    a = backflip(
        home,
        "train",
        "ppo",
        *common,
        "--set",
        "epochs=1",
        "--set",
        "video_every=2048",
        "--set",
        "env.reward_scale=1000",  # a real fault for the real doctor to find
        "-m",
        "question A: does the UI show this run?",
        "--tag",
        "ui-test",
        "--no-progress",
    )
    b = backflip(
        home,
        "train",
        "ppo",
        *common,
        "--set",
        "epochs=1",
        "--set",
        "lr=3e-4",
        "--set",
        "env.reward_scale=1000",
        "-m",
        "question B <b>not bold</b>",
        "--no-progress",
    )
    ids = {"a": run_id_of(a.stdout), "b": run_id_of(b.stdout)}
    finding = real_finding(home / ids["a"], "reward-scale")
    backflip(home, "note", "--focus", "make the UI show every run")
    backflip(home, "note", "--run", ids["a"], "A looks fine at a glance")
    return {"home": home, **ids, "finding": finding}


@pytest.fixture(scope="session")
def ui_server(ui_archive):
    server = Server(ui_archive["home"])
    yield server
    server.stop()
