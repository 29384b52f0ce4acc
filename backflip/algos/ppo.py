"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate with GAE.

One file, top to bottom: networks, then `train`: collect a rollout from `num_envs` env copies,
compute GAE advantages, run `epochs` passes of minibatch updates, log, repeat.

The details that make PPO work (Engstrom et al. 2020; Huang et al. 2022, "The 37 implementation
details of PPO") are all here and each can be switched off for ablations:
orthogonal init with a 0.01-gain policy head, Adam eps 1e-5, learning-rate and clip annealing,
advantage normalization per minibatch, optional value clipping, global gradient clipping,
observation normalization and reward scaling (scale, never shift) with running statistics.

Episode ends (Gymnasium NEXT_STEP autoreset): on the step after `terminated or truncated` the
env returns the reset observation and ignores the action. So the observation fed to the policy at
that step *is* the episode's final observation, and its value V(s_final) is computed there for
free. A step's bootstrap value is therefore always `values[t + 1]`, multiplied by
`1 - terminated[t]`: truncation (a time limit) bootstraps from V(s_final), termination from 0.
The reset step itself is not a real transition and is masked out of the loss (`valid`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from backflip.algos.common import Agent, explained_variance, gae
from backflip.config import TrainConfig
from backflip.envs import make_vec, restore_envs, snapshot_envs
from backflip.nets import (
    categorical_logp_entropy,
    categorical_sample,
    encoder,
    gaussian_logp_entropy,
    gaussian_sample,
    mlp,
)
from backflip.normalize import ObsNormalizer, RewardScaler
from backflip.seedrun import SeedRun

ACTION_SPACES = ("discrete", "box")
DEFAULT_STEPS = 100_000


@dataclass
class Config:
    """PPO hyperparameters. Defaults follow rl-baselines3-zoo's CartPole-v1 settings."""

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
    ent_coef: float = 0.0
    """entropy bonus weight"""
    max_grad_norm: float = 0.5
    """global gradient norm clip (0: off)"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    norm_obs: bool = False
    """normalize observations with running mean/std (frozen during evaluation)"""
    scale_reward: bool = False
    """divide rewards by the running std of the discounted return (never shifted)"""
    target_kl: float = 0.0
    """stop the epochs of an update early when the minibatch KL exceeds 1.5x this (0: off)"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layer sizes of the policy and value MLPs (separate networks)"""
    activation: str = "tanh"
    """tanh, relu, elu or leaky_relu"""
    log_std_init: float = 0.0
    """initial log standard deviation of the Gaussian policy (Box actions)"""
    adam_eps: float = 1e-5
    """Adam epsilon"""

    def __post_init__(self):
        from backflip.errors import UserError

        checks = {
            "num_envs must be >= 1": self.num_envs >= 1,
            "num_steps must be >= 2": self.num_steps >= 2,
            "minibatch_size must be >= 1": self.minibatch_size >= 1,
            "epochs must be >= 1": self.epochs >= 1,
            "gamma must be in (0, 1]": 0 < self.gamma <= 1,
            "gae_lambda must be in [0, 1]": 0 <= self.gae_lambda <= 1,
            "lr must be > 0": self.lr > 0,
            "clip must be >= 0": self.clip >= 0,
            "max_grad_norm must be >= 0": self.max_grad_norm >= 0,
            "activation must be tanh, relu, elu or leaky_relu": self.activation
            in ("tanh", "relu", "elu", "leaky_relu"),
            "hidden must list at least one layer size": len(self.hidden) >= 1,
        }
        for message, ok in checks.items():
            if not ok:
                raise UserError(f"ppo: {message}")


PRESETS = {
    "CartPole-v1": {"steps": 100_000},
    "Pendulum-v1": {
        "steps": 200_000,
        "num_envs": 4,
        "num_steps": 1024,
        "minibatch_size": 64,
        "epochs": 10,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "lr": 1e-3,
        "anneal_lr": False,
        "anneal_clip": False,
        "norm_obs": True,
        "scale_reward": True,
        "log_std_init": -0.5,
        "max_grad_norm": 0.5,
    },
}

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


class ActorCritic(nn.Module):
    """Separate policy and value MLPs (a shared CNN trunk for image observations)."""

    def __init__(self, obs_shape, action_space, cfg: Config):
        super().__init__()
        self.trunk, n_in = encoder(obs_shape, cfg.hidden, cfg.activation)
        self.discrete = hasattr(action_space, "n")
        n_out = action_space.n if self.discrete else int(np.prod(action_space.shape))
        self.pi = mlp([n_in, *cfg.hidden, n_out], cfg.activation, out_gain=0.01)
        self.v = mlp([n_in, *cfg.hidden, 1], cfg.activation, out_gain=1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((n_out,), cfg.log_std_init))

    def forward(self, obs: torch.Tensor):
        """(policy output, value): logits for discrete actions, the Gaussian mean for Box."""
        h = self.trunk(obs)
        return self.pi(h), self.v(h).squeeze(-1)

    def sample(self, out: torch.Tensor) -> torch.Tensor:
        return categorical_sample(out) if self.discrete else gaussian_sample(out, self.log_std)

    def logp_entropy(self, out: torch.Tensor, actions: torch.Tensor):
        if self.discrete:
            return categorical_logp_entropy(out, actions)
        return gaussian_logp_entropy(out, self.log_std, actions)

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(-1) if self.discrete else out


def make_agent(ac: ActorCritic, obs_norm: ObsNormalizer | None, act_space, device) -> Agent:
    """Greedy actions and values on raw observations (normalizer frozen): for evaluation,
    probes and videos."""

    def prepare(o: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(obs_norm(o, update=False) if obs_norm else o, device=device)

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        out, _ = ac(prepare(o))
        a = ac.greedy(out).cpu().numpy()
        return a if ac.discrete else np.clip(a, act_space.low, act_space.high)

    @torch.inference_mode()
    def value(o: np.ndarray) -> np.ndarray:
        return ac(prepare(o))[1].cpu().numpy()

    return Agent(act=act, value=value)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    ac = ActorCritic(obs_space.shape, act_space, cfg).to(device)
    ac.load_state_dict(checkpoint["state"]["model"])
    obs_norm = None
    if checkpoint["state"]["obs_norm"] is not None:
        obs_norm = ObsNormalizer(obs_space.shape)
        obs_norm.load_state_dict(checkpoint["state"]["obs_norm"])
    return make_agent(ac, obs_norm, act_space, torch.device(device))


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled  # diagnostics beyond the losses cost a little; skip them when logging is off
    envs = make_vec(run.env_id, cfg.num_envs, run.env_opts)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    N, T = cfg.num_envs, cfg.num_steps
    ac = ActorCritic(obs_space.shape, act_space, cfg).to(device)
    params = list(ac.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps, fused=device.type == "cpu")
    obs_norm = ObsNormalizer(obs_space.shape) if cfg.norm_obs else None
    rew_scaler = RewardScaler(N, cfg.gamma) if cfg.scale_reward else None
    if ac.discrete:
        max_entropy = math.log(act_space.n)
    else:
        low, high = act_space.low, act_space.high

    agent = make_agent(ac, obs_norm, act_space, device)  # greedy, for evaluation

    def to_env_action(a: torch.Tensor) -> np.ndarray:
        a = a.cpu().numpy()
        return a if ac.discrete else np.clip(a, low, high)

    def state() -> dict:  # everything needed to continue training (backflip resume)
        return {
            "model": ac.state_dict(),
            "optimizer": opt.state_dict(),
            "obs_norm": obs_norm.state_dict() if obs_norm else None,
            "reward_scaler": rew_scaler.state_dict() if rew_scaler else None,
            "iteration": it,
            # the envs mid-episode and the loop's carried variables: an exact resume
            "envs": snapshot_envs(envs),
            "loop": {"obs": obs, "prev_done": prev_done, "ep_ret": ep_ret, "ep_len": ep_len},
        }

    it, step = 0, 0
    if run.restored:  # resuming from a checkpoint
        ac.load_state_dict(run.restored["model"])
        opt.load_state_dict(run.restored["optimizer"])
        if obs_norm:
            obs_norm.load_state_dict(run.restored["obs_norm"])
        if rew_scaler:
            rew_scaler.load_state_dict(run.restored["reward_scaler"])
        it, step = run.restored["iteration"], run.start_step
        run.restore_rng()  # last: building the networks above drew random numbers

    # Rollout storage. `valid[t]` is False on the autoreset step that follows an episode end.
    obs_buf = torch.zeros((T, N, *obs_space.shape), dtype=torch.float32)
    act_buf = torch.zeros(
        (T, N, *act_space.shape), dtype=torch.long if ac.discrete else torch.float32
    )
    logp_buf, val_buf, rew_buf = (torch.zeros((T, N)) for _ in range(3))
    term_buf, done_buf, valid_buf = (torch.zeros((T, N), dtype=torch.bool) for _ in range(3))
    raw_obs = np.zeros((T, N, *obs_space.shape), np.float32) if diag else None
    raw_rew = np.zeros((T, N), np.float64)

    if run.restored and run.restored.get("envs"):  # continue the episodes in progress
        envs.close()
        envs = restore_envs(run.restored["envs"])
        loop = run.restored["loop"]
        obs, prev_done, ep_ret, ep_len = (loop[k] for k in ("obs", "prev_done", "ep_ret", "ep_len"))
    else:  # a fresh start (or a resume whose envs could not be saved: they restart)
        ep_ret, ep_len = np.zeros(N), np.zeros(N, np.int64)
        obs, _ = envs.reset(seed=run.env_seed + step)
        prev_done = np.zeros(N, bool)
    iterations = max(1, run.steps // (N * T))
    while it < iterations and not run.stopping:
        it += 1
        frac = 1.0 - (it - 1) / iterations
        lr = cfg.lr * frac if cfg.anneal_lr else cfg.lr
        clip = cfg.clip * frac if cfg.anneal_clip else cfg.clip
        for g in opt.param_groups:
            g["lr"] = lr

        # -- rollout ------------------------------------------------------------------------
        with tel.timer("rollout"), torch.inference_mode():
            for t in range(T):
                valid = ~prev_done
                if diag:
                    raw_obs[t] = obs
                obs_buf[t] = torch.as_tensor(obs_norm(obs) if obs_norm else obs)
                out, value = ac(obs_buf[t].to(device))
                action = ac.sample(out)
                logp, _ = ac.logp_entropy(out, action)
                obs, reward, term, trunc, _ = envs.step(to_env_action(action))
                done = term | trunc
                reward = np.asarray(reward, np.float64)
                raw_rew[t] = reward
                act_buf[t], logp_buf[t], val_buf[t] = action.cpu(), logp.cpu(), value.cpu()
                rew_buf[t] = torch.as_tensor(
                    rew_scaler(reward, done, valid) if rew_scaler else reward
                )
                term_buf[t], done_buf[t] = torch.as_tensor(term), torch.as_tensor(done)
                valid_buf[t] = torch.as_tensor(valid)
                # episode bookkeeping on raw rewards (the reset step belongs to no episode)
                ep_ret += np.where(valid, reward, 0.0)
                ep_len += valid
                for i in np.flatnonzero(done):
                    tel.episode(step + (t + 1) * N, ep_ret[i], ep_len[i])
                    ep_ret[i], ep_len[i] = 0.0, 0
                prev_done = done
            step += N * T

            # -- advantages (GAE) -------------------------------------------------------------
            o = obs_norm(obs, update=False) if obs_norm else obs
            _, last_value = ac(torch.as_tensor(o, device=device))
            next_val = torch.cat([val_buf[1:], last_value.cpu()[None]])
            adv, ret = gae(
                rew_buf, val_buf, next_val, term_buf, done_buf, cfg.gamma, cfg.gae_lambda
            )

        # -- flatten the valid transitions --------------------------------------------------
        keep = valid_buf.reshape(-1).nonzero().squeeze(-1)
        b_obs = obs_buf.reshape(T * N, *obs_space.shape)[keep].to(device)
        b_act = act_buf.reshape(T * N, *act_space.shape)[keep].to(device)
        b_logp, b_adv, b_ret, b_val = (
            x.reshape(-1)[keep].to(device) for x in (logp_buf, adv, ret, val_buf)
        )
        n = len(keep)
        n_mb = max(1, round(n / cfg.minibatch_size))

        # -- update -------------------------------------------------------------------------
        theta0 = nn.utils.parameters_to_vector(params).detach().clone() if diag else None
        epochs_done = 0
        with tel.timer("update"):
            for _ in range(cfg.epochs):
                epochs_done += 1
                kl_stop = False
                for mb in torch.randperm(n, device=device).tensor_split(n_mb):
                    out, value = ac(b_obs[mb])
                    logp, entropy = ac.logp_entropy(out, b_act[mb])
                    logratio = logp - b_logp[mb]
                    ratio = logratio.exp()
                    a = b_adv[mb]
                    if cfg.norm_adv and len(mb) > 1:
                        a = (a - a.mean()) / (a.std() + 1e-8)
                    pg_loss = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
                    if cfg.clip_vloss:
                        v_clipped = b_val[mb] + (value - b_val[mb]).clamp(-clip, clip)
                        v_loss = (
                            0.5
                            * torch.max(
                                (value - b_ret[mb]) ** 2, (v_clipped - b_ret[mb]) ** 2
                            ).mean()
                        )
                    else:
                        v_loss = 0.5 * ((value - b_ret[mb]) ** 2).mean()
                    loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy.mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    # the norm before clipping; max_norm=inf only measures it
                    grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm or math.inf)
                    opt.step()
                    with torch.no_grad():
                        mb_kl = ((ratio - 1) - logratio).mean()
                        tel.store(
                            **{
                                "train/policy_loss": pg_loss.detach(),
                                "train/value_loss": v_loss.detach(),
                                "train/entropy": entropy.mean().detach(),
                                "train/clip_frac": ((ratio - 1).abs() > clip).float().mean(),
                                "train/grad_norm": grad_norm,
                            }
                        )
                    if cfg.target_kl and mb_kl > 1.5 * cfg.target_kl:
                        kl_stop = True
                        break
                if kl_stop:
                    break

        # -- diagnostics --------------------------------------------------------------------
        if diag:
            with torch.no_grad():
                out, _ = ac(b_obs)
                logp_new, entropy = ac.logp_entropy(out, b_act)
                logratio = logp_new - b_logp
                theta = nn.utils.parameters_to_vector(params)
                valid_np = valid_buf.numpy()
                tel.log(
                    **{
                        "train/approx_kl": float(((logratio.exp() - 1) - logratio).mean()),
                        "train/explained_var": explained_variance(b_val, b_ret),
                        "train/update_ratio": float((theta - theta0).norm() / theta0.norm()),
                        "train/lr": lr,
                        "train/clip_range": clip,
                        "train/epochs": epochs_done,
                        "rollout/value_mean": float(b_val.mean()),
                        "rollout/value_std": float(b_val.std()),
                        "rollout/adv_mean": float(b_adv.mean()),
                        "rollout/adv_std": float(b_adv.std()),
                        "rollout/return_target_mean": float(b_ret.mean()),
                        "rollout/return_target_absmax": float(b_ret.abs().max()),
                    }
                )
                if ac.discrete:
                    tel.log(**{"train/entropy_norm": float(entropy.mean()) / max_entropy})
                else:
                    tel.log(**{"train/policy_std": float(ac.log_std.exp().mean())})
                obs_v = raw_obs[valid_np]
                rew_v = raw_rew[valid_np]
                tel.log(
                    **{
                        "env/obs_absmean_max": float(np.abs(obs_v.mean(0)).max()),
                        "env/obs_std_max": float(obs_v.std(0).max()),
                    }
                )
                tel.log_stats("env/reward", rew_v)
                if rew_scaler:
                    tel.log(**{"env/reward_scale": rew_scaler.scale})
                if not ac.discrete:
                    tel.log(
                        **{
                            "env/action_clip_frac": float(
                                ((b_act < torch.as_tensor(low)) | (b_act > torch.as_tensor(high)))
                                .float()
                                .mean()
                            )
                        }
                    )

        if run.eval_due(step):
            run.evaluate(step, agent.act)
        run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
