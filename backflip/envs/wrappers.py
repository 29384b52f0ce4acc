"""Small Gymnasium wrappers behind `EnvOptions` (env.* keys) and the observation-space adapters.

The fault-injection wrappers live in `faults.py` (re-exported here).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from backflip.cnns import SMALLEST_FRAME
from backflip.envs.faults import AffineObservation, GrowingWork, NaNRewardAfter, ScaleReward
from backflip.errors import NonFiniteError

__all__ = ["AffineObservation", "GrowingWork", "NaNRewardAfter", "ScaleReward"]


class OneHotObservation(gym.ObservationWrapper):
    """Discrete(n) observations -> one-hot float vectors (FrozenLake, Taxi, ...)."""

    def __init__(self, env):
        super().__init__(env)
        self.n, self.start = env.observation_space.n, int(env.observation_space.start)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def observation(self, obs):
        out = np.zeros(self.n, np.float32)
        out[int(obs) - self.start] = 1.0  # Discrete(n, start=k) holds k..k+n-1
        return out


MAX_JOINT_ACTIONS = 256  # MultiDiscrete/MultiBinary actions read as one Discrete up to this many


class JointDiscreteAction(gym.ActionWrapper):
    """A small MultiDiscrete (or MultiBinary) action space as one Discrete over every
    combination, row-major (the last dimension varies fastest): backflip's discrete policies
    (PPO, A2C, VPG, DQN) then act in it unchanged, and a reward model reads the joint action
    one-hot. Exact (no combination is lost); for spaces of at most `MAX_JOINT_ACTIONS`. A
    Discrete(n, start=k) is shifted to start at 0 the same way (the policies emit 0..n-1: sent
    as they are, an env whose actions start at -1 got the wrong ones, silently)."""

    def __init__(self, env):
        super().__init__(env)
        space = self.joint_of = env.action_space
        self.scalar = isinstance(space, gym.spaces.Discrete)  # Discrete(n, start != 0)
        if self.scalar:
            self.nvec, self.start = np.array([space.n]), np.array([space.start])
            self.shape, self.dtype = (), space.dtype
        elif isinstance(space, gym.spaces.MultiBinary):
            self.nvec, self.start = np.full(int(np.prod(space.shape)), 2), 0
            self.shape, self.dtype = space.shape, space.dtype
        else:
            self.nvec, self.start = space.nvec.ravel(), space.start.ravel()
            self.shape, self.dtype = space.nvec.shape, space.dtype
        self.action_space = gym.spaces.Discrete(int(np.prod(self.nvec)))

    def action(self, action):
        if self.scalar:
            return int(action) + int(self.start[0])
        parts = np.unravel_index(int(action), tuple(int(n) for n in self.nvec))
        return (np.asarray(parts) + self.start).astype(self.dtype).reshape(self.shape)


class FlatMultiDiscreteAction(gym.ActionWrapper):
    """A MultiDiscrete (or MultiBinary) action space too large to read as one Discrete, as a flat
    MultiDiscrete that starts at 0: what backflip's factorized policy head emits (one categorical
    per part, `nets.ActorCritic`), each action sent back shifted and shaped as the env's. Exact."""

    def __init__(self, env):
        super().__init__(env)
        space = self.joint_of = env.action_space
        if isinstance(space, gym.spaces.MultiBinary):
            nvec, self.start = np.full(int(np.prod(space.shape)), 2), 0
            self.shape = space.shape
        else:
            nvec, self.start = space.nvec.ravel(), space.start.ravel()
            self.shape = space.nvec.shape
        self.dtype = space.dtype
        self.action_space = gym.spaces.MultiDiscrete(nvec.astype(np.int64))

    def action(self, action):
        return (np.asarray(action) + self.start).astype(self.dtype).reshape(self.shape)


def joint_actions(space: gym.Space) -> int | None:
    """How many combinations a MultiDiscrete/MultiBinary action space holds, or a Discrete one
    that does not start at 0 (None: a space the policies act in as it is)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n) if int(space.start) != 0 else None
    if isinstance(space, gym.spaces.MultiBinary):
        return 2 ** int(np.prod(space.shape))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.prod(space.nvec.astype(object)))  # no overflow on huge spaces
    return None


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
        # the first non-finite reward the env gave (env step, copy, value), kept so that a seed
        # that then fails names the env, not its learning rate (`launch/seed.py: failure_text`)
        self.bad_reward: tuple[int, int, float] | None = None

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
        if self.bad_reward is None and not np.isfinite(reward).all():
            copy = int(np.flatnonzero(~np.isfinite(reward))[0])
            self.bad_reward = (self.env_steps, copy, float(np.asarray(reward)[copy]))
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


class ImageObservation(gym.ObservationWrapper):
    """Frames as backflip's CNNs read them: (C, H, W) uint8. A channels-last frame (H, W, C),
    Gymnasium's convention (MinAtar's 10x10x4 booleans, rendered RGB), is transposed; a 2-D frame
    gets one channel; booleans become 0/255 and floats with finite bounds are mapped from
    [low, high] to [0, 255] (`observation_layout` decides which observations are frames)."""

    def __init__(self, env, channels_last: bool):
        super().__init__(env)
        box = env.observation_space
        self.channels_last = channels_last
        self.dtype = box.dtype
        shape = box.shape if len(box.shape) == 3 else (*box.shape, 1)
        if channels_last or len(box.shape) == 2:
            h, w, c = shape
        else:
            c, h, w = shape
        self.low = self.span = None
        if np.issubdtype(box.dtype, np.floating):
            low, high = float(np.min(box.low)), float(np.max(box.high))
            self.low, self.span = low, max(high - low, 1e-12)
        self.observation_space = gym.spaces.Box(0, 255, (c, h, w), np.uint8)

    def observation(self, obs):
        x = np.asarray(obs)
        if x.ndim == 2:
            x = x[..., None]
        if self.channels_last or np.asarray(obs).ndim == 2:
            x = np.moveaxis(x, -1, 0)
        if x.dtype == np.bool_:
            return x.astype(np.uint8) * np.uint8(255)
        if self.span is not None:
            x = (x.astype(np.float32) - self.low) * (255.0 / self.span)
            return np.clip(np.rint(x), 0, 255).astype(np.uint8)
        return np.ascontiguousarray(x, np.uint8)


def observation_layout(space: gym.Space, layout: str = "auto") -> str:
    """What backflip makes of an observation space: `vector` (a Box of numbers, as it is),
    `channels_first` or `channels_last` (a frame), `one_hot` (Discrete), `flatten` (Tuple, Dict,
    MultiDiscrete, MultiBinary, a scalar or a small matrix: Gymnasium's `FlattenObservation`, discrete
    parts one-hot). `layout` (`env.obs_layout`) overrides the guess for a 2-D or 3-D Box.
    Raises ValueError, with the reason, for a space no network here can read."""
    if isinstance(space, gym.spaces.Discrete):
        return "one_hot"
    if isinstance(space, gym.spaces.Box):
        shape = space.shape
        if layout != "auto":
            if layout != "vector" and len(shape) not in (2, 3):
                raise ValueError(f"env.obs_layout={layout} needs 2-D or 3-D observations")
            return "flatten" if layout == "vector" and len(shape) > 1 else layout
        if len(shape) == 0:
            return "flatten"  # a scalar: a vector of one number
        if len(shape) == 1:
            return "vector"
        if len(shape) > 3:
            return "flatten"
        if not _frame_like(space):
            return "flatten"
        if len(shape) == 2:
            return "channels_last"  # (H, W): one channel, added last
        # backflip's own frames and Atari stacks are (C, H, W) with a few channels first;
        # anything else is Gymnasium's convention, (H, W, C)
        if shape[0] <= 4 and shape[0] < min(shape[1], shape[2]):
            return "channels_first"
        return "channels_last"
    if isinstance(space, gym.spaces.Text | gym.spaces.Graph | gym.spaces.Sequence):
        raise ValueError(f"{type(space).__name__} observations are not numbers")
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        for sub in space.values() if isinstance(space, gym.spaces.Dict) else space.spaces:
            kind = observation_layout(sub)
            if kind.startswith("channels_"):
                raise ValueError(
                    f"it holds a frame ({sub}) beside other parts: flattened, a frame loses its "
                    "shape; keep the frame alone (e.g. MiniGrid's ImgObsWrapper) or encode it"
                )
        return "flatten"
    if isinstance(space, gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return "flatten"
    raise ValueError(f"backflip has no encoder for {type(space).__name__} observations")


def _frame_like(box: gym.spaces.Box) -> bool:
    """A 2-D or 3-D Box is a frame when it is at least `cnns.SMALLEST_FRAME` pixels on a side
    (the small CNN's two 3x3 convolutions) of booleans, bytes or floats with finite bounds (a
    float image with unbounded values cannot be scaled for a CNN)."""
    shape = box.shape
    spatial = shape if len(shape) == 2 else sorted(shape)[1:]
    if min(spatial) < SMALLEST_FRAME:
        return False
    if box.dtype == np.bool_ or box.dtype == np.uint8:
        return True
    return bool(np.all(np.isfinite(box.low)) and np.all(np.isfinite(box.high)))


class RenderFrames(gym.Wrapper):
    """Put the env's own rendered frame of the observation it returns in `info["frame"]` (on
    reset, and on every `stride`-th step of each `length`-step clip counted from the reset: the
    clips `prefs/segments.py: SegmentRecorder` cuts): what a person is shown of a clip, at the
    env's native size and in its colours, not the policy's preprocessed input (a preference run
    labeled by people, `prefs/pipeline.py`). A step without a frame has no "frame" key (read
    them with `rendered`). The env must be made with render_mode="rgb_array"."""

    def __init__(self, env: gym.Env, stride: int = 1, length: int = 0):
        super().__init__(env)
        self.stride, self.length, self.t = max(1, stride), length, 0
        self.last = (None, None)  # the last observation rendered, and its frame

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.t = 0
        return obs, {**info, "frame": self._frame(obs)}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        at = self.t % self.length if self.length else self.t
        if at % self.stride == 0:
            # the absorbing state of a fixed horizon (`envs/horizon.py`) holds the last
            # observation: its frame is the one already rendered
            held = info.get("absorbing") and obs is self.last[0]
            info = {**info, "frame": self.last[1] if held else self._frame(obs)}
        return obs, reward, terminated, truncated, info

    def _frame(self, obs) -> np.ndarray:
        frame = np.ascontiguousarray(self.env.render(), np.uint8)
        self.last = (obs, frame)
        return frame


def rendered(info: dict, n: int) -> list[np.ndarray | None]:
    """Each copy's rendered frame in a vector env's step `info` (`RenderFrames`), None where
    the copy rendered none at this step."""
    if "frame" not in info:
        return [None] * n
    have = info.get("_frame", np.ones(n, bool))
    # copies: a view would keep the whole batch of frames alive as long as one clip holds it
    return [info["frame"][i].copy() if have[i] else None for i in range(n)]


class Chain:
    """Wrappers applied one after the other, as one picklable callable (checkpoints pickle the
    envs with the functions that made them)."""

    def __init__(self, *wrappers):
        self.wrappers = [w for w in wrappers if w is not None]

    def __call__(self, env):
        for wrap in self.wrappers:
            env = wrap(env)
        return env
