"""VPG: what `backflip train vpg` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`).

Kept apart from `algos/vpg.py` (the algorithm, which imports torch) so that resolving and
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
DEFAULT_STEPS = 200_000


@dataclass
class Config(Settings):
    """VPG hyperparameters. Spinning Up's defaults are gamma 0.99, gae_lambda 0.97, pi_lr 3e-4,
    vf_lr 1e-3, vf_iters 80, 4000 steps per epoch; ours take bigger policy steps on smaller batches
    (docs/algorithms.md). The network's, the normalization's and the entropy bonus's are
    `Settings` (settings/onpolicy.py), which PPO and A2C share."""

    num_envs: int = 8
    """parallel env copies per rollout"""
    num_steps: int = 128
    """steps per env copy per rollout (one policy step per rollout)"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.97
    """GAE lambda (1: Monte Carlo returns minus the baseline, i.e. REINFORCE with baseline)"""
    pi_lr: float = 3e-3
    """Adam learning rate of the policy"""
    vf_lr: float = 1e-3
    """Adam learning rate of the value function"""
    vf_iters: int = 20
    """value-function gradient steps per rollout"""
    vf_minibatch: int = 256
    """samples per value-function gradient step"""
    anneal_lr: bool = True
    """decay both learning rates linearly to 0 over the budget"""
    max_grad_norm: float = 0.0
    """gradient norm clip for each network (0: off)"""
    norm_adv: bool = True
    """normalize advantages over the rollout"""


PRESETS = {
    "CartPole-v1": {"steps": 100_000},
    # gSDE exploration with A2C's Pendulum settings (rl-zoo's A2C entry: 8 x 8 steps, γ 0.9,
    # λ 0.9, normalized observations and rewards, log σ -2); one Adam policy step (lr 1e-3) and
    # 5 value steps per rollout, advantages not normalized. Greedy -224, -265, -140, -192 on
    # seeds 0-3; without gSDE the best tried reached -434 (docs/algorithms.md)
    "Pendulum-v1": {
        **ZOO_A2C_PENDULUM,
        "steps": 1_000_000,
        "pi_lr": 1e-3,
        "vf_iters": 5,
        "norm_adv": False,
    },
    # `backflip probe vpg`: one policy step per 8 x 128-step rollout is 2 to 15 steps in a
    # probe's default budget: the policy barely moves (action(0) = 0.05 on Box probe 4) and the
    # value, which follows the policy, stays near the random policy's (V(0) = 0.01 on probe 4).
    # 8 x 8-step rollouts give 16 times as many steps (docs/doctor.md, "Probes")
    **probe_presets(num_steps=8),
}
PRESETS["backflip/Probe4-v0"]["steps"] = 6000
PRESETS["backflip/Probe4Box-v0"]["steps"] = 24_000


def budget(hp: Config, steps: int, episode_limit: int | None) -> tuple[int, str]:
    """VPG learns from whole rollouts: the budget rounds down to them (at least one)."""
    return whole_rollouts("vpg", hp.num_envs, hp.num_steps, steps)
