"""SAC: what `backflip train sac` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`).

Kept apart from `algos/sac.py` (the algorithm, which imports torch) so that resolving and
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
    """SAC hyperparameters. Defaults: cheap and reliable on Pendulum-v1 (docs/algorithms.md)."""

    lr: float = 1e-3
    """Adam learning rate of the actor, the critics and the temperature"""
    tau: float = 0.005
    """Polyak rate of the target critics"""
    target_every: int = 1
    """gradient steps between target-critic updates"""
    alpha_init: float = 1.0
    """initial entropy temperature alpha"""
    autotune_alpha: bool = True
    """learn alpha to keep the policy's entropy near target_entropy (false: alpha stays at alpha_init)"""
    target_entropy: float = 0.0
    """entropy the temperature aims for, nats (0: -dim(A), the usual choice)"""


PRESETS: dict[str, dict] = {
    "Pendulum-v1": {"steps": 20_000},
    # `backflip probe sac`; probe 3 bootstraps: faster target critics, and a smaller initial
    # temperature: the soft value V(0) = γ (Q(1, ·) − α log π) is γ plus an entropy term until α
    # decays (0.58 with α₀ = 1)
    **box_probe_presets({"tau": 0.02, "alpha_init": 0.1}, batch_size=128),
}
