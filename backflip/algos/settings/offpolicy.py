"""What the off-policy algorithms share in what they accept: the settings of a replay learner
with one meaning and one default (`Settings`, which the `Config` of TD3, SAC, DDPG (TD3 without
its fixes) and DQN extends, with its own default where its reference differs — TD3's
learning_starts and γ, DQN's rl-zoo schedule and hard target copies — and its own words where
the setting does more: SAC's lr and τ).

Kept apart from `algos/offpolicy.py` (their shared loop, which imports torch) for the reason
every settings module is (`settings/__init__.py`). Not an algorithm: the registry lists it
nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Settings:
    """The settings the off-policy learners share: the networks, the replay buffer, when and how
    much to train (`offpolicy.train`), the discount and the target networks' rate."""

    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of each critic"""
    activation: str = "relu"
    """tanh, relu, elu or leaky_relu"""
    lr: float = 1e-3
    """Adam learning rate of the actor and the critics"""
    batch_size: int = 256
    """transitions per gradient step"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions (never more than the budget is allocated)"""
    learning_starts: int = 100
    """env steps of uniformly random actions before the first update"""
    train_every: int = 1
    """env steps between training phases"""
    gradient_steps: int = 1
    """gradient steps per training phase"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target networks"""
