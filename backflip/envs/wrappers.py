"""Small Gymnasium wrappers behind `EnvOptions` (env.* keys) and the observation-space adapters."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from backflip.errors import NonFiniteError


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


class OneHotObservation(gym.ObservationWrapper):
    """Discrete(n) observations -> one-hot float vectors (FrozenLake, Taxi, ...)."""

    def __init__(self, env):
        super().__init__(env)
        self.n = env.observation_space.n
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def observation(self, obs):
        out = np.zeros(self.n, np.float32)
        out[int(obs)] = 1.0
        return out


class FrameDifference(gym.ObservationWrapper):
    """Observe o_t - o_{t-1} (zero at reset): static background vanishes (Karpathy's Pong trick)."""

    def __init__(self, env):
        super().__init__(env)
        box = env.observation_space
        span = (box.high - box.low).astype(np.float32)
        self.observation_space = gym.spaces.Box(-span, span, box.shape, np.float32)
        self.prev = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.prev = np.asarray(obs, np.float32)
        return np.zeros_like(self.prev), info

    def observation(self, obs):
        obs = np.asarray(obs, np.float32)
        diff, self.prev = obs - self.prev, obs
        return diff


class FloatObservation(gym.ObservationWrapper):
    """Cast Box observations to float32 (some envs emit float64)."""

    def __init__(self, env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(
            box.low.astype(np.float32), box.high.astype(np.float32), box.shape, np.float32
        )

    def observation(self, obs):
        return np.asarray(obs, np.float32)


class FiniteObservations(gym.vector.VectorWrapper):
    """Raise `NonFiniteError` as soon as a vector env returns a NaN or infinite observation,
    naming the env copy, the element and the env step (SeedRun puts it on every env it makes
    while `doctor.stop_on_nan` is on). Costs ~2 µs a step; integer observations (images) are
    never checked."""

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self.env_steps = 0

    @staticmethod
    def applies(env: gym.vector.VectorEnv) -> bool:
        space = env.single_observation_space
        return isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._check(obs, "reset")
        return obs, info

    def step(self, actions):
        obs, reward, term, trunc, info = self.env.step(actions)
        self.env_steps += self.num_envs
        self._check(obs, "step")
        return obs, reward, term, trunc, info

    def _check(self, obs, when: str) -> None:
        if np.isfinite(obs).all():
            return

        a = np.asarray(obs)
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        copy, element = where[0], where[1:]
        at = f"after env step {self.env_steps:,}" if when == "step" else "on reset"
        raise NonFiniteError(
            f"non-finite observation from the environment {at}: env copy {copy}, "
            f"observation{list(element)} = {a[where]} — stopping this seed "
            "(doctor.stop_on_nan=false to go on)"
        )
