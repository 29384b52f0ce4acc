"""A2C: what `backflip train a2c` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`).

Kept apart from `algos/a2c.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backflip.algos.settings.onpolicy import (
    ZOO_A2C_PENDULUM,
    Settings,
    probe_presets,
    whole_rollouts,
)

ACTION_SPACES = ("discrete", "box", "multidiscrete")
DEFAULT_STEPS = 100_000


@dataclass
class Config(Settings):
    """A2C hyperparameters. Defaults: cheap and reliable on CartPole-v1 (docs/algorithms.md);
    SB3/rl-zoo's are optimizer=rmsprop lr=7e-4 num_steps=5 gae_lambda=1 anneal_lr=false vf_coef=1
    (SB3's value loss has no ½). The network's, the normalization's and the entropy bonus's are
    `Settings` (settings/onpolicy.py), which PPO and VPG share."""

    num_envs: int = 8
    """parallel env copies per rollout"""
    num_steps: int = 16
    """steps per env copy per rollout: the n of n-step returns"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda (1: plain n-step returns as in Mnih et al. 2016)"""
    optimizer: str = "adam"
    """adam or rmsprop (alpha 0.99, as in Mnih et al. 2016 and SB3)"""
    lr: float = 1e-3
    """learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the budget"""
    opt_eps: float = 1e-5
    """optimizer epsilon"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """global gradient norm clip (0: off)"""
    norm_adv: bool = False
    """normalize advantages per rollout (on tiny rollouts this keeps steps large once learned)"""


PRESETS = {
    "CartPole-v1": {"steps": 300_000},
    # rl-zoo's entry (gSDE, 8 x 8 steps, normalized observations and rewards, SB3's vf_coef 0.4
    # on the MSE = 0.8 on our half MSE) with Adam lr 1e-3 instead of RMSprop 7e-4: RMSprop's
    # rare huge steps (KL up to 8 on one update) drew doctor errors (docs/algorithms.md)
    "Pendulum-v1": {**ZOO_A2C_PENDULUM, "steps": 1_000_000, "vf_coef": 0.8, "lr": 1e-3},
    # `backflip probe a2c`: the default 8 x 16-step rollouts give a few dozen updates in a
    # probe's budget, too few for the value to converge (V(0) = 0.27 on probe 1); 4 x 4-step
    # rollouts give eight times as many (docs/doctor.md, "Probes")
    **probe_presets(num_envs=4, num_steps=4),
}
PRESETS["backflip/Probe5Box-v0"]["steps"] = 24_000


def budget(hp: Config, steps: int, episode_limit: int | None) -> tuple[int, str]:
    """A2C learns from whole rollouts: the budget rounds down to them (at least one)."""
    return whole_rollouts("a2c", hp.num_envs, hp.num_steps, steps)
