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
