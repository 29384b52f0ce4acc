"""PPO learns, with its documented defaults and presets, on fixed seeds and budgets (slow)."""

import json

import pytest

from backflip.runs.archive import load_run


def train_and_load(cli, home, *args):
    proc = cli("train", *args, "--workers", "2", "--no-progress", timeout=1800)
    run_id = proc.stdout.split()[1].rstrip(":")
    return load_run(home / run_id)


@pytest.mark.slow
def test_ppo_solves_cartpole_within_1e5_steps_on_every_seed(cli, home):
    record = train_and_load(
        cli, home, "ppo", "--env", "CartPole-v1", "--seeds", "3", "--steps", "100000"
    )
    finals = [s["final_eval_return"] for s in record["seeds"]]
    assert all(s["steps"] <= 100_000 for s in record["seeds"])
    assert min(finals) >= 475, finals


@pytest.mark.slow
def test_ppo_pendulum_preset_reaches_minus_250_on_every_seed(cli, home):
    record = train_and_load(cli, home, "ppo", "--env", "Pendulum-v1", "--seeds", "3")
    finals = [s["final_eval_return"] for s in record["seeds"]]
    assert record["config"]["steps"] <= 300_000
    assert min(finals) >= -250, json.dumps(finals)
