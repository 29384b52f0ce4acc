"""Test-only environments, reached from the CLI as `--env tests.fault_envs:<Id>`."""

from __future__ import annotations

from typing import ClassVar

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


class CrashAfterEzPickle(CrashAfter, gym.utils.EzPickle):
    """CrashAfter that pickles as MuJoCo's envs do, as its constructor arguments (EzPickle): a
    checkpoint cannot hold it mid-episode."""

    def __init__(self, after: int = 1000):
        CrashAfter.__init__(self, after)
        gym.utils.EzPickle.__init__(self, after)


class MultiDiscreteActions(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([16, 16, 16])  # 4,096: too many to read as one

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


class InfiniteBoxActions(MultiDiscreteActions):
    """Box actions without bounds: SAC, TD3, DDPG and CEM squash theirs into the bounds."""

    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


class RenderBreaks(MultiDiscreteActions):
    """A working env whose own render() raises (a user's bug): training goes on without videos,
    `backflip watch` says so in one line."""

    action_space = gym.spaces.Discrete(2)
    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.x, {}

    def step(self, action):  # reward for the action that matches the sign of x[0]
        reward = float((self.x[0] > 0) == bool(action))
        self.x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.x, reward, False, False, {}

    def render(self):
        return np.full((8, 8, 3), 255, np.int8)  # OverflowError: 255 out of bounds for int8


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
gym.register("CrashAfterEzPickle-v0", entry_point=CrashAfterEzPickle, kwargs={"after": 250})
gym.register("MultiDiscreteActions-v0", entry_point=MultiDiscreteActions, max_episode_steps=10)
gym.register("InfiniteBoxActions-v0", entry_point=InfiniteBoxActions, max_episode_steps=10)
gym.register("RenderBreaks-v0", entry_point=RenderBreaks, max_episode_steps=10)
# an env whose entry point's module needs a package that is not installed (Gymnasium's own
# `tabular/*` and `phys2d/*` ids without jax)
gym.register("NeedsMissingPackage-v0", entry_point="backflip_no_such_package.envs:Env")
gym.register("EndlessReward-v0", entry_point=EndlessReward, max_episode_steps=5)
# no time limit at all: its episodes never end (a continuing task)
gym.register("NeverEnds-v0", entry_point=EndlessReward)


class ArrayReward(EndlessReward):
    """Its reward is a shape-(1,) array, a common slip (`np.array([r])`, a model's output)."""

    def step(self, action):
        return np.zeros(1, np.float32), np.array([1.0]), False, False, {}


class OldGymApi(EndlessReward):
    """Written for the old Gym API: step returns (obs, reward, done, info)."""

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, {}


class WrongShapeObservation(EndlessReward):
    """Returns (1, 1) observations where its space says (1,)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((1, 1), np.float32), {}


class OneAction(EndlessReward):
    action_space = gym.spaces.Discrete(1)


class SmallMatrix(EndlessReward):
    """A (3, 4) matrix of features: too small for any CNN, a vector of 12."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3, 4), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((3, 4), np.float32), {}

    def step(self, action):
        return np.full((3, 4), float(action), np.float32), float(action), False, False, {}


gym.register("ArrayReward-v0", entry_point=ArrayReward, max_episode_steps=5)
gym.register("WrongShapeObservation-v0", entry_point=WrongShapeObservation, max_episode_steps=5)
gym.register("OneAction-v0", entry_point=OneAction, max_episode_steps=5)
gym.register("SmallMatrix-v0", entry_point=SmallMatrix, max_episode_steps=20)
gym.register("OldGymApi-v0", entry_point=OldGymApi, max_episode_steps=5)
gym.register("EndlessRewardBox-v0", entry_point=EndlessRewardBox, max_episode_steps=5)


class MovingSquare(gym.Env):
    """Image observations (32×32×3 uint8): a white square drifting with the action, for
    preflight's contact sheet."""

    observation_space = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = int(self.np_random.integers(4, 28)), 0
        return self._frame(), {}

    def step(self, action):
        self.x = int(np.clip(self.x + int(action) - 1, 2, 29))
        self.t += 1
        return self._frame(), float(abs(self.x - 16) < 3), False, False, {}

    def _frame(self):
        frame = np.zeros((32, 32, 3), np.uint8)
        frame[14:18, self.x - 2 : self.x + 2] = 255
        return frame


class Unseeded(gym.Env):
    """Ignores the reset seed: observations come from NumPy's global generator."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        obs = np.random.uniform(-1, 1, 2).astype(np.float32)
        return obs, 1.0, bool(np.random.random() < 0.1), False, {}


gym.register("MovingSquare-v0", entry_point=MovingSquare, max_episode_steps=50)
gym.register("Unseeded-v0", entry_point=Unseeded, max_episode_steps=50)


class SkippyPong(MovingSquare):
    """Takes Atari's frameskip and sticky-action settings (preflight must warn about them)."""

    def __init__(self, frameskip=4, repeat_action_probability=0.25):
        self.frameskip, self.repeat_action_probability = frameskip, repeat_action_probability


# an Atari-style registration: frame skip and sticky actions built into the env
gym.register(
    "SkippyPong-v0",
    entry_point=SkippyPong,
    max_episode_steps=50,
    kwargs={"frameskip": (2, 5), "repeat_action_probability": 0.25},
)


class NaNObservationAfter(gym.Env):
    """Random observations in [-1, 1] until env step `after`, then NaN in element 1 (a broken
    simulator): the seed must stop naming the observation, not with a torch error."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, after: int = 100):
        self.after, self.count, self.t = after, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.count += 1
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        if self.count > self.after:
            obs[1] = np.nan
        return obs, 1.0, self.t >= 20, False, {}


class IntegerBoxActions(gym.Env):
    """A Box action space of integers: no continuous policy can act in it."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(0, 5, (1,), np.int64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


gym.register("NaNObservationAfter-v0", entry_point=NaNObservationAfter, max_episode_steps=20)
gym.register("IntegerBoxActions-v0", entry_point=IntegerBoxActions, max_episode_steps=20)
