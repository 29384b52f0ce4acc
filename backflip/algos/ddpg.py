"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016), in the form TD3's paper uses as
its baseline (Fujimoto et al. 2018: Gaussian exploration noise, no batch norm, Adam).

A deterministic actor a = μ(s) (an MLP ending in tanh: actions live in [-1, 1] and are mapped
linearly onto the env's Box) and one critic Q(s, a). The agent acts with Gaussian exploration
noise, a = clip(μ(s) + N(0, action_noise²), −1, 1) (uniformly random actions before
`learning_starts`), and stores transitions in a replay buffer (`backflip/buffers.py`). Every
env step after `learning_starts` it takes `gradient_steps` updates on uniform minibatches:

    critic    y = r + γ (1 − terminated) Q_targ(s', μ_targ(s'))
              minimize mean (Q(s, a) − y)²
    actor     maximize mean Q(s, μ(s))              (the deterministic policy gradient)
    targets   θ_targ ← (1 − τ) θ_targ + τ θ         (Polyak, after every update)

Q overestimates (the actor climbs the critic's errors); TD3 (`td3.py`) is this algorithm plus
three fixes for that. So DDPG is TD3 with the three fixes off, as Fujimoto et al. and
Stable-Baselines3 present it: its `Config` is TD3's with one critic, no target-policy smoothing
and an actor (and target) update after every critic update, and it trains and loads with TD3's
`train` and `load`. The other settings and their defaults (rl-zoo's Pendulum-v1 entry, the same
for both) are TD3's.
"""

from __future__ import annotations

from backflip.algos import td3
from backflip.algos.settings.ddpg import Config

# DDPG trains, checkpoints and loads exactly as TD3 does, with the settings of `Config`
train, load = td3.train, td3.load
__all__ = ["Config", "load", "train"]
