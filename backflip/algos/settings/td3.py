"""TD3: what `backflip train td3` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`).

Kept apart from `algos/td3.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backflip.algos.settings import box_probe_presets
from backflip.algos.settings.offpolicy import Settings

ACTION_SPACES = ("box",)
BOUNDED_ACTIONS = True  # tanh-squashed into the Box's bounds
DEFAULT_STEPS = 20_000


@dataclass
class Config(Settings):
    """TD3 hyperparameters. Defaults: cheap and reliable on Pendulum-v1 (docs/algorithms.md)."""

    learning_starts: int = 1000
    """env steps of uniformly random actions before the first update"""
    gamma: float = 0.98
    """discount factor"""
    n_critics: int = 2
    """Q-networks; targets take their minimum (clipped double-Q), the actor climbs the first"""
    policy_delay: int = 2
    """critic updates per actor (and target) update"""
    action_noise: float = 0.1
    """std of the Gaussian exploration noise, in [-1, 1] action units"""
    target_noise: float = 0.2
    """std of the target-policy smoothing noise (0: no smoothing)"""
    target_noise_clip: float = 0.5
    """clip of the target-policy smoothing noise"""


PRESETS: dict[str, dict] = {
    "Pendulum-v1": {"steps": 20_000},
    # `backflip probe td3`; probe 3 bootstraps: faster target critics
    **box_probe_presets({"tau": 0.02}, batch_size=128, learning_starts=200),
}
