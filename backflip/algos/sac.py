"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications", the version with
automatic entropy temperature and no separate value network).

The actor is a squashed Gaussian: u ~ N(m(s), σ(s)²), a = tanh(u) in [-1, 1] (mapped linearly
onto the env's Box), log σ clamped to [-20, 2]; two critics Q1, Q2 (`backflip.nets.QCritics`).
The agent samples from the policy (uniformly random actions before `learning_starts`) and
stores transitions in a replay buffer (`backflip/buffers.py`). Every env step after
`learning_starts` it takes `gradient_steps` updates on uniform minibatches, maximizing the
return plus α times the policy's entropy:

    temperature  minimize −log α · mean(log π(ã|s) + H_target),   H_target = −dim(A)
    critics      y = r + γ (1 − terminated) (min_i Q_i,targ(s', ã') − α log π(ã'|s')),
                 ã' ~ π(·|s');  minimize ½ Σ_i mean (Q_i(s, a) − y)²
    actor        minimize mean(α log π(ã|s) − min_i Q_i(s, ã)),  ã ~ π(·|s) (reparameterized)
    targets      θ_targ ← (1 − τ) θ_targ + τ θ every `target_every` updates (critics only)

α = exp(log α) is learned so that the policy's entropy stays near H_target: it rises when the
policy becomes too certain and falls when it is too random. The critics' weights are frozen
during the actor's backward pass (the actor needs dQ/da only). Greedy actions are tanh(m(s)).

The loop around `update` (acting, replay, episode ends, metrics rows, checkpoints, resume) is
the one all off-policy algorithms share: `backflip/algos/offpolicy.py`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from backflip.algos import offpolicy
from backflip.algos.common import Agent
from backflip.algos.settings.sac import Config
from backflip.config import TrainConfig
from backflip.nets import (
    QCritics,
    adam_step,
    frozen_copy,
    grad_norm,
    mlp,
    polyak_update,
    squashed_gaussian_sample,
)
from backflip.seedrun import SeedRun

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class Actor(nn.Module):
    """The squashed Gaussian policy: an MLP giving the mean and log σ of u; a = tanh(u)."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: Config):
        super().__init__()
        self.net = mlp([obs_dim, *cfg.hidden, 2 * act_dim], cfg.activation, orthogonal=False)

    def forward(self, obs: torch.Tensor):
        mean, log_std = self.net(obs).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor):
        """(a, log π(a|s)): a reparameterized sample in (-1, 1) and its log-density."""
        return squashed_gaussian_sample(*self(obs))

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


def networks(cfg: Config, obs_space, act_space, device) -> tuple[Actor, QCritics]:
    """The squashed Gaussian actor and the twin critics."""
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    actor = Actor(obs_dim, act_dim, cfg)
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=2)
    return actor.to(device), critic.to(device)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`: greedy actions tanh(m(s))."""
    actor, critic = networks(
        TrainConfig.from_dict(checkpoint["config"]).hp, obs_space, act_space, device
    )
    offpolicy.load_networks(checkpoint["state"], actor=actor, critic=critic)
    return offpolicy.box_agent(actor.greedy, critic, act_space, device)


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    xp = offpolicy.Experience(cfg, run)  # the env, the replay buffer, the exploration RNG
    rb = xp.replay
    actor, critic = networks(cfg, xp.obs_space, xp.act_space, device)
    critic_targ = frozen_copy(critic)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    critic_targ_params = list(critic_targ.parameters())
    log_alpha = torch.tensor(math.log(cfg.alpha_init), device=device, requires_grad=True)
    target_entropy = cfg.target_entropy or -float(xp.act_dim)
    fused = device.type == "cpu"
    actor_opt = torch.optim.Adam(actor_params, lr=cfg.lr, fused=fused)
    critic_opt = torch.optim.Adam(critic_params, lr=cfg.lr, fused=fused)
    alpha_opt = torch.optim.Adam([log_alpha], lr=cfg.lr, fused=fused)
    ratio = offpolicy.UpdateRatio(tel, actor_params)

    def explore(obs: np.ndarray, step: int) -> np.ndarray:
        """A sample of the policy."""
        with torch.inference_mode():
            return actor.sample(torch.as_tensor(obs, device=device))[0][0].cpu().numpy()

    def update(step: int, n: int) -> None:
        """Temperature, critics, then the actor against the updated critics; every
        `target_every`-th step, the target critics' Polyak update."""
        b = rb.sample(cfg.batch_size)
        # -- temperature: from the current policy's log-densities -----------------------------
        pi, logp = actor.sample(b.obs)
        alpha = log_alpha.detach().exp()
        if cfg.autotune_alpha:
            alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
            alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            adam_step(alpha_opt)
        # -- critics --------------------------------------------------------------------------
        with torch.no_grad():
            a_next, logp_next = actor.sample(b.next_obs)
            q_next = critic_targ(b.next_obs, a_next).min(0).values - alpha * logp_next
            y = b.rewards + cfg.gamma * (1.0 - b.terminated) * q_next
        qs = critic(b.obs, b.actions)  # (2, B)
        critic_loss = 0.5 * (qs - y).pow(2).mean(1).sum()
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        adam_step(critic_opt)
        # -- actor, against the updated critics -----------------------------------------------
        theta0 = ratio.before()
        critic.requires_grad_(False)  # the actor needs dQ/da only
        actor_loss = (alpha * logp - critic(b.obs, pi).min(0).values).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        adam_step(actor_opt)
        critic.requires_grad_(True)
        ratio.after(theta0)
        if n % cfg.target_every == 0:
            polyak_update(critic_targ_params, critic_params, cfg.tau)
        if tel.enabled:
            with torch.no_grad():
                tel.store(
                    **{
                        "train/critic_loss": critic_loss.detach(),
                        "train/actor_loss": actor_loss.detach(),
                        "train/q_mean": qs.detach().mean(),
                        "train/alpha": alpha,
                        "train/entropy": -logp.detach().mean(),
                        "train/critic_grad_norm": grad_norm(critic_params),
                        "train/actor_grad_norm": grad_norm(actor_params),
                        "train/action_sat_frac": (pi.detach().abs() > 0.99).float().mean(),
                    }
                )
                if cfg.autotune_alpha:
                    tel.store(**{"train/alpha_loss": alpha_loss.detach()})

    learner = offpolicy.Learner(
        explore=explore,
        update=update,
        agent=offpolicy.box_agent(actor.greedy, critic, xp.act_space, device),
        state={
            "actor": actor,
            "critic": critic,
            "critic_targ": critic_targ,
            "log_alpha": log_alpha,
            "actor_opt": actor_opt,
            "critic_opt": critic_opt,
            "alpha_opt": alpha_opt,
        },
        update_ratio=ratio,
        q_start=lambda s0, a0: critic(s0, a0).min(0).values[0],
    )
    offpolicy.train(cfg, run, xp, learner)
