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

Episode ends: only `terminated` cuts the bootstrap; a time-limit truncation bootstraps from the
episode's final observation, the one returned by the step that ended it. Gymnasium's NEXT_STEP
autoreset then spends one `step` call on the reset, which is neither stored nor counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from backflip.algos.common import Agent, EpisodeStats, log_recent_env_stats
from backflip.buffers import ReplayBuffer
from backflip.config import TrainConfig
from backflip.nets import (
    QCritics,
    frozen_copy,
    grad_norm,
    mlp,
    polyak_update,
    squashed_gaussian_sample,
    to_bounds,
)
from backflip.seedrun import SeedRun

ACTION_SPACES = ("box",)
DEFAULT_STEPS = 20_000
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


@dataclass
class Config:
    """SAC hyperparameters. Defaults: cheap and reliable on Pendulum-v1 (docs/algorithms.md)."""

    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of each critic"""
    activation: str = "relu"
    """tanh, relu, elu or leaky_relu"""
    lr: float = 1e-3
    """Adam learning rate of the actor, the critics and the temperature"""
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
    """Polyak rate of the target critics"""
    target_every: int = 1
    """gradient steps between target-critic updates"""
    alpha_init: float = 1.0
    """initial entropy temperature alpha"""
    autotune_alpha: bool = True
    """learn alpha to keep the policy's entropy near target_entropy (false: alpha stays at alpha_init)"""
    target_entropy: float = 0.0
    """entropy the temperature aims for, nats (0: -dim(A), the usual choice)"""

    def __post_init__(self):
        from backflip.errors import UserError

        checks = {
            "hidden must list at least one layer size": len(self.hidden) >= 1,
            "activation must be tanh, relu, elu or leaky_relu": self.activation
            in ("tanh", "relu", "elu", "leaky_relu"),
            "lr must be > 0": self.lr > 0,
            "batch_size must be >= 1": self.batch_size >= 1,
            "buffer_size must be >= batch_size": self.buffer_size >= self.batch_size,
            "learning_starts must be >= 0": self.learning_starts >= 0,
            "train_every must be >= 1": self.train_every >= 1,
            "gradient_steps must be >= 1": self.gradient_steps >= 1,
            "gamma must be in (0, 1]": 0 < self.gamma <= 1,
            "tau must be in (0, 1]": 0 < self.tau <= 1,
            "target_every must be >= 1": self.target_every >= 1,
            "alpha_init must be > 0": self.alpha_init > 0,
        }
        for message, ok in checks.items():
            if not ok:
                raise UserError(f"sac: {message}")


PRESETS: dict[str, dict] = {"Pendulum-v1": {"steps": 20_000}}
# `backflip probe sac`: the default budgets of the probes (3,000-16,000 steps, one gradient
# step of 256 each) take over a minute; one-step episodes need far less (docs/doctor.md, "Probes")
PRESETS.update(
    {
        f"backflip/Probe{k}Box-v0": {"steps": steps, "batch_size": 128}
        for k, steps in {1: 800, 2: 1200, 3: 1500, 4: 2000, 5: 3000}.items()
    }
)
# probe 3 bootstraps: faster target critics, and a smaller initial temperature: the soft value
# V(0) = γ (Q(1, ·) − α log π) is γ plus an entropy term until α decays (0.58 with α₀ = 1)
PRESETS["backflip/Probe3Box-v0"].update({"tau": 0.02, "alpha_init": 0.1})


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


def make_agent(actor: Actor, critic: QCritics, act_space, device) -> Agent:
    """Greedy actions tanh(m(s)) in the env's bounds, and values min_i Q_i(s, tanh(m(s)))."""
    low, high = act_space.low, act_space.high

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        a = actor.greedy(torch.as_tensor(o, device=device))
        return to_bounds(a.cpu().numpy(), low, high)

    @torch.inference_mode()
    def value(o: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(o, device=device)
        return critic(o, actor.greedy(o)).min(0).values.cpu().numpy()

    return Agent(act=act, value=value)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    actor = Actor(obs_dim, act_dim, cfg).to(device)
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=2).to(device)
    actor.load_state_dict(checkpoint["state"]["actor"])
    critic.load_state_dict(checkpoint["state"]["critic"])
    return make_agent(actor, critic, act_space, torch.device(device))


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled
    envs = run.make_vec(1)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    low, high = act_space.low, act_space.high
    actor = Actor(obs_dim, act_dim, cfg).to(device)
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=2).to(device)
    critic_targ = frozen_copy(critic)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    critic_targ_params = list(critic_targ.parameters())
    log_alpha = torch.tensor(math.log(cfg.alpha_init), device=device, requires_grad=True)
    target_entropy = cfg.target_entropy or -float(act_dim)
    fused = device.type == "cpu"
    actor_opt = torch.optim.Adam(actor_params, lr=cfg.lr, fused=fused)
    critic_opt = torch.optim.Adam(critic_params, lr=cfg.lr, fused=fused)
    alpha_opt = torch.optim.Adam([log_alpha], lr=cfg.lr, fused=fused)
    rb = ReplayBuffer(
        min(cfg.buffer_size, run.steps), (obs_dim,), (act_dim,), seed=run.seed, device=device
    )
    run.register_replay(rb, lambda a: to_bounds(a, low, high))  # stores actions in [-1, 1]
    rng = np.random.default_rng(run.seed)  # random actions before learning starts
    agent = make_agent(actor, critic, act_space, device)

    def state() -> dict:  # everything needed to continue training (backflip resume)
        return {
            "actor": actor.state_dict(),
            "critic": critic.state_dict(),
            "critic_targ": critic_targ.state_dict(),
            "log_alpha": log_alpha.detach().clone(),
            "actor_opt": actor_opt.state_dict(),
            "critic_opt": critic_opt.state_dict(),
            "alpha_opt": alpha_opt.state_dict(),
            "buffer": rb.state_dict(),
            "rng": rng.bit_generator.state,
            "updates": updates,
        }

    step, updates = 0, 0
    if run.restored:
        for name, obj in (
            ("actor", actor),
            ("critic", critic),
            ("critic_targ", critic_targ),
            ("actor_opt", actor_opt),
            ("critic_opt", critic_opt),
            ("alpha_opt", alpha_opt),
            ("buffer", rb),
        ):
            obj.load_state_dict(run.restored[name])
        with torch.no_grad():
            log_alpha.copy_(run.restored["log_alpha"])
        rng.bit_generator.state = run.restored["rng"]
        updates, step = run.restored["updates"], run.start_step

    def update() -> None:
        nonlocal updates, measure_ratio
        b = rb.sample(cfg.batch_size)
        # -- temperature: from the current policy's log-densities -----------------------------
        pi, logp = actor.sample(b.obs)
        alpha = log_alpha.detach().exp()
        if cfg.autotune_alpha:
            alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
            alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            alpha_opt.step()
        # -- critics --------------------------------------------------------------------------
        with torch.no_grad():
            a_next, logp_next = actor.sample(b.next_obs)
            q_next = critic_targ(b.next_obs, a_next).min(0).values - alpha * logp_next
            y = b.rewards + cfg.gamma * (1.0 - b.terminated) * q_next
        qs = critic(b.obs, b.actions)  # (2, B)
        critic_loss = 0.5 * (qs - y).pow(2).mean(1).sum()
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_opt.step()
        # -- actor, against the updated critics -----------------------------------------------
        theta0 = nn.utils.parameters_to_vector(actor_params).detach() if measure_ratio else None
        critic.requires_grad_(False)  # the actor needs dQ/da only
        actor_loss = (alpha * logp - critic(b.obs, pi).min(0).values).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()
        critic.requires_grad_(True)
        updates += 1
        if updates % cfg.target_every == 0:
            polyak_update(critic_targ_params, critic_params, cfg.tau)
        if diag:
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
                if theta0 is not None:  # the size of one actor step, once per metrics row
                    theta = nn.utils.parameters_to_vector(actor_params)
                    ratio = float((theta - theta0).norm() / theta0.norm())
                    tel.log(**{"train/update_ratio": ratio})
                    measure_ratio = False

    def episode_end(ep: EpisodeStats) -> None:
        """Log the episode, and the critics' Q(s0, a0) next to the discounted return observed."""
        tel.episode(step, ep.ret, ep.length)
        if diag:
            with torch.no_grad():
                s0 = torch.as_tensor(ep.first_obs, device=device)[None]
                a0 = torch.as_tensor(ep.first_action, device=device)[None]
                q0 = critic(s0, a0).min(0).values[0]
            tel.store(
                **{
                    "rollout/q_ep_start": q0,
                    "rollout/return_disc": ep.disc_ret,
                    "rollout/q_overestimate": q0 - ep.disc_ret,
                }
            )
        ep.reset()

    obs, _ = envs.reset(seed=run.env_seed + step)
    ep = EpisodeStats(cfg.gamma)
    measure_ratio = diag
    last_row = step
    while step < run.steps and not run.stopping:
        # -- one env step ---------------------------------------------------------------------
        with tel.timer("rollout"):
            if step < cfg.learning_starts:
                a = rng.uniform(-1.0, 1.0, act_dim).astype(np.float32)
            else:
                with torch.inference_mode():
                    a = actor.sample(torch.as_tensor(obs, device=device))[0][0].cpu().numpy()
            env_action = to_bounds(a, low, high)[None]
            next_obs, reward, term, trunc, _ = envs.step(env_action)
            rb.add(obs[0], a, reward[0], next_obs[0], term[0], trunc[0])
            ep.add(obs[0], a, float(reward[0]))
            step += 1
            obs = next_obs
            if term[0] or trunc[0]:
                episode_end(ep)
                # NEXT_STEP autoreset: this call only resets (action ignored); not a transition
                obs, *_ = envs.step(env_action)

        # -- learn ------------------------------------------------------------------------------
        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            with tel.timer("update"):
                for _ in range(cfg.gradient_steps):
                    update()

        # -- one metrics row per log interval ---------------------------------------------------
        if run.log_due(step):
            if diag:
                log_recent_env_stats(tel, rb, step - last_row)
                last_row = step
                tel.log(**{"train/updates": updates, "train/replay_size": len(rb)})
                measure_ratio = True
            if run.eval_due(step):
                run.evaluate(step, agent.act)
            run.log(step)
            if run.checkpoint_due(step):
                run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
