"""Observation adapters: one-hot Discrete observations, frame differences, Atari preprocessing."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

from backflip.algos import get_algo
from backflip.config import EnvOptions, resolve
from backflip.envs import AtariProtocolWarning, make_env, make_vec
from backflip.envs.wrappers import FrameDifference
from backflip.seedrun import SeedRun


def test_discrete_observations_become_one_hot():
    env = make_env("FrozenLake-v1")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (16,) and obs.dtype == np.float32
    assert obs.sum() == 1.0 and obs[0] == 1.0


def test_frame_difference_is_zero_at_reset_then_the_change():
    env = FrameDifference(gym.make("CartPole-v1"))
    first, _ = env.reset(seed=0)
    assert (first == 0).all()
    raw = gym.make("CartPole-v1")
    o0, _ = raw.reset(seed=0)
    o1, *_ = raw.step(1)
    diff, *_ = env.step(1)
    np.testing.assert_allclose(diff, o1 - o0, rtol=1e-6)
    assert env.observation_space.contains(diff)


def test_training_runs_on_frame_differences():
    cfg = resolve("a2c", "CartPole-v1", [0], 2048, set_values={"env.frame_diff": "true"})
    rows = []
    run = SeedRun(cfg, 0, on_row=lambda step, row: rows.append(row))
    get_algo("a2c").train(cfg.hp, run)
    run.close()
    # the policy saw differences: their mean is ~0 in every dimension
    assert rows[0]["env/obs_absmean_max"] < 0.1
    assert np.isfinite(run.result["eval_return"])


def test_atari_preprocessing_gives_stacked_uint8_frames():
    pytest.importorskip("ale_py")
    envs = make_vec("PongNoFrameskip-v4", 2)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert envs.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    for _ in range(50):
        obs, reward, *_ = envs.step(envs.action_space.sample())
        assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
    assert obs[:, -1].std() > 0  # the newest frame is a real screen
    envs.close()


def test_atari_ids_unlike_the_papers_warn_and_noframeskip_does_not():
    pytest.importorskip("ale_py")
    with pytest.warns(AtariProtocolWarning, match=r"sticky actions.*PongNoFrameskip-v4"):
        make_env("ALE/Pong-v5").close()
    with pytest.warns(AtariProtocolWarning, match="2-4 \\(random\\) emulator frames"):
        make_env("Pong-v4").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", AtariProtocolWarning)
        make_env("PongNoFrameskip-v4").close()


def test_a_lost_life_ends_the_training_episode_but_not_the_game():
    pytest.importorskip("ale_py")
    train_env = make_env("BreakoutNoFrameskip-v4")
    train_env.reset(seed=1)
    ale = train_env.unwrapped.ale
    lives, terminated, steps = ale.lives(), False, 0
    while not terminated:
        _, _, terminated, _, _ = train_env.step(0)  # never fire again: the ball is lost
        steps += 1
    assert ale.lives() == lives - 1 and not ale.game_over()
    train_env.reset()
    assert ale.lives() == lives - 1  # the game went on
    eval_env = make_env("BreakoutNoFrameskip-v4", EnvOptions(), evaluation=True)
    eval_env.reset(seed=1)
    for _ in range(steps):
        _, _, terminated, _, _ = eval_env.step(0)
        assert not terminated  # evaluation plays whole games
    train_env.close()
    eval_env.close()


@pytest.mark.slow
def test_a2c_learns_frozenlake_through_one_hot_observations():
    # FrozenLake-v1's 4x4 map without slipping: greedy success 1.0 vs ~0.015 for a random policy
    # (the slippery default needs far longer budgets for any policy-gradient method)
    gym.register(
        "FrozenLakeNotSlippery-v1",
        entry_point="gymnasium.envs.toy_text.frozen_lake:FrozenLakeEnv",
        kwargs={"is_slippery": False},
        max_episode_steps=100,
    )
    cfg = resolve("a2c", "FrozenLakeNotSlippery-v1", [0], 20_000)
    run = SeedRun(cfg, 0)
    get_algo("a2c").train(cfg.hp, run)
    run.close()
    assert run.result["eval_return"] == 1.0
