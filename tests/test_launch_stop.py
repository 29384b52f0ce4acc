"""A stop request while seeds are still waiting for a worker ends the launch (it used to spin)."""

import signal
import subprocess
import sys
import time

from backflip.runs.archive import load_run
from tests.conftest import ROOT, cli_env


def test_sigint_with_pending_seeds_returns_and_marks_them_not_started(home):
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "train", "ppo", "--env", "CartPole-v1", "--seeds",
         "3", "--workers", "1", "--steps", "1000000", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT,
    )  # fmt: skip
    run_id = proc.stdout.readline().split()[1].rstrip(":")
    metrics = home / run_id / "seeds" / "0" / "metrics.csv"
    deadline = time.time() + 60
    while time.time() < deadline and (not metrics.exists() or metrics.stat().st_size < 2000):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)  # before the fix: never returned, 100% CPU
    assert proc.returncode == 130, err
    seeds = load_run(home / run_id)["seeds"]
    assert [s["status"] for s in seeds] == ["interrupted"] * 3
    assert [s.get("error") for s in seeds[1:]] == ["not started: the launcher was stopped"] * 2


def test_max_wall_s_stops_a_seed_that_then_finishes_as_at_the_end_of_its_budget(cli, home):
    import json

    out = cli(
        "train", "ppo", "--env", "CartPole-v1", "--steps", "10000000", "--set", "max_wall_s=3",
        "--set", "eval_episodes=2", "--no-progress", "--json",
    )  # fmt: skip
    record = json.loads(out.stdout)
    seed = record["seeds"][0]
    assert record["status"] == "finished" and seed["status"] == "finished"
    assert 0 < seed["steps"] < 10_000_000 and seed["stopped_at_wall_s"] == 3
    assert len(seed["final_eval_returns"]) == 2  # evaluated, unlike an interrupted seed
    assert (home / record["id"] / "seeds" / "0" / "checkpoints" / "final.pt").exists()
