"""End to end: preference learning on MovingDot (low-dim) beats a random policy.

Slow: ~2-3 min on 2 cores (one seed, 40k agent steps, 200 synthetic labels, sync mode).
"""

from __future__ import annotations

import pytest

from tests.test_prefs import as_json

pytestmark = pytest.mark.slow


def test_moving_dot_from_synthetic_preferences_beats_random(cli):
    # a random policy scores about 0 on MovingDot (a random walk); the best is ~90
    out = cli(
        "prefs",
        "train",
        "ppo",
        "--env",
        "MovingDotLowDim-v0",
        "--steps",
        "40000",
        "--labels",
        "200",
        "--set",
        "prefs.mode=sync",
        "--set",
        "eval_episodes=20",
        "--json",
        "--no-progress",
    )
    record = as_json(out.stdout)
    assert record["status"] == "finished"
    ret = record["seeds"][0]["final_eval_return"]
    assert ret > 30, f"true eval return {ret:.1f} is not clearly above a random policy's ~0"
