"""A user's own env module, as `--env tests.user_envs:Grid10-v0` imports it: a frame env of the
layout third-party image envs use (MinAtar's 10x10 booleans, channels last)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Frames(gym.Env):
    """A 1-D walk shown as a frame: `shape`, `dtype` and the layout a third-party env might use
    (the agent's cell lit in channel 0, the goal's in the last), reward +1 at the goal (which
    ends the episode)."""

    def __init__(self, shape=(10, 10, 4), dtype="bool", last=True, n=10):
        self.shape, self.dtype, self.last, self.n = tuple(shape), np.dtype(dtype), last, n
        high = 1.0 if self.dtype.kind in "bf" else 255
        self.observation_space = gym.spaces.Box(0, high, self.shape, self.dtype)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0

    def _obs(self):
        frame = np.zeros(self.shape, self.dtype)
        on = True if self.dtype == np.bool_ else (1.0 if self.dtype.kind == "f" else 255)
        if self.last:
            frame[self.pos % self.shape[0], 0, 0] = on
            frame[-1, -1, -1] = on
        else:
            frame[0, self.pos % self.shape[1], 0] = on
            frame[-1, -1, -1] = on
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action else -1))
        done = self.pos >= self.n - 1
        return self._obs(), float(done), done, False, {}


gym.register(
    "Grid10-v0", entry_point=Frames, kwargs={"shape": (10, 10, 4), "dtype": "bool"},
    max_episode_steps=50,
)  # fmt: skip
