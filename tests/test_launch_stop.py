"""Stopping a launch: Ctrl-C, `timeout -s INT`, SIGTERM to the launcher or SIGINT to one seed end
each seed `interrupted` with a final checkpoint; seeds still waiting for a worker are marked not
started (the launch used to spin)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

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


def test_max_steps_stops_at_equal_steps_with_the_budgets_schedule(cli, home):
    """`max_steps` ends a seed at the first row past it, evaluated, on the learning-rate
    schedule of its whole budget: its rows are those of the longer run up to there."""
    import json

    base = ("train", "ppo", "--env", "CartPole-v1", "--set", "eval_episodes=2", "--no-progress",
            "--json", "--set", "anneal_lr=true")  # fmt: skip
    cut = json.loads(cli(*base, "--steps", "20000", "--set", "max_steps=4096").stdout)
    seed = cut["seeds"][0]
    assert cut["status"] == "finished" and seed["status"] == "finished"
    assert seed["steps"] == seed["stopped_at_step"] and 4096 <= seed["steps"] < 20000
    assert len(seed["final_eval_returns"]) == 2
    full = json.loads(cli(*base, "--steps", "20000", "--set", "max_steps=8192").stdout)
    short = json.loads(cli(*base, "--steps", str(seed["steps"])).stdout)

    def rows(record, upto):
        lines = (home / record["id"] / "seeds" / "0" / "metrics.csv").read_text().splitlines()
        keep = ("train/lr", "train/loss_pi", "rollout/ep_return_mean")
        return [
            (s, n, v) for s, _w, n, v in (x.split(",") for x in lines[1:])
            if int(s) < upto and n in keep  # the stop step holds the final row too
        ]  # fmt: skip

    from backflip.doctor.sources import load_run as load_seeds

    assert load_seeds(home / cut["id"])[1][0].budget == 4096  # the doctor's horizon: the stop
    assert rows(cut, seed["steps"]) == rows(full, seed["steps"])  # the same schedule
    assert rows(cut, seed["steps"]) != rows(short, seed["steps"])  # not a shorter budget's


def _start(home, seeds=2):
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "train", "ppo", "--env", "CartPole-v1", "--seeds",
         str(seeds), "--workers", str(seeds), "--steps", "1000000", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )  # fmt: skip
    run_id = proc.stdout.readline().split()[1].rstrip(":")
    deadline = time.time() + 120
    for seed in range(seeds):  # every seed is training
        metrics = home / run_id / "seeds" / str(seed) / "metrics.csv"
        while time.time() < deadline and (not metrics.exists() or metrics.stat().st_size < 2000):
            time.sleep(0.2)
    return proc, run_id


@pytest.mark.parametrize(
    "how",
    [
        "ctrl-c",  # the terminal signals the whole foreground process group
        "timeout -s INT",  # SIGINT to the launcher alone
        "SIGTERM",  # to the launcher alone
    ],
)
def test_a_stop_request_ends_every_seed_interrupted_with_a_final_checkpoint(home, how):
    proc, run_id = _start(home)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    seeds = load_run(home / run_id)["seeds"]
    assert [s["status"] for s in seeds] == ["interrupted"] * 2, seeds
    for s in seeds:  # stopped at an iteration boundary, checkpointed: `resume` goes on from here
        final = home / run_id / "seeds" / str(s["seed"]) / "checkpoints" / "final.pt"
        assert final.exists() and s["steps"] > 0
    assert f"backflip resume {run_id}" in out


def test_a_second_ctrl_c_stops_at_once(home):
    proc, run_id = _start(home, seeds=1)
    os.killpg(proc.pid, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    assert load_run(home / run_id)["seeds"][0]["status"] == "interrupted"


def test_sigint_to_one_seed_interrupts_it_with_a_final_checkpoint(home):
    proc, run_id = _start(home, seeds=1)
    pid = json.loads((home / run_id / "seeds" / "0" / "status.json").read_text())["pid"]
    os.kill(pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    seed = load_run(home / run_id)["seeds"][0]
    assert seed["status"] == "interrupted", err
    assert (home / run_id / "seeds" / "0" / "checkpoints" / "final.pt").exists()
    assert f"backflip resume {run_id}" in out


def test_compare_says_which_seeds_were_scored_before_their_budget_ended(home, cli):
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "train", "ppo", "--env", "CartPole-v1", "--seeds",
         "1", "--steps", "1000000", "--set", "eval_every=2000", "--set", "eval_episodes=2",
         "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    stopped = proc.stdout.readline().split()[1].rstrip(":")
    metrics = home / stopped / "seeds" / "0" / "metrics.csv"
    deadline = time.time() + 120
    while time.time() < deadline and (
        not metrics.exists() or "eval/return_mean" not in metrics.read_text()
    ):
        time.sleep(0.2)
    time.sleep(1)  # the evaluation's row is written; its result is the seed's last
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    seed = load_run(home / stopped)["seeds"][0]
    assert seed["status"] == "interrupted" and seed["final_eval_return"] is not None
    done = json.loads(
        cli("train", "ppo", "--env", "CartPole-v1", "--steps", "2048", "--seeds", "1",
            "--no-progress", "--json").stdout
    )["id"]  # fmt: skip
    report = json.loads(cli("compare", done, stopped, "--json").stdout)
    notes = [n for n in report["fairness"] if "stopped before the budget" in n]
    assert len(notes) == 1 and "interrupted, last evaluated at step" in notes[0], report["fairness"]
    assert "1,000,000 steps" in notes[0]
