"""DDPG: what `backflip train ddpg` accepts — TD3's settings with its three fixes off (`Config`),
and TD3's presets (`PRESETS`).

Kept apart from `algos/ddpg.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backflip.algos.settings import td3

ACTION_SPACES = ("box",)
BOUNDED_ACTIONS = True  # tanh-squashed into the Box's bounds
DEFAULT_STEPS = 20_000


@dataclass
class Config(td3.Config):
    """DDPG hyperparameters: TD3's without its three fixes. Defaults: cheap and reliable on
    Pendulum-v1 (docs/algorithms.md)."""

    n_critics: int = 1
    """Q-networks (DDPG: one; TD3's twin critics and the minimum of their targets curb
    overestimation)"""
    policy_delay: int = 1
    """critic updates per actor (and target) update (DDPG: every one)"""
    target_noise: float = 0.0
    """std of the target-policy smoothing noise (DDPG: none)"""
    target_noise_clip: float = 0.0
    """clip of the target-policy smoothing noise"""


PRESETS = td3.PRESETS  # rl-zoo's Pendulum-v1 entry is the same for both, and so are the probes'
