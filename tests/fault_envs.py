"""Test-only environments, reached from the CLI as `--env tests.fault_envs:<Id>`."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CrashAfter(gym.Env):
    """CartPole-like dynamics that raise a RuntimeError after `after` steps (a buggy env)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, after: int = 1000):
        self.after, self.count, self.t = after, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.count += 1
        self.t += 1
        if self.count > self.after:
            raise RuntimeError(f"simulator exploded at step {self.count}")
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, 1.0, self.t >= 20, False, {}


class MultiDiscreteActions(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


class EndlessReward(gym.Env):
    """Constant observation, reward 1 every step, never terminates: only the time limit ends it.

    With discount gamma the true value of every state is 1 / (1 - gamma): the episode's end is a
    truncation, so learning must bootstrap through it. Treating it as termination instead gives a
    value that falls towards 1 near the limit, averaging well below 1 / (1 - gamma).
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


class EndlessRewardBox(EndlessReward):
    """EndlessReward with a Box action (for DDPG, TD3 and SAC): the same value, 1 / (1 - gamma)."""

    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


gym.register("CrashAfter-v0", entry_point=CrashAfter, max_episode_steps=1000)
gym.register("MultiDiscreteActions-v0", entry_point=MultiDiscreteActions, max_episode_steps=10)
gym.register("EndlessReward-v0", entry_point=EndlessReward, max_episode_steps=5)
gym.register("EndlessRewardBox-v0", entry_point=EndlessRewardBox, max_episode_steps=5)
