"""What PPO, A2C and VPG share in what they accept: the settings with one meaning and one default
(`Settings`, which each one's `Config` extends), their budget in whole rollouts (`rollouts`,
`whole_rollouts`), rl-zoo's A2C Pendulum entry and the probe presets.

Kept apart from `algos/onpolicy.py` (their shared loop, which imports torch) for the reason every
settings module is (`settings/__init__.py`). Not an algorithm: the registry lists it nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

# rl-baselines3-zoo's A2C entry for Pendulum-v1 without its optimizer settings: 8 x 8-step
# rollouts, γ 0.9, λ 0.9, normalized observations and rewards, gSDE exploration from log σ = -2.
# A2C's and VPG's Pendulum presets start from it (docs/algorithms.md).
ZOO_A2C_PENDULUM = {
    "num_envs": 8,
    "num_steps": 8,
    "gamma": 0.9,
    "gae_lambda": 0.9,
    "norm_obs": True,
    "scale_reward": True,
    "log_std_init": -2.0,
    "sde": True,
}


def probe_presets(**settings) -> dict[str, dict]:
    """`PRESETS` entries with `settings` for the ten probe envs of `backflip probe` (five
    Discrete, five Box; docs/doctor.md, "Probes")."""
    return {
        f"backflip/Probe{k}{box}-v0": dict(settings) for k in range(1, 6) for box in ("", "Box")
    }


def rollouts(steps: int, num_envs: int, num_steps: int) -> int:
    """Rollouts an on-policy algorithm collects for a budget of `steps` env steps: whole rollouts
    of num_envs × num_steps, as many as fit, at least one (`whole_rollouts` says so)."""
    return max(1, steps // (num_envs * num_steps))


def whole_rollouts(algo: str, num_envs: int, num_steps: int, steps: int) -> tuple[int, str]:
    """The `budget` of PPO, A2C and VPG: (steps taken, why they differ from `steps`)."""
    size, n = num_envs * num_steps, rollouts(steps, num_envs, num_steps)
    return n * size, (
        f"{algo} collects whole rollouts of num_envs × num_steps = {num_envs} × {num_steps} = "
        f"{size:,} steps: {n:,} rollout{'s' * (n != 1)}"
    )


@dataclass
class Settings:
    """The settings PPO, A2C and VPG share, with one meaning and one default: the actor-critic
    (`common.build_actor_critic`) and its exploration, the normalization of observations and
    rewards (`onpolicy.Rollouts`) and the entropy bonus. Each algorithm's `Config` extends these
    with its own: the rollout's size, the discount, the optimizers and the loss."""

    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the policy and value MLPs (separate networks)"""
    activation: str = "tanh"
    """tanh, relu, elu or leaky_relu"""
    cnn: str = "auto"
    """image observations: the policy and value's shared CNN, nature (DQN's, linear heads; frames
    of at least 36x36), keypoints (coordinates of what the convolutions find, then the `hidden`
    MLPs: small objects), small (3x3 convolutions, linear heads: grids such as MinAtar's 10x10)
    or auto (nature where it fits, else small)"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions; with sde: log σ)"""
    sde: bool = False
    """Box actions: generalized state-dependent exploration (gSDE, nets.ActorCritic)"""
    sde_sample_freq: int = 0
    """with sde: draw new exploration noise every this many steps (0: once per rollout)"""
    norm_obs: bool = False
    """normalize observations with running mean/std (frozen during evaluation)"""
    scale_reward: bool = False
    """divide rewards by the running std of the discounted return (never shifted)"""
    ent_coef: float = 0.0
    """entropy bonus weight"""
