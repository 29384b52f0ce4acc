"""Pixel smoke test: a few hundred steps on Pong through the real CLI, with the `atari` extra."""

import json

import pytest
import torch

from backflip.algos import get_algo
from backflip.envs import make_vec
from backflip.runs.archive import load_run, resolve_run
from backflip.telemetry import read_metrics

pytest.importorskip("ale_py")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
def test_trains_on_pong_frames_and_the_checkpoint_acts_on_them(cli, home, algo):
    proc = cli(
        "train",
        algo,
        "--env",
        "PongNoFrameskip-v4",
        "--seeds",
        "1",
        "--steps",
        "256",
        "--set",
        "eval_episodes=1",
        *(["--set", "learning_starts=64", "--set", "log_every=64"] if algo == "dqn" else []),
        "--no-progress",
        "--json",
    )
    record = json.loads(proc.stdout)  # the "run ID: ..." line goes to stderr
    assert record["status"] == "finished", record
    seed = record["seeds"][0]
    assert -21 <= seed["final_eval_return"] <= 21  # a whole game's raw score
    run_dir = resolve_run(home, record["id"])
    metrics = read_metrics(run_dir / "seeds" / "0" / "metrics.csv")
    loss = "train/loss" if algo == "dqn" else "train/value_loss"
    assert loss in metrics and "eval/return_mean" in metrics
    checkpoint = torch.load(run_dir / "seeds/0/checkpoints/final.pt", weights_only=False)
    envs = make_vec("PongNoFrameskip-v4", 2)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype.name == "uint8"
    agent = get_algo(algo).load(checkpoint, envs.single_observation_space, envs.single_action_space)
    assert agent.act(obs).shape == (2,)
    if algo != "dqn":
        assert agent.value(obs).shape == (2,)
    assert load_run(run_dir)["config"]["env"]["frame_stack"] == 4
    envs.close()
