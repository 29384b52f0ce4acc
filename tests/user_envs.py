"""A user's own env module, as `--env tests.user_envs:Grid10-v0` imports it: a frame env of the
layout third-party image envs use (MinAtar's 10x10 booleans, channels last), and an env of
MultiBinary observations and MultiDiscrete actions."""

from __future__ import annotations

from typing import ClassVar

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


class Switches(gym.Env):
    """Six switches seen as MultiBinary(6); an action MultiDiscrete([3, 2]) with start [1, 0]
    sets switch a[0] - 1 (of the first three) to a[1]; reward: how many of the first three are
    on, every step (the other three flicker at random). 50 steps; the best return is ~149, a
    random policy's ~75."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.MultiBinary(6)
        self.action_space = gym.spaces.MultiDiscrete([3, 2], start=[1, 0])
        self.render_mode = render_mode
        self.s = np.zeros(6, np.int8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self.np_random.integers(0, 2, 6).astype(np.int8)
        return self.s.copy(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        self.s[int(action[0]) - 1] = int(action[1])
        self.s[3:] = self.np_random.integers(0, 2, 3)
        return self.s.copy(), float(self.s[:3].sum()), False, False, {}

    def render(self):  # the six switches as squares, white when on
        lit = (self.s.astype(np.uint8) * 255)[None, :, None]
        return np.repeat(np.repeat(lit, 10, 0), 10, 1).repeat(3, 2)


gym.register("Switches-v0", entry_point=Switches, max_episode_steps=50)


class Reach2x2(gym.Env):
    """Actions a Box of shape (2, 2): reward −‖a − target‖², the target (flattened) is the
    observation, new each step; 20 steps (best return 0, a random policy's ~−27)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (2, 2), np.float32)
        self.x = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.x, {}

    def step(self, action):
        action = np.asarray(action)
        assert action.shape == (2, 2), action.shape
        reward = -float(np.sum((action.ravel() - self.x) ** 2))
        self.x = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.x, reward, False, False, {}


gym.register("Reach2x2-v0", entry_point=Reach2x2, max_episode_steps=20)


class Sign(gym.Env):
    """A scalar observation, Box(-1, 1, ()): reward 1 for the action that matches its sign; 20
    steps (best return 20, random 10)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.x = np.float32(0)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = np.float32(self.np_random.uniform(-1, 1))
        return np.array(self.x), {}

    def step(self, action):
        reward = float((self.x > 0) == bool(action))
        self.x = np.float32(self.np_random.uniform(-1, 1))
        return np.array(self.x), reward, False, False, {}


gym.register("Sign-v0", entry_point=Sign, max_episode_steps=20)


class Aim(gym.Env):
    """A scalar action, Box(-1, 1, ()): reward −(a − x)², x the observation; 20 steps."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (), np.float32)
        self.x = np.zeros(1, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.x, {}

    def step(self, action):
        action = np.asarray(action)
        assert action.shape == (), action.shape
        reward = -float((action - self.x[0]) ** 2)
        self.x = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self.x, reward, False, False, {}


gym.register("Aim-v0", entry_point=Aim, max_episode_steps=20)


class Dials(gym.Env):
    """Four dials of 6 positions (MultiDiscrete([6, 6, 6, 6]): 1,296 combinations, more than
    one Discrete is read as); the observation shows a target position for each (one-hot, 24);
    reward: the dials set to their targets, out of 4, every step; new targets each step. 12
    steps: the best return is 48, a random policy's ~8."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (24,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([6, 6, 6, 6])
        self.target = np.zeros(4, np.int64)

    def _obs(self):
        obs = np.zeros((4, 6), np.float32)
        obs[np.arange(4), self.target] = 1
        return obs.ravel()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.np_random.integers(0, 6, 4)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        reward = float(np.sum(np.asarray(action) == self.target))
        self.target = self.np_random.integers(0, 6, 4)
        return self._obs(), reward, False, False, {}


gym.register("Dials-v0", entry_point=Dials, max_episode_steps=12)
