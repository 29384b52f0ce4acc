"""Small Gymnasium wrappers behind `EnvOptions` (env.* keys) and the observation-space adapters.

The fault-injection wrappers live in `faults.py` (re-exported here).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from backflip.envs.faults import AffineObservation, GrowingWork, NaNRewardAfter, ScaleReward
from backflip.errors import NonFiniteError

__all__ = ["AffineObservation", "GrowingWork", "NaNRewardAfter", "ScaleReward"]


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
