"""Small helpers shared by the algorithm files: advantage estimation and value-fit quality."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from backflip.config import TrainConfig
from backflip.errors import UserError
from backflip.nets import ActorCritic, params_vector
from backflip.normalize import ObsNormalizer


@dataclass
class Agent:
    """A trained policy as plain functions on batches of raw observations.

    Every algorithm module has `load(checkpoint, obs_space, act_space, device) -> Agent`; probes,
    `backflip watch` and evaluation from checkpoints use it.
    """

    act: Callable[[np.ndarray], np.ndarray]
    """greedy (deterministic) actions for a batch of observations"""
    value: Callable[[np.ndarray], np.ndarray] | None = None
    """the agent's value estimate per observation: V(s), or max_a Q(s, a); None if it has none"""


def obs_dtype(obs_space) -> torch.dtype:
    """Rollout storage dtype: images stay uint8 (the CNN scales them), the rest is float32."""
    return torch.uint8 if obs_space.dtype == np.uint8 else torch.float32


def check_obs(obs_space, norm_obs: bool, algo: str) -> bool:
    """True for image observations; refuses `norm_obs` on them (the CNN divides by 255)."""
    images = len(obs_space.shape) == 3
    if images and norm_obs:
        raise UserError(f"{algo}: norm_obs is for vector observations; images are scaled by 1/255")
    return images


def log_obs_stats(tel, obs: np.ndarray) -> None:
    """env/obs_absmean_max and env/obs_std_max of raw vector observations (rows are samples)."""
    tel.log(
        **{
            "env/obs_absmean_max": float(np.abs(obs.mean(0)).max()),
            "env/obs_std_max": float(obs.std(0).max()),
        }
    )


@torch.no_grad()
def log_policy_health(tel, ac, obs, act, logp_old, theta0, max_entropy) -> None:
    """After an update of a `nets.ActorCritic`: KL(π_old ‖ π_new) on the batch (estimator
    mean((r−1) − log r), r = π_new/π_old, as PPO), the entropy normalized by log|A| (discrete) or
    the Gaussian std (Box), and the relative parameter change ‖θ − θ0‖ / ‖θ0‖."""
    out = ac.policy(obs)
    logp, entropy = ac.logp_entropy(out, act)
    logratio = logp - logp_old

    theta = params_vector(ac.parameters())
    tel.log(
        **{
            "train/approx_kl": float(((logratio.exp() - 1) - logratio).mean()),
            "train/update_ratio": float((theta - theta0).norm() / theta0.norm()),
        }
    )
    if ac.discrete:
        tel.log(**{"train/entropy_norm": float(entropy.mean()) / max_entropy})
    else:
        tel.log(**{"train/policy_std": float(ac.std(out).mean())})


def log_rollout_health(tel, values, returns, adv) -> None:
    """Value fit and the scale of values, advantages (before normalization) and value targets."""
    tel.log(
        **{
            "train/explained_var": explained_variance(values, returns),
            "rollout/value_mean": float(values.mean()),
            "rollout/value_std": float(values.std()),
            "rollout/adv_mean": float(adv.mean()),
            "rollout/adv_std": float(adv.std()),
            "rollout/return_target_mean": float(returns.mean()),
            "rollout/return_target_absmax": float(returns.abs().max()),
        }
    )


def actor_critic_agent(ac, obs_norm, act_space, device) -> Agent:
    """Greedy actions and values of a `nets.ActorCritic` on raw observations (the observation
    normalizer, if any, frozen): for evaluation, probes and videos (PPO, A2C, VPG)."""

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


def build_actor_critic(cfg, obs_space, act_space):
    """The `nets.ActorCritic` a PPO, A2C or VPG config describes (hidden, activation,
    log_std_init, sde, cnn), freshly initialized."""
    return ActorCritic(
        obs_space.shape, act_space, cfg.hidden, cfg.activation, cfg.log_std_init, cfg.sde, cfg.cnn
    )


def load_actor_critic(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The agent in a checkpoint whose state holds `model` (an ActorCritic built from the
    config's `hidden`, `activation`, `log_std_init`, `sde`, `cnn`) and `obs_norm` (or None)."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    ac = build_actor_critic(cfg, obs_space, act_space)
    ac.to(device).load_state_dict(checkpoint["state"]["model"])
    obs_norm = None
    if checkpoint["state"]["obs_norm"] is not None:
        obs_norm = ObsNormalizer(obs_space.shape)
        obs_norm.load_state_dict(checkpoint["state"]["obs_norm"])
    return actor_critic_agent(ac, obs_norm, act_space, torch.device(device))


def gae(rewards, values, next_values, terminated, done, gamma: float, lam: float):
    """Generalized advantage estimates and value targets for a (T, N) rollout.

    `next_values[t]` is V(s_{t+1}) as observed after step t — on an episode's last step, the value
    of its final observation. `terminated` zeroes that bootstrap (a real end: nothing follows);
    `done` (terminated or truncated) only stops advantages flowing back across episodes. So a
    time-limit truncation still bootstraps from V(s_final), as it must.

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    """
    not_term, not_done = (~terminated).float(), (~done).float()
    delta = rewards + gamma * next_values * not_term - values
    decay = gamma * lam * not_done  # (once, not per step: A2C calls this every 40 env steps)
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        last = delta[t] + decay[t] * last
        adv[t] = last
    return adv, adv + values


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - pred] / Var[target]: 1 is perfect, 0 a constant, < 0 worse than one."""
    var = target.var()
    return float("nan") if var == 0 else float(1 - (target - pred).var() / var)


class EpisodeTracker:
    """Running return and length per env copy; finished episodes go to `tel.episode`.

    Works on raw (unscaled) rewards under NEXT_STEP autoreset: the reset step after an episode
    end has reward 0 and `valid` False, so it belongs to no episode.
    """

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs)
        self.len = np.zeros(num_envs, np.int64)

    def update(self, step: int, reward: np.ndarray, done: np.ndarray, valid: np.ndarray, tel):
        self.ret += reward
        self.len += valid
        if done.any():
            for i in np.flatnonzero(done):
                tel.episode(step, self.ret[i], self.len[i])
            self.ret[done], self.len[done] = 0.0, 0
