"""Off-policy learning tests: the CLI with the documented defaults and presets, fixed seeds and
budgets, a threshold on every seed's final greedy evaluation (10 episodes).

DQN must solve CartPole-v1 (>= 475) on every one of seeds 0-4 within rl-zoo's 5e4 steps; SB3's
DQN with rl-zoo's settings fails one seed in three here (docs/algorithms.md, "DQN", says why and
what backflip does instead). DDPG, TD3 and SAC must reach -200 on Pendulum-v1 within rl-zoo's
2e4 steps, on seeds 0-2, judged on 50 evaluation episodes: Pendulum's return depends on the start
state so much that 10 episodes have a standard error near 30 (DDPG's converged seed-0 policy
scored -202 on its 10 evaluation starts and -172 on 50). Wall times: docs/algorithms.md.
"""

import json

import pytest

from backflip.runs.archive import load_run


def finals(cli, home, algo, env, seeds, steps, *sets):
    proc = cli(
        "train", algo, "--env", env, "--seeds", str(seeds), "--steps", str(steps),
        *sets, "--workers", "2", "--no-progress", timeout=1800,
    )  # fmt: skip
    record = load_run(home / proc.stdout.split()[1].rstrip(":"))
    assert all(s["steps"] == steps for s in record["seeds"]), record["seeds"]
    return [s["final_eval_return"] for s in record["seeds"]]


@pytest.mark.slow
def test_dqn_solves_cartpole_on_every_one_of_five_seeds_within_5e4_steps(cli, home):
    # DQN training is chaotic: a rounding-level change (Adam eps 1.1e-8) gives every seed another
    # trajectory. With one-step targets that cost 3-4 seeds in 10; the 3-step defaults ended at
    # >= 475 on 49 of 50 such runs (docs/algorithms.md, "How reliable the defaults really are").
    # If this turns red after a change that only moves rounding errors, rerun
    # benchmarks/dqn_seed_sensitivity.py before blaming the change, and do not lower the bar.
    returns = finals(cli, home, "dqn", "CartPole-v1", 5, 50_000)
    assert min(returns) >= 475, json.dumps(returns)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_continuous_control_reaches_minus_200_on_pendulum_within_2e4_steps(cli, home, algo):
    returns = finals(cli, home, algo, "Pendulum-v1", 3, 20_000, "--set", "eval_episodes=50")
    assert min(returns) >= -200, f"{algo} on Pendulum-v1: {json.dumps(returns)}"
