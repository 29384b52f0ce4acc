"""Pixel smoke test: a few hundred steps on Pong through the real CLI, with the `atari` extra."""

import json

import numpy as np
import pytest
import torch

from backflip.algos import get_algo
from backflip.envs import make_vec
from backflip.runs.archive import load_run
from backflip.runs.index import resolve_run
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


def test_training_envs_run_in_ales_vector_env_with_the_same_spaces_and_semantics():
    from ale_py.vector_env import AtariVectorEnv

    from backflip.config import EnvOptions

    fast = make_vec("PongNoFrameskip-v4", 2)
    slow = make_vec("PongNoFrameskip-v4", 2, EnvOptions(atari_vector=False))
    evaluation = make_vec("PongNoFrameskip-v4", 2, evaluation=True)
    assert isinstance(fast, AtariVectorEnv)
    assert not isinstance(slow, AtariVectorEnv) and not isinstance(evaluation, AtariVectorEnv)
    assert fast.single_observation_space == slow.single_observation_space
    assert fast.single_action_space == slow.single_action_space
    for envs in (fast, slow):
        obs, _ = envs.reset(seed=0)
        obs, reward, *_ = envs.step(np.array([0, 1]))
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert set(np.unique(reward)) <= {-1, 0, 1}
        # stacked frames: consecutive observations share three frames
        nxt = envs.step(np.array([2, 3]))[0]
        assert np.array_equal(nxt[:, :3], obs[:, 1:])
        envs.close()
    evaluation.close()


def test_a_lost_life_ends_the_training_episode_but_not_the_game():
    envs = make_vec("BreakoutNoFrameskip-v4", 1)
    envs.reset(seed=0)
    lives = []
    for _ in range(3000):
        _, _, term, _, info = envs.step(np.array([3]))  # LEFT: the ball is soon missed
        lives.append(int(info["lives"][0]))
        if len(lives) > 1 and term[0]:
            break
    assert term[0] and lives[-1] == 4, lives[-5:]  # one life lost: the episode ends...
    _, _, term, _, info = envs.step(np.array([1]))
    assert int(info["lives"][0]) == 4 and not term[0]  # ...and the game goes on with 4 lives
    envs.close()


@pytest.mark.parametrize(
    "args, preset, labels",
    [
        ((), "cpu", 1500),
        (("--preset", "paper"), "paper", 5500),
        (("--set", "device=cuda"), "paper", 5500),  # a GPU gets the paper's settings...
        (("--set", "device=cuda", "--preset", "cpu"), "cpu", 1500),  # ...unless told otherwise
    ],
)
def test_pong_has_a_cpu_preset_and_the_papers(cli, args, preset, labels):
    out = cli("prefs", "train", "ppo", "--env", "PongNoFrameskip-v4", *args, "--list-keys").stdout
    assert f"prefs.preset={preset} " in out
    assert f"prefs.labels={labels} " in out
    # the reward CNN: the ball and paddles as coordinates on a CPU, the paper's with dropout
    cnn, dropout = ("keypoints", "0.0") if preset == "cpu" else ("paper", "0.5")
    assert f"prefs.cnn={cnn} " in out and f"prefs.dropout={dropout} " in out
    assert "  epochs=3 " in out  # the policy: the PPO paper's Atari settings either way
