"""DQN: what `backflip train dqn` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`), the switches of `backflip ablate` (`ABLATIONS`).

Kept apart from `algos/dqn.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backflip.algos.settings.offpolicy import Settings

ACTION_SPACES = ("discrete",)
DEFAULT_STEPS = 50_000


@dataclass
class Config(Settings):
    """DQN hyperparameters. Defaults: rl-zoo's CartPole-v1 entry with Double DQN, 3-step
    targets, ε decayed over the first 10% instead of 16% and the learning rate annealed to 0.
    They solve CartPole-v1 within 5e4 steps on 49 of 50 runs (seeds 0-29 plus rounding-level
    variants on seeds 0-9); with one-step targets the same test gave 31 of 40
    (docs/algorithms.md, "DQN", "How reliable the defaults really are"). The replay and
    training schedule are the off-policy `Settings` (settings/offpolicy.py) with rl-zoo's values
    for DQN on CartPole; the rest is DQN's own."""

    hidden: tuple[int, ...] = (256, 256)
    """hidden layer sizes of the Q-network MLP"""
    lr: float = 2.3e-3
    """Adam learning rate"""
    batch_size: int = 64
    """transitions per gradient step"""
    buffer_size: int = 100_000
    """replay capacity in transitions (never more than the budget is allocated)"""
    learning_starts: int = 1000
    """env steps of uniformly random actions before the first update"""
    train_every: int = 256
    """env steps between training phases"""
    gradient_steps: int = 128
    """gradient steps per training phase"""
    tau: float = 1.0
    """target update rate: 1 copies the online network, < 1 is Polyak averaging"""
    cnn: str = "auto"
    """image observations: the Q-network's CNN, nature (DQN's; frames of at least 36x36),
    keypoints (coordinates of what the convolutions find: small objects), small (3x3
    convolutions: grids such as MinAtar's 10x10) or auto (nature where it fits, else small)"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the budget"""
    adam_eps: float = 1e-8
    """Adam epsilon"""
    n_step: int = 3
    """bootstrap after n rewards: y = r_t + ... + γ^(n-1) r_(t+n-1) + γ^n Q_target(s_(t+n), a*)"""
    target_every: int = 128
    """gradient steps between target-network updates"""
    double: bool = True
    """Double DQN target (online network picks a*, target network evaluates it)"""
    huber: bool = True
    """Huber (smooth L1) loss on the TD error; false: half squared error"""
    max_grad_norm: float = 10.0
    """global gradient norm clip (0: off)"""
    eps_start: float = 1.0
    """initial exploration rate epsilon"""
    eps_end: float = 0.04
    """final epsilon"""
    eps_fraction: float = 0.1
    """fraction of the budget over which epsilon falls linearly to eps_end"""


PRESETS: dict[str, dict] = {"CartPole-v1": {"steps": 50_000}}

# Design choices `backflip ablate` can turn off: name -> the settings that turn it off.
ABLATIONS = {
    "nstep": {"n_step": 1},
    "double": {"double": False},
    "lr_anneal": {"anneal_lr": False},
    "huber": {"huber": False},
    "grad_clip": {"max_grad_norm": 0.0},
}
