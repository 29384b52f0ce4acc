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
three fixes for that. The critic's weights are frozen during the actor's backward pass (the
actor needs dQ/da only).

Episode ends: only `terminated` cuts the bootstrap; a time-limit truncation bootstraps from the
episode's final observation, the one returned by the step that ended it. Gymnasium's NEXT_STEP
autoreset then spends one `step` call on the reset, which is neither stored nor counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from backflip.algos.common import Agent, EpisodeStats, log_recent_env_stats
from backflip.buffers import ReplayBuffer
from backflip.config import TrainConfig
from backflip.nets import QCritics, frozen_copy, grad_norm, mlp, polyak_update, to_bounds
from backflip.seedrun import SeedRun

ACTION_SPACES = ("box",)
DEFAULT_STEPS = 20_000


@dataclass
class Config:
    """DDPG hyperparameters. Defaults: cheap and reliable on Pendulum-v1 (docs/algorithms.md)."""

    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the actor and of the critic"""
    activation: str = "relu"
    """tanh, relu, elu or leaky_relu"""
    lr: float = 1e-3
    """Adam learning rate of the actor and the critic"""
    batch_size: int = 256
    """transitions per gradient step"""
    buffer_size: int = 1_000_000
    """replay capacity in transitions (never more than the budget is allocated)"""
    learning_starts: int = 1000
    """env steps of uniformly random actions before the first update"""
    train_every: int = 1
    """env steps between training phases"""
    gradient_steps: int = 1
    """gradient steps per training phase"""
    gamma: float = 0.98
    """discount factor"""
    tau: float = 0.005
    """Polyak rate of the target networks"""
    action_noise: float = 0.1
    """std of the Gaussian exploration noise, in [-1, 1] action units"""

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
            "action_noise must be >= 0": self.action_noise >= 0,
        }
        for message, ok in checks.items():
            if not ok:
                raise UserError(f"ddpg: {message}")


PRESETS: dict[str, dict] = {"Pendulum-v1": {"steps": 20_000}}
# `backflip probe ddpg`: the default budgets of the probes (3,000-16,000 steps, one gradient
# step of 256 each) take over a minute; one-step episodes need far less (docs/doctor.md, "Probes")
PRESETS.update(
    {
        f"backflip/Probe{k}Box-v0": {"steps": steps, "batch_size": 128, "learning_starts": 200}
        for k, steps in {1: 800, 2: 1200, 3: 1500, 4: 2000, 5: 3000}.items()
    }
)
# probe 3 bootstraps: faster target critics
PRESETS["backflip/Probe3Box-v0"].update({"tau": 0.02})


def make_actor(obs_dim: int, act_dim: int, cfg: Config) -> nn.Module:
    """μ(s) in [-1, 1]^act_dim."""
    return nn.Sequential(
        mlp([obs_dim, *cfg.hidden, act_dim], cfg.activation, orthogonal=False), nn.Tanh()
    )


def make_agent(actor: nn.Module, critic: QCritics, act_space, device) -> Agent:
    """Greedy actions μ(s) in the env's bounds, and values Q(s, μ(s))."""
    low, high = act_space.low, act_space.high

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        return to_bounds(actor(torch.as_tensor(o, device=device)).cpu().numpy(), low, high)

    @torch.inference_mode()
    def value(o: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(o, device=device)
        return critic(o, actor(o))[0].cpu().numpy()

    return Agent(act=act, value=value)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    actor = make_actor(obs_dim, act_dim, cfg).to(device)
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=1).to(device)
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
    actor = make_actor(obs_dim, act_dim, cfg).to(device)
    critic = QCritics(obs_dim, act_dim, cfg.hidden, cfg.activation, n=1).to(device)
    actor_targ, critic_targ = frozen_copy(actor), frozen_copy(critic)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    actor_targ_params = list(actor_targ.parameters())
    critic_targ_params = list(critic_targ.parameters())
    fused = device.type == "cpu"
    actor_opt = torch.optim.Adam(actor_params, lr=cfg.lr, fused=fused)
    critic_opt = torch.optim.Adam(critic_params, lr=cfg.lr, fused=fused)
    rb = ReplayBuffer(
        min(cfg.buffer_size, run.steps), (obs_dim,), (act_dim,), seed=run.seed, device=device
    )
    run.register_replay(rb, lambda a: to_bounds(a, low, high))  # stores actions in [-1, 1]
    rng = np.random.default_rng(run.seed)  # exploration noise
    agent = make_agent(actor, critic, act_space, device)

    def state() -> dict:  # everything needed to continue training (backflip resume)
        return {
            "actor": actor.state_dict(),
            "critic": critic.state_dict(),
            "actor_targ": actor_targ.state_dict(),
            "critic_targ": critic_targ.state_dict(),
            "actor_opt": actor_opt.state_dict(),
            "critic_opt": critic_opt.state_dict(),
            "buffer": rb.state_dict(),
            "rng": rng.bit_generator.state,
            "updates": updates,
        }

    step, updates = 0, 0
    if run.restored:
        for name, obj in (
            ("actor", actor),
            ("critic", critic),
            ("actor_targ", actor_targ),
            ("critic_targ", critic_targ),
            ("actor_opt", actor_opt),
            ("critic_opt", critic_opt),
            ("buffer", rb),
        ):
            obj.load_state_dict(run.restored[name])
        rng.bit_generator.state = run.restored["rng"]
        updates, step = run.restored["updates"], run.start_step

    def update() -> None:
        nonlocal updates, measure_ratio
        b = rb.sample(cfg.batch_size)
        with torch.no_grad():
            q_next = critic_targ(b.next_obs, actor_targ(b.next_obs))[0]
            y = b.rewards + cfg.gamma * (1.0 - b.terminated) * q_next
        q = critic(b.obs, b.actions)[0]
        critic_loss = (q - y).pow(2).mean()
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_opt.step()
        # -- actor ------------------------------------------------------------------------------
        theta0 = nn.utils.parameters_to_vector(actor_params).detach() if measure_ratio else None
        critic.requires_grad_(False)  # the actor needs dQ/da only
        pi = actor(b.obs)
        actor_loss = -critic(b.obs, pi)[0].mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()
        critic.requires_grad_(True)
        polyak_update(critic_targ_params, critic_params, cfg.tau)
        polyak_update(actor_targ_params, actor_params, cfg.tau)
        updates += 1
        if diag:
            with torch.no_grad():
                tel.store(
                    **{
                        "train/critic_loss": critic_loss.detach(),
                        "train/actor_loss": actor_loss.detach(),
                        "train/q_mean": q.detach().mean(),
                        "train/critic_grad_norm": grad_norm(critic_params),
                        "train/actor_grad_norm": grad_norm(actor_params),
                        "train/action_sat_frac": (pi.detach().abs() > 0.99).float().mean(),
                    }
                )
                if theta0 is not None:  # the size of one actor step, once per metrics row
                    theta = nn.utils.parameters_to_vector(actor_params)
                    ratio = float((theta - theta0).norm() / theta0.norm())
                    tel.log(**{"train/update_ratio": ratio})
                    measure_ratio = False

    def episode_end(ep: EpisodeStats) -> None:
        """Log the episode, and the critic's Q(s0, a0) next to the discounted return observed."""
        tel.episode(step, ep.ret, ep.length)
        if diag:
            with torch.no_grad():
                s0 = torch.as_tensor(ep.first_obs, device=device)[None]
                a0 = torch.as_tensor(ep.first_action, device=device)[None]
                q0 = critic(s0, a0)[0, 0]
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
                    a = actor(torch.as_tensor(obs, device=device))[0].cpu().numpy()
                noise = cfg.action_noise * rng.standard_normal(act_dim)
                a = np.clip(a + noise, -1.0, 1.0).astype(np.float32)
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
                tel.log(
                    **{
                        "rollout/action_noise": cfg.action_noise,
                        "train/updates": updates,
                        "train/replay_size": len(rb),
                    }
                )
                measure_ratio = True
            if run.eval_due(step):
                run.evaluate(step, agent.act)
            run.log(step)
            if run.checkpoint_due(step):
                run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
