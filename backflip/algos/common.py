"""Small helpers shared by the algorithm files: advantage estimation and value-fit quality."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


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
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        last = delta[t] + gamma * lam * not_done[t] * last
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
