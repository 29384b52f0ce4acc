"""Fault injection: wrappers that break an environment on purpose (the `env.*` fault options
in docs/doctor.md), so the doctor can be shown what broken looks like.

They import nothing but Gymnasium, NumPy and the standard library, and use only the `gym.Wrapper`
API that Gymnasium 0.26-1.x share: the doctor's calibration (benchmarks/doctor_calibration_libs.py)
puts the same faults into Stable-Baselines3's runs and into CleanRL's scripts, which run on their
own Gymnasium 0.29 and load this file by its path (without `backflip.envs`, which needs 1.x).
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class ScaleReward(gym.RewardWrapper):
    """r -> scale * r (fault injection for the reward-scale diagnostics)."""

    def __init__(self, env, scale: float):
        super().__init__(env)
        self.scale = scale

    def reward(self, reward):
        return self.scale * reward


class AffineObservation(gym.ObservationWrapper):
    """o -> scale * o + shift (fault injection for the unnormalized-input diagnostics)."""

    def __init__(self, env, scale: float, shift: float):
        super().__init__(env)
        self.scale, self.shift = scale, shift
        box = env.observation_space
        low, high = box.low * scale + shift, box.high * scale + shift
        self.observation_space = gym.spaces.Box(
            np.minimum(low, high), np.maximum(low, high), box.shape, np.float32
        )

    def observation(self, obs):
        return (obs * self.scale + self.shift).astype(np.float32)


class NaNRewardAfter(gym.Wrapper):
    """Reward becomes NaN from env step `at` on (counts steps of this copy across episodes)."""

    def __init__(self, env, at: int):
        super().__init__(env)
        self.at, self.count = at, 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.count += 1
        return obs, (float("nan") if self.count >= self.at else r), term, trunc, info


class GrowingWork(gym.Wrapper):
    """Busy-waits `us_per_kstep * steps / 1000` microseconds per step: a throughput leak on purpose."""

    def __init__(self, env, us_per_kstep: float):
        super().__init__(env)
        self.us, self.count = us_per_kstep, 0

    def step(self, action):
        self.count += 1
        end = time.perf_counter() + self.us * self.count / 1000 * 1e-6
        while time.perf_counter() < end:
            pass
        return self.env.step(action)
