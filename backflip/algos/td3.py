"""Twin Delayed DDPG (Fujimoto et al. 2018): DDPG with three fixes against Q overestimation.

A deterministic actor a = μ(s) (an MLP ending in tanh, so actions live in [-1, 1] and are mapped
linearly onto the env's Box) and two critics Q1, Q2 (`backflip.nets.QCritics`). The agent acts
with Gaussian exploration noise, a = clip(μ(s) + N(0, action_noise²), −1, 1) (uniformly random
actions before `learning_starts`), and stores transitions in a replay buffer
(`backflip/buffers.py`). Every env step after `learning_starts` it takes `gradient_steps`
updates on uniform minibatches:

    critics   y = r + γ (1 − terminated) min_i Q_i,targ(s', ã'),
              ã' = clip(μ_targ(s') + clip(N(0, target_noise²), −c, c), −1, 1)   (smoothing)
              minimize Σ_i mean (Q_i(s, a) − y)²                         (clipped double-Q)
    actor     every `policy_delay`-th update: maximize mean Q1(s, μ(s))  (delayed updates)
    targets   after each actor update: θ_targ ← (1 − τ) θ_targ + τ θ     (Polyak)

The critic's weights are frozen during the actor's backward pass: the actor needs dQ/da only,
and skipping the critic's weight gradients saves about a sixth of an update's work.

DDPG (`ddpg.py`) is this algorithm without the three fixes, as Fujimoto et al. and
Stable-Baselines3 present it: one critic (`n_critics=1`), no target-policy smoothing
(`target_noise=0`) and an actor update after every critic update (`policy_delay=1`).

The loop around `update` (acting, replay, episode ends, metrics rows, checkpoints, resume) is
the one all off-policy algorithms share: `backflip/algos/offpolicy.py`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from backflip.algos import offpolicy
from backflip.algos.common import Agent
from backflip.algos.settings.td3 import Config
from backflip.config import TrainConfig
from backflip.nets import QCritics, adam_step, frozen_copy, grad_norm, mlp, polyak_update
from backflip.seedrun import SeedRun


def networks(cfg: Config, obs_space, act_space, device) -> tuple[nn.Module, QCritics]:
    """The actor μ(s) in [-1, 1]^act_dim (an MLP ending in tanh) and `n_critics` Q(s, a) MLPs."""
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    actor = nn.Sequential(
        mlp([obs_dim, *cfg.hidden, act_dim], cfg.activation, orthogonal=False), nn.Tanh()
    )
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=cfg.n_critics)
    return actor.to(device), critic.to(device)


def load(checkpoint: dict, obs_space, act_space, device="cpu", cfg: Config | None = None) -> Agent:
    """The trained agent stored in a checkpoint written by `train` (`cfg`: its TD3 settings, when
    the checkpoint's own config is another algorithm's, DDPG's)."""
    cfg = cfg or TrainConfig.from_dict(checkpoint["config"]).hp
    actor, critic = networks(cfg, obs_space, act_space, device)
    offpolicy.load_networks(checkpoint["state"], actor=actor, critic=critic)
    return offpolicy.box_agent(actor, critic, act_space, device)


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    xp = offpolicy.Experience(cfg, run)  # the env, the replay buffer, the exploration RNG
    rb = xp.replay
    actor, critic = networks(cfg, xp.obs_space, xp.act_space, device)
    actor_targ, critic_targ = frozen_copy(actor), frozen_copy(critic)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    actor_targ_params = list(actor_targ.parameters())
    critic_targ_params = list(critic_targ.parameters())
    fused = device.type == "cpu"
    actor_opt = torch.optim.Adam(actor_params, lr=cfg.lr, fused=fused)
    critic_opt = torch.optim.Adam(critic_params, lr=cfg.lr, fused=fused)
    ratio = offpolicy.UpdateRatio(tel, actor_params)

    def explore(obs: np.ndarray, step: int) -> np.ndarray:
        """μ(s) plus Gaussian noise, clipped to [-1, 1]."""
        with torch.inference_mode():
            a = actor(torch.as_tensor(obs, device=device))[0].cpu().numpy()
        noise = cfg.action_noise * xp.rng.standard_normal(xp.act_dim)
        return np.clip(a + noise, -1.0, 1.0).astype(np.float32)

    def update(step: int, n: int) -> None:
        """A critic step on a minibatch; every `policy_delay`-th one, an actor step and the
        targets' Polyak update."""
        b = rb.sample(cfg.batch_size)
        with torch.no_grad():
            a_next = actor_targ(b.next_obs)
            if cfg.target_noise:  # target-policy smoothing
                noise = torch.randn_like(b.actions) * cfg.target_noise
                noise = noise.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
                a_next = (a_next + noise).clamp(-1.0, 1.0)
            q_next = critic_targ(b.next_obs, a_next).min(0).values
            y = b.rewards + cfg.gamma * (1.0 - b.terminated) * q_next
        qs = critic(b.obs, b.actions)  # (n_critics, B)
        critic_loss = (qs - y).pow(2).mean(1).sum()
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        adam_step(critic_opt)
        if tel.enabled:
            tel.store(
                **{
                    "train/critic_loss": critic_loss.detach(),
                    "train/q_mean": qs.detach().mean(),
                    "train/critic_grad_norm": grad_norm(critic_params),
                }
            )
        if n % cfg.policy_delay:
            return
        # -- delayed actor and target update ---------------------------------------------------
        theta0 = ratio.before()
        critic.requires_grad_(False)  # the actor needs dQ/da only
        pi = actor(b.obs)
        actor_loss = -critic.qs[0](torch.cat([b.obs, pi], -1)).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        adam_step(actor_opt)
        critic.requires_grad_(True)
        ratio.after(theta0)
        polyak_update(critic_targ_params, critic_params, cfg.tau)
        polyak_update(actor_targ_params, actor_params, cfg.tau)
        if tel.enabled:
            with torch.no_grad():
                tel.store(
                    **{
                        "train/actor_loss": actor_loss.detach(),
                        "train/actor_grad_norm": grad_norm(actor_params),
                        "train/action_sat_frac": (pi.detach().abs() > 0.99).float().mean(),
                    }
                )

    learner = offpolicy.Learner(
        explore=explore,
        update=update,
        agent=offpolicy.box_agent(actor, critic, xp.act_space, device),
        state={
            "actor": actor,
            "critic": critic,
            "actor_targ": actor_targ,
            "critic_targ": critic_targ,
            "actor_opt": actor_opt,
            "critic_opt": critic_opt,
        },
        update_ratio=ratio,
        row=lambda step, updates: {"rollout/action_noise": cfg.action_noise},
        q_start=lambda s0, a0: critic(s0, a0).min(0).values[0],
    )
    offpolicy.train(cfg, run, xp, learner)
