"""CEM: what `backflip train cem` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`).

Kept apart from `algos/cem.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTION_SPACES = ("discrete", "box")
BOUNDED_ACTIONS = True  # tanh-squashed into the Box's bounds
DEFAULT_STEPS = 100_000


@dataclass
class Config:
    """CEM hyperparameters. Defaults: a linear policy; solved CartPole-v1 on seeds 0-19 within
    1e5 steps (docs/algorithms.md, "CEM")."""

    population: int = 64
    """candidates per generation"""
    elite_frac: float = 0.25
    """fraction of the population kept to refit the distribution"""
    episodes: int = 1
    """episodes per candidate (its score is their mean return)"""
    init_std: float = 1.0
    """initial standard deviation of every parameter (the mean starts at 0)"""
    extra_std: float = 0.1
    """extra standard deviation added after each refit, decayed linearly to 0 over the budget"""
    hidden: tuple[int, ...] = ()
    """hidden layer sizes of the policy (empty: linear)"""
    activation: str = "tanh"
    """tanh, relu, elu or leaky_relu"""


PRESETS = {"CartPole-v1": {"steps": 100_000}}


def budget(hp: Config, steps: int, episode_limit: int | None) -> tuple[int | None, str]:
    """CEM scores whole generations (every candidate plays whole episodes) and stops after the
    first generation that reaches the budget: how far past it depends on the episodes' lengths."""
    per_generation = hp.population * hp.episodes
    why = (
        f"cem plays whole generations of population × episodes = {hp.population} × "
        f"{hp.episodes} whole episodes and stops after the first that reaches the budget"
    )
    if episode_limit:
        most = steps - 1 + per_generation * episode_limit
        why += f": at most {most:,} with episodes of at most {episode_limit:,} steps"
    return None, why
