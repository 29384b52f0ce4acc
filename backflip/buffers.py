"""The replay buffer of the off-policy algorithms (DQN, DDPG, TD3, SAC).

Preallocated numpy arrays used as a ring: once `capacity` transitions are stored, each new one
overwrites the oldest. A transition is (s, a, r, s', terminated, truncated), and the two episode
flags are kept apart because they mean different things for the bootstrap:

    target = r + gamma * (1 - terminated) * V(s')

A termination (the pole fell) has no future; a truncation (the time limit) does, so its target
bootstraps from V(s') where s' is the episode's *final* observation. With Gymnasium's NEXT_STEP
autoreset that final observation is the one returned by the step that ended the episode; the
following step only resets the env (its action is ignored, its reward is 0) and is not a
transition, so the algorithms never store it. `truncated` is not needed by the one-step target;
it is stored so that episode boundaries can be recovered from the buffer (tests, n-step returns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Batch:
    """A sampled minibatch as tensors on the training device."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    """1.0 where the episode really ended at this transition (no bootstrap), else 0.0"""
    discount: torch.Tensor | None = None
    """γ^k for k-step returns (`sample_nstep`): the factor on the bootstrap value; else None"""


class ReplayBuffer:
    """A fixed-capacity ring of transitions with uniform sampling."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        obs_dtype=np.float32,
        act_dtype=np.float32,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ):
        self.capacity = int(capacity)
        self.obs = np.zeros((capacity, *obs_shape), obs_dtype)
        self.next_obs = np.zeros((capacity, *obs_shape), obs_dtype)
        self.actions = np.zeros((capacity, *act_shape), act_dtype)
        self.rewards = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, np.float32)
        self.truncated = np.zeros(capacity, bool)
        self.pos = 0  # where the next transition goes
        self.size = 0
        self.rng = np.random.default_rng(seed)
        self.device = torch.device(device)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated: bool, truncated: bool) -> None:
        """Store one transition; `next_obs` is the final observation when the episode ended."""
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.next_obs[i] = next_obs
        self.terminated[i] = terminated
        self.truncated[i] = truncated
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int) -> Batch:
        """`batch_size` transitions drawn uniformly with replacement."""
        idx = self.rng.integers(0, self.size, batch_size)

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a[idx]).to(self.device)

        return Batch(
            t(self.obs), t(self.actions), t(self.rewards), t(self.next_obs), t(self.terminated)
        )

    def sample_nstep(self, batch_size: int, n: int, gamma: float) -> Batch:
        """Like `sample`, but each transition carries the k-step return (Sutton 1988; Rainbow's
        n = 3): `rewards` = r_t + γ r_{t+1} + ... + γ^(k-1) r_{t+k-1}, `next_obs` and
        `terminated` from step t+k-1, `discount` = γ^k. k = n unless the episode ends first
        (terminated or truncated, inclusive) or the newest stored transition comes first. The
        lookahead reads the following ring slots, so it assumes one env writing transitions in
        time order, as DQN does; the idx draw is the same as `sample`'s."""
        idx = self.rng.integers(0, self.size, batch_size)
        steps = np.arange(n)
        ahead = (idx[:, None] + steps) % self.capacity  # (B, n) slots t .. t+n-1
        stored = (self.pos - 1 - idx) % self.capacity + 1  # transitions from t to the newest
        ended = self.terminated[ahead].astype(bool) | self.truncated[ahead]
        ended_before = np.cumsum(ended, axis=1) - ended  # episode ends among t .. t+j-1
        use = (steps < stored[:, None]) & (ended_before == 0)
        k = use.sum(axis=1)  # >= 1: slot t itself is always used
        last = ahead[np.arange(batch_size), k - 1]
        rewards = (self.rewards[ahead] * gamma**steps * use).sum(axis=1, dtype=np.float32)

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(self.device)

        return Batch(
            t(self.obs[idx]),
            t(self.actions[idx]),
            t(rewards),
            t(self.next_obs[last]),
            t(self.terminated[last]),
            t((gamma**k).astype(np.float32)),
        )

    def relabel(self, reward_fn, chunk: int = 4096) -> None:
        """Recompute every stored reward as `reward_fn(obs, actions, next_obs)` (arrays of up to
        `chunk` transitions): after a learned reward model changes, the old transitions are
        judged by the new model, not the one that happened to be current when they were stored
        (PEBBLE, Lee et al. 2021)."""
        for i in range(0, self.size, chunk):
            j = min(i + chunk, self.size)
            self.rewards[i:j] = reward_fn(self.obs[i:j], self.actions[i:j], self.next_obs[i:j])

    def recent(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(observations, rewards) of the last `n` transitions stored, oldest first."""
        n = min(n, self.size)
        idx = (self.pos - n + np.arange(n)) % self.capacity
        return self.obs[idx], self.rewards[idx]

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict:
        n = self.size
        return {
            "pos": self.pos,
            "size": n,
            "rng": self.rng.bit_generator.state,
            **{
                k: getattr(self, k)[:n].copy()
                for k in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated")
            },
        }

    def load_state_dict(self, state: dict) -> None:
        n = state["size"]
        for k in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated"):
            getattr(self, k)[:n] = state[k]
        self.pos, self.size = state["pos"], n
        self.rng.bit_generator.state = state["rng"]
