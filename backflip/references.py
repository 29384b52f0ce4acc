"""Reference scores for normalizing returns across tasks: (R - R_random) / (R_ref - R_random).

Returns on different envs live on different scales (CartPole's 500, Pendulum's -150), so an
aggregate over tasks — rliable's IQM, optimality gap and performance profiles — is taken on
normalized scores: 0 is a uniformly random policy, 1 is the reference. This table is the one
place those two numbers live; `backflip compare`, `backflip bench` and `backflip plan` read it
through `normalize`. docs/experiments.md prints the same table (a test checks they agree).

- **random**: the mean return of uniformly random actions over 100 episodes on Gymnasium's
  registered env (seeds 0-99), measured by `benchmarks/random_scores.py` (2026-11-25; its output
  is in docs/benchmarks.md), rounded to its standard error.
- **reference**: Gymnasium's registered `reward_threshold` — the env's own definition of
  "solved" — where it has one, so 1.0 means solved and the optimality gap (gamma = 1) is the
  distance to solved. Pendulum-v1 has none: its reference is the best entry for it in
  rl-baselines3-zoo's `benchmark.md` (TD3, 2e4 steps, -151.855, one run).

A score above the reference normalizes above 1 (CartPole's 500 is 1.05). An env missing here, or
a run whose return is measured differently (`env.reward_scale`, `env.max_episode_steps`: the
references are for the registered env), has no normalized score: aggregating it across tasks is
refused with the reason, never done on raw returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backflip.errors import UserError

THRESHOLD = "Gymnasium's registered reward_threshold"
MEASURED = "benchmarks/random_scores.py, 100 episodes"


@dataclass(frozen=True)
class Reference:
    random: float
    reference: float
    reference_source: str = THRESHOLD
    random_source: str = MEASURED


REFERENCES: dict[str, Reference] = {
    "CartPole-v1": Reference(25.0, 475.0),
    "Acrobot-v1": Reference(-500.0, -100.0),
    "MountainCar-v0": Reference(-200.0, -110.0),
    "MountainCarContinuous-v0": Reference(-33.3, 90.0),
    "Pendulum-v1": Reference(
        -1197.0, -151.855, "rl-baselines3-zoo benchmark.md: TD3, 2e4 steps (one run)"
    ),
    "InvertedPendulum-v5": Reference(5.6, 950.0),
    "InvertedDoublePendulum-v5": Reference(50.0, 9100.0),
    "Reacher-v5": Reference(-42.9, -3.75),
    "Swimmer-v5": Reference(3.2, 360.0),
    "Hopper-v5": Reference(17.0, 3800.0),
    "HalfCheetah-v5": Reference(-268.0, 4800.0),
    "Ant-v5": Reference(-47.0, 6000.0),
}

# env.* settings that change the return itself; the references hold only at their defaults
DEFAULT_SCORE_SETTINGS = {"env.reward_scale": 1.0, "env.max_episode_steps": 0}


def reference(env: str) -> Reference:
    """The env's reference scores, or a UserError saying there are none."""
    ref = REFERENCES.get(env)
    if ref is None:
        raise UserError(
            f"no reference scores for {env}: scores across tasks are normalized by a random and "
            f"a reference score per env (backflip/references.py has: {', '.join(REFERENCES)})"
        )
    return ref


def why_not_normalizable(env: str, settings: dict | None = None) -> str | None:
    """Why returns on `env` with these `env.*` settings can't be normalized, or None."""
    if env not in REFERENCES:
        return f"no reference scores for {env} (backflip/references.py)"
    for key, default in DEFAULT_SCORE_SETTINGS.items():
        value = (settings or {}).get(key)
        if value is not None and value != default:
            return f"{key}={value} changes the return: the references of {env} do not apply"
    return None


def normalize(env: str, scores):
    """(R - R_random) / (R_ref - R_random) for one env: a float, an array or a list (None kept)."""
    ref = reference(env)
    scale = ref.reference - ref.random
    if isinstance(scores, list | tuple):
        return [None if s is None else (float(s) - ref.random) / scale for s in scores]
    return (np.asarray(scores, dtype=np.float64) - ref.random) / scale


def markdown_table() -> str:
    """The table as docs/experiments.md shows it."""
    rows = [
        "| env | random | reference | reference from |",
        "|---|---|---|---|",
    ]
    for env, r in REFERENCES.items():
        rows.append(f"| {env} | {r.random:g} | {r.reference:g} | {r.reference_source} |")
    return "\n".join(rows)
