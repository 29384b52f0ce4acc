"""PPO: what `backflip train ppo` accepts — the hyperparameters (`Config`, each field's
docstring is its documentation), the per-env presets and budgets (`PRESETS`), `backflip bench`'s reference envs (`BENCHMARKS`), the switches of `backflip ablate` (`ABLATIONS`).

Kept apart from `algos/ppo.py` (the algorithm, which imports torch) so that resolving and
checking a config, `backflip show` and `--help` never import torch (`algos/__init__.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from backflip.algos.settings.onpolicy import Settings, probe_presets, whole_rollouts

ACTION_SPACES = ("discrete", "box", "multidiscrete")
DEFAULT_STEPS = 100_000


@dataclass
class Config(Settings):
    """PPO hyperparameters. Defaults follow rl-baselines3-zoo's CartPole-v1 settings. The network's,
    the normalization's and the entropy bonus's are `Settings` (settings/onpolicy.py), which A2C and
    VPG share."""

    num_envs: int = 8
    """parallel env copies per rollout"""
    num_steps: int = 32
    """steps per env copy per rollout (rollout size = num_envs * num_steps)"""
    minibatch_size: int = 256
    """samples per gradient step (the rollout is split into near-equal minibatches)"""
    epochs: int = 20
    """passes over each rollout"""
    gamma: float = 0.98
    """discount factor"""
    gae_lambda: float = 0.8
    """GAE lambda (bias-variance trade-off of the advantage estimate)"""
    lr: float = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the budget"""
    clip: float = 0.2
    """surrogate clipping range epsilon"""
    anneal_clip: bool = True
    """decay the clipping range linearly to 0 over the budget"""
    clip_vloss: bool = False
    """clip the value update to +-clip around the old value"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """global gradient norm clip (0: off)"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    target_kl: float = 0.0
    """stop the epochs of an update early when the minibatch KL exceeds 1.5x this (0: off)"""
    adam_eps: float = 1e-5
    """Adam epsilon"""


PRESETS = {
    # rl-zoo's entry with 6 epochs at lr 5e-3 instead of 20 at 1e-3: a greedy 475 in about half
    # the wall-clock time (3.3x fewer gradient steps, a few more env steps), and a final return
    # >= 475 on all of seeds 0-39 (benchmarks/ppo_cartpole_defaults.py; docs/algorithms.md)
    "CartPole-v1": {"steps": 100_000, "epochs": 6, "lr": 5e-3},
    # Tuned here (no gSDE, unlike rl-zoo). 3e5 steps: at 2e5 seed 1 was still improving at the
    # end (-259); at 3e5 seeds 0-9 end between -119 and -219 (docs/algorithms.md, "PPO").
    "Pendulum-v1": {
        "steps": 300_000,
        "num_envs": 8,
        "num_steps": 128,
        "minibatch_size": 64,
        "epochs": 10,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "lr": 1e-3,
        "anneal_lr": True,
        "anneal_clip": False,
        "norm_obs": True,
        "scale_reward": True,
        "log_std_init": -0.5,
    },
}

# The PPO paper's Atari settings (Schulman et al. 2017, table 5: 8 actors x 128 steps, 3 epochs of
# minibatches of 256, lr 2.5e-4 and clip 0.1 both annealed, entropy 0.01, 10M agent steps = 40M
# frames), for the seven games Christiano et al. (2017) used. The defaults' 20 epochs per 256
# steps cost 20 forward-backward passes of the CNN per agent step, 3 epochs cost 3 (Atari on a
# CPU: docs/benchmarks.md).
ATARI = {
    "steps": 10_000_000,
    "num_envs": 8,
    "num_steps": 128,
    "minibatch_size": 256,
    "epochs": 3,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "lr": 2.5e-4,
    "clip": 0.1,
    "ent_coef": 0.01,
    "vf_coef": 1.0,
}
for _game in ("BeamRider", "Breakout", "Enduro", "Pong", "Qbert", "Seaquest", "SpaceInvaders"):
    PRESETS[f"{_game}NoFrameskip-v4"] = dict(ATARI)

# The PPO paper's MuJoCo settings (Schulman et al. 2017, table 3: 2,048 steps per rollout from one
# env copy, 10 epochs of minibatches of 64, lr 3e-4 annealed, γ 0.99, λ 0.95, clip 0.2), with
# observation normalization and reward scaling as in CleanRL's ppo_continuous_action and SB3 with
# rl-zoo's `normalize: true`. They are also what an env without a preset gets when its actions are
# a Box (`ACTION_DEFAULTS`), and with 1M agent steps, the paper's budget, the MuJoCo presets.
CONTINUOUS = {
    "num_envs": 1,
    "num_steps": 2048,
    "minibatch_size": 64,
    "epochs": 10,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "lr": 3e-4,
    "anneal_lr": True,
    "clip": 0.2,
    "anneal_clip": False,
    "norm_obs": True,
    "scale_reward": True,
}
MUJOCO = {"steps": 1_000_000, **CONTINUOUS}
for _task in (
    "HalfCheetah", "Hopper", "Walker2d", "Ant", "Swimmer", "Reacher", "Pusher",
    "InvertedPendulum", "InvertedDoublePendulum",
):  # fmt: skip
    PRESETS[f"{_task}-v5"] = dict(MUJOCO)

# `backflip probe ppo`: the probes are presets on the defaults (short rollouts fit their budgets
# of 3,000-16,000 steps; the Box probes would otherwise get `ACTION_DEFAULTS`' 2,048-step ones)
PRESETS.update(probe_presets())

# The settings an env without a preset gets from its action space (`config.resolve`, said at
# launch): the `Config` defaults are rl-zoo's CartPole-v1 entry, tuned for discrete actions; a
# Box takes the continuous-control settings above (SB3's PPO defaults are the same). Hopper-v4,
# 1e5 steps, seeds 0-1: greedy 571 with these against 321 with the CartPole ones.
# An Atari game without a preset (any ALE id under the standard preprocessing: `ALE/*-v5`, the
# ids Gymnasium recommends, and every game beyond the seven above) takes the PPO paper's Atari
# settings, its budget left to the run: on the CartPole defaults (8 x 32 steps, 20 epochs) the
# CNN did 20 forward-backward passes per agent step.
ACTION_DEFAULTS = {"box": CONTINUOUS, "atari": {k: v for k, v in ATARI.items() if k != "steps"}}

# `backflip bench`'s reference envs: the presets' classic-control envs (Atari's 10M steps per seed
# are days of CPU)
BENCHMARKS = {"CartPole-v1": 100_000, "Pendulum-v1": 300_000}

# Design choices `backflip ablate` can turn off: name -> the settings that turn it off.
ABLATIONS = {
    "obs_norm": {"norm_obs": False},
    "adv_norm": {"norm_adv": False},
    "value_clip": {"clip_vloss": False},
    "reward_scale": {"scale_reward": False},
    "lr_anneal": {"anneal_lr": False},
    "clip_anneal": {"anneal_clip": False},
    "grad_clip": {"max_grad_norm": 0.0},
    "kl_stop": {"target_kl": 0.0},
    "entropy_bonus": {"ent_coef": 0.0},
}


def budget(hp: Config, steps: int, episode_limit: int | None) -> tuple[int, str]:
    """PPO learns from whole rollouts: the budget rounds down to them (at least one)."""
    return whole_rollouts("ppo", hp.num_envs, hp.num_steps, steps)
