"""`backflip prefs check-reward`: a saved reward model against the true reward on a policy's play."""

from __future__ import annotations

import json

import numpy as np

from backflip.prefs.check import format_check, summarize
from tests.test_prefs import as_json, small_run


def test_the_summary_groups_segments_by_sign_where_the_reward_is_sparse_else_by_thirds():
    rng = np.random.default_rng(0)
    true = rng.choice([-1.0, 0.0, 0.0, 1.0], 400)
    # a model that knows losses and nothing of gains: the picture of Pong from preferences
    pred = np.where(true < 0, -1.0, 0.0) + rng.normal(0, 0.3, 400)
    c = summarize(pred, true)
    groups = c["groups"]
    assert c["grouping"] == "sign" and groups["high"]["true_mean"] == 1.0
    assert sum(g["segments"] for g in groups.values()) == c["segments"] == 400
    assert groups["low"]["separation"] < -2.5
    assert abs(groups["high"]["separation"]) < 0.5
    assert 0.3 < c["segment_corr"] < 0.8
    assert "barely rewards what gains true reward" in format_check(
        {**c, "run": "r", "seed": 0, "env_id": "E", "policy": "p", "policy_seed": 0,
         "checkpoint": "final.pt", "epsilon": 0.0, "steps": 1, "episodes": [], "segment_length": 25}
    )  # fmt: skip
    # a model that ranks both: gains well above, losses well below, a high correlation
    c = summarize(true + rng.normal(0, 0.3, 400), true)
    assert c["groups"]["high"]["separation"] > 2.5 > -2.5 > c["groups"]["low"]["separation"]
    assert c["segment_corr"] > 0.9
    # a dense cost (Pendulum's): thirds of the true return, each a third of the segments
    cost = -rng.uniform(0, 400, 300)
    c = summarize(cost + rng.normal(0, 20, 300), cost)
    assert c["grouping"] == "thirds"
    assert all(99 <= c["groups"][g]["segments"] <= 101 for g in ("high", "middle", "low"))
    assert c["groups"]["high"]["true_mean"] > c["groups"]["middle"]["true_mean"]
    assert c["groups"]["high"]["separation"] > 2 and c["groups"]["low"]["separation"] < -2
    # ... where the verdict on gains is not given (the top third may differ little in return)
    flat = {**c, "groups": {**c["groups"], "high": {**c["groups"]["high"], "separation": 0.1}}}
    about = {"run": "r", "seed": 0, "env_id": "E", "policy": "p", "policy_seed": 0}
    more = {"checkpoint": "final.pt", "epsilon": 0.0, "steps": 1, "episodes": []}
    assert "barely" not in format_check({**flat, **about, **more, "segment_length": 25})
    # equal returns are never split between two groups
    steps = np.repeat([3.0, -8.0, -8.0, -20.0], 30)
    c = summarize(rng.normal(0, 1, 120), steps)
    assert [c["groups"][g]["true_mean"] for g in ("high", "middle", "low")] == [3.0, -8.0, -20.0]
    # nothing to compare: a constant true return
    c = summarize(np.zeros(5), np.zeros(5))
    assert c["segment_corr"] is None and c["groups"]["high"]["separation"] is None


def test_check_reward_on_the_runs_own_policy_and_on_another(cli):
    record = small_run(cli)
    run = record["id"]
    out = cli("prefs", "check-reward", run, "--steps", "1000", "--epsilon", "0.1", "--json")
    c = json.loads(out.stdout, parse_constant=lambda name: 1 / 0)  # strict: no NaN
    # episodes of 100 steps (env.max_episode_steps) in whole segments of 25
    assert c["run"] == c["policy"] == run and c["segments"] == 40 and len(c["episodes"]) == 10
    assert sum(g["segments"] for g in c["groups"].values()) == 40
    assert -1 <= c["segment_corr"] <= 1
    text = cli("prefs", "check-reward", run, "--steps", "500").stdout
    assert f"reward model of {run}" in text and "correlation" in text
    # another run's policy on the same env (PPO on the true reward), and one on another env
    plain = as_json(
        cli(
            "train", "ppo", "--env", "MovingDotLowDim-v0", "--steps", "1024", "--seeds", "1",
            "--set", "num_steps=64", "--set", "env.max_episode_steps=100", "--json",
        ).stdout
    )  # fmt: skip
    c = as_json(cli("prefs", "check-reward", run, "--policy", plain["id"], "--json").stdout)
    assert c["policy"] == plain["id"] and c["segments"] == 400
    other = as_json(
        cli("train", "ppo", "--env", "CartPole-v1", "--steps", "512", "--seeds", "1",
            "--set", "num_steps=64", "--json").stdout
    )  # fmt: skip
    # other env.* options that keep the observations' and actions' spaces (a time limit): played
    # on the reward model's env; options that change them (scaled observations): refused
    longer = as_json(
        cli("train", "ppo", "--env", "MovingDotLowDim-v0", "--steps", "512", "--seeds", "1",
            "--set", "num_steps=64", "--set", "env.max_episode_steps=200", "--json").stdout
    )  # fmt: skip
    c = as_json(cli("prefs", "check-reward", run, "--policy", longer["id"], "--json").stdout)
    assert c["policy"] == longer["id"] and c["segments"] == 400 and len(c["episodes"]) == 100
    scaled = as_json(
        cli("train", "ppo", "--env", "MovingDotLowDim-v0", "--steps", "512", "--seeds", "1",
            "--set", "num_steps=64", "--set", "env.obs_scale=2", "--json").stdout
    )  # fmt: skip
    for args, says in (
        (["--policy", other["id"]], "plays CartPole-v1"),
        (["--policy", scaled["id"]], "other observations or actions"),
        (["--steps", "0"], "--steps: must be a whole number >= 1"),
        (["--epsilon", "2"], "--epsilon: must be a number from 0 to 1"),
        (["--checkpoint", "123"], "no checkpoint at step 123"),
    ):
        bad = cli("prefs", "check-reward", run, *args, check=False)
        assert bad.returncode == 2 and says in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
    bad = cli("prefs", "check-reward", plain["id"], check=False)
    assert bad.returncode == 2 and "not a preference run" in bad.stderr


def test_play_keeps_each_episodes_next_observations_and_its_end():
    import gymnasium as gym

    from backflip.prefs.check import play

    class Left:  # a policy that always pushes left: CartPole falls within ~10 steps
        def act(self, obs):
            return np.zeros(len(obs), np.int64)

    env = gym.make("CartPole-v1")
    episodes = play(Left(), env, 50, 0.0, np.random.default_rng(0))
    assert sum(len(e[2]) for e in episodes) == 50
    *ended, last = episodes
    assert ended and all(e[4] for e in ended) and not last[4]
    for obs, act, rew, nxt, done in episodes:
        assert np.array_equal(nxt[:-1], obs[1:]) and (act == 0).all() and (rew == 1).all()
        if done:  # the terminal observation: the pole past its limit or the cart out
            assert abs(nxt[-1][2]) > 0.2095 or abs(nxt[-1][0]) > 2.4
