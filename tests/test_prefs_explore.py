"""Exploration before the first labels (`prefs.explore_steps`, prefs/explore.py): the bonus, where
the labels fall, and what it buys on a task whose goal a random policy's clips miss."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

from backflip.prefs.explore import NEIGHBOURS, NoveltyBonus
from backflip.telemetry import read_metrics


def test_the_bonus_pays_the_distance_to_the_kth_nearest_recent_observation():
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    bonus = NoveltyBonus(lambda o: np.asarray(o, np.float64), memory=64)
    for _ in range(20):  # 160 observations: the ring keeps the last 64
        bonus(rng.normal(size=(8, 3)))
    bank = bonus.bank.numpy()[: bonus.filled].copy()
    assert bonus.filled == 64
    x = np.vstack([np.zeros((1, 3)), np.full((1, 3), 6.0), np.zeros((1, 3))])
    mean, var = bonus.moments.mean, bonus.moments.var
    absorbing = np.array([False, False, True])
    got = bonus(x, absorbing)
    kth = np.sort(np.linalg.norm(x[:, None] - bank[None], axis=-1), axis=1)[:, NEIGHBOURS - 1]
    raw = np.log1p(kth)
    m = bonus.moments  # the moments include this step's two live rewards
    assert m.count > 0 and (m.mean, m.var) != (mean, var)
    np.testing.assert_allclose(got[:2], ((raw - m.mean) / np.sqrt(m.var + 1e-8))[:2], rtol=1e-4)
    assert got[1] > got[0]  # far from everything seen pays more than the crowd's centre
    assert got[2] == 0.0  # a step in the absorbing state: the mean, nothing new
    assert bonus.filled == 64 and np.allclose(bonus.bank.numpy()[(bonus.at - 1) % 64], 6.0)
    # a frame is subsampled to at most MAX_FEATURES pixels before the distances
    frames = NoveltyBonus(None, image=True)  # pixels in [0, 1], no normalizer
    assert frames(np.zeros((2, 4, 84, 84), np.uint8)).shape == (2,)
    assert frames.bank.shape[1] <= 512
    bright = frames(np.full((1, 4, 84, 84), 255, np.uint8))
    assert bright[0] > 0 and float(frames.bank[frames.at - 1].max()) == 1.0


def _cliff(cli, *extra, steps=8192, seed=0):
    out = cli(
        *("prefs", "train", "ppo", "--env", "CliffWalking-v1", "--steps", steps),
        *("--seed-start", seed, "--seeds", 1, "--no-progress", "--json"),
        *extra,
    )
    return json.loads(out.stdout)


def test_the_first_labels_are_asked_when_exploration_ends(cli):
    """Exploring for 4,096 steps: no query before them, the initial half asked at their end, the
    rest while the policy trains on r̂; said at launch; reproducible."""
    sets = ("--labels", 40, "--set", "prefs.explore_steps=4096", "--set", "eval_episodes=2")
    runs = [_cliff(cli, *sets) for _ in range(2)]
    folder = f"{runs[0]['dir']}/seeds/0"
    with sqlite3.connect(f"{folder}/prefs.sqlite") as db:
        steps = [s for (s,) in db.execute("SELECT step FROM queries ORDER BY id")]
    assert len(steps) == 40
    assert min(steps) >= 4096
    assert steps.count(min(steps)) == 20  # the initial labels, all at exploration's end
    assert runs[0]["config"]["prefs"]["explore_steps"] == 4096
    a, b = (read_metrics(f"{r['dir']}/seeds/0/metrics.csv") for r in runs)
    for name in ("reward_model/train_loss", "eval/return_mean", "prefs/labels"):
        assert np.array_equal(a[name][1], b[name][1]), name
    assert a["reward_model/train_loss"][0][0] >= 4096  # the model trains after exploration
    # the doctor sees where the reward changed from the bonus to r̂
    steps, exploring = a["prefs/exploring"]
    assert exploring[0] == 1.0 and exploring[-1] == 0.0
    from backflip.doctor.sources import load_run

    _, seeds, _ = load_run(Path(runs[0]["dir"]))
    assert 4096 <= seeds[0].reward_switch <= 4096 + 2048
    # the task's return of every training episode, for the doctor (episodes.csv holds r̂)
    from backflip.telemetry import read_episodes

    _, rets, _ = read_episodes(f"{folder}/true_episodes.csv")
    assert len(rets) > 5 and np.all(rets <= -13) and np.all(rets == np.round(rets))


def test_exploration_that_leaves_no_steps_for_the_labels_is_refused(cli):
    bad = cli(
        *("prefs", "train", "ppo", "--env", "CliffWalking-v1", "--steps", 10000, "--seeds", 1),
        *("--set", "prefs.explore_steps=9000", "--no-progress"),
        check=False,
    )
    assert bad.returncode == 2, bad.stderr
    assert "prefs.explore_steps=9,000 leaves no steps for the labels" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_cliffwalking_reaches_its_goal_from_labels_only_after_exploring(cli):
    """CliffWalking's goal ends the episode; a random walk reaches it once in ~6,000 steps, so
    the first labels' clips never show it and the policy never learns to go there (-1,000: it
    stands safely until the time limit). Paid for novelty first, the policy walks the grid and
    the labels show the goal: the shortest path's -13, or the safe one's -15 to -17."""
    sets = ("--labels", 100, "--steps", 20000)
    for seed in (0, 1):
        run = _cliff(cli, *sets, "--set", "prefs.explore_steps=8000", seed=seed)
        ret = run["seeds"][0]["final_eval_return"]
        assert ret >= -17, (seed, ret)
    plain = _cliff(cli, *sets, seed=0)  # the same run without exploring
    assert plain["seeds"][0]["final_eval_return"] <= -100


def test_an_env_whose_end_a_random_policy_seldom_reaches_explores_first():
    """Derived from the env (prefs/derive.py): exploration where a random policy's episodes
    end early in some but at most half of them (CliffWalking: 1 of 6); not where they always
    end (CartPole, FrozenLake's holes) or never do (HalfCheetah, or MountainCar: a random
    policy cannot tell an end that never comes from one it never reached)."""
    from backflip.prefs.derive import EnvFacts, derived_settings, look

    def facts(episodes, terminated):
        return EnvFacts((48,), True, "Discrete(4)", 1000, episodes, terminated, 500.0)

    steps, why = derived_settings(facts(6, 1), 100_000)["prefs.explore_steps"]
    assert steps == 10_000 and "1 of 6 episodes" in why
    for never in (facts(20, 20), facts(20, 0), facts(10, 6)):
        assert "prefs.explore_steps" not in derived_settings(never, 100_000)
    from backflip.config import EnvOptions

    cliff = look("CliffWalking-v1", EnvOptions(max_episode_steps=1000))
    assert "prefs.explore_steps" in derived_settings(cliff, 100_000)
    assert "prefs.explore_steps" not in derived_settings(look("CartPole-v1", None), 100_000)
