"""MovingDot: a dot on a 210x160 screen that should move to the centre (Rahtz's `gym-moving-dot`).

The task Rahtz used to debug his preference-learning pipeline end to end before Pong. Actions are
Discrete(5): noop, down, right, up, left (one pixel each). The reward is +1 when a step brings the
dot closer to the centre (80, 105) (Euclidean distance), -1 when it moves it away, 0 otherwise
(noop, or pushing against a wall). Episodes last 1,000 steps from a uniformly random start, so a
random policy scores about 0 and the best possible return is the Manhattan distance from the start
to the centre (about 90 on average).

Registered variants (same dynamics and reward, different observations):

- `MovingDot-v0`          210x160x3 uint8 RGB frame with a white 4x4 dot (as in gym-moving-dot);
- `MovingDotLowDim-v0`    the dot's position (x / 160, y / 210) as two floats: fast runs;
- `MovingDot84-v0`        an 84x84 grayscale frame, channel first (1, 84, 84), the shape backflip's
                          CNN encoders take.

Every variant renders `rgb_array` frames (the 210x160 screen), which the human labeling page shows.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import gymnasium as gym
import numpy as np

HEIGHT, WIDTH = 210, 160
CENTRE = np.array([80, 105])  # (x, y)
DOT = 4
MOVES = np.array([[0, 0], [0, 1], [1, 0], [0, -1], [-1, 0]])  # noop, down, right, up, left


def draw(
    pos: np.ndarray, height: int = HEIGHT, width: int = WIDTH, onto: np.ndarray | None = None
) -> np.ndarray:
    """An RGB frame of size (height, width, 3) with the 4x4 dot at `pos` (scaled to the frame),
    on black or painted `onto` a frame of that size."""
    frame = np.zeros((height, width, 3), np.uint8) if onto is None else onto
    sy, sx = height / HEIGHT, width / WIDTH
    y0, x0 = int(pos[1] * sy), int(pos[0] * sx)
    frame[y0 : y0 + max(1, round(DOT * sy)), x0 : x0 + max(1, round(DOT * sx))] = 255
    return frame


GOAL = (40, 200, 40)


def mark_goal(img: np.ndarray) -> np.ndarray:
    """The goal, a green cross where the dot's centre should end, drawn under the dot."""
    h, w = img.shape[:2]
    sx, sy = w / WIDTH, h / HEIGHT
    cx = round((CENTRE[0] + DOT / 2) * sx)
    cy = round((CENTRE[1] + DOT / 2) * sy)
    arm, out = max(3, round(8 * sx)), img.copy()
    dot = out.max(-1) == 255  # the dot stays on top
    out[cy, max(0, cx - arm) : cx + arm + 1] = GOAL
    out[max(0, cy - arm) : cy + arm + 1, cx] = GOAL
    out[dot] = 255
    return out


def move(pos: np.ndarray, action) -> tuple[np.ndarray, np.ndarray]:
    """The dot's positions after `action` (positions (..., 2) and actions broadcast) and the
    reward: +1 when the move brings the dot nearer the centre, -1 farther, 0 otherwise."""
    new = np.clip(pos + MOVES[action], 0, [WIDTH - DOT, HEIGHT - DOT])
    nearer = np.linalg.norm(pos - CENTRE, axis=-1) - np.linalg.norm(new - CENTRE, axis=-1)
    return new, np.sign(nearer)


class MovingDot(gym.Env):
    """The dot's world; `obs` chooses what the agent sees: "rgb", "position" or "gray84"."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, obs: str = "rgb", max_steps: int = 1000, render_mode: str | None = None):
        self.obs_kind, self.max_steps, self.render_mode = obs, max_steps, render_mode
        self.action_space = gym.spaces.Discrete(5)
        if obs == "rgb":
            self.observation_space = gym.spaces.Box(0, 255, (HEIGHT, WIDTH, 3), np.uint8)
        elif obs == "gray84":
            self.observation_space = gym.spaces.Box(0, 255, (1, 84, 84), np.uint8)
        elif obs == "position":
            self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        else:
            raise ValueError(f"obs must be rgb, position or gray84, got {obs!r}")
        self.pos = np.zeros(2, np.int64)
        self.t = 0

    def _obs(self):
        if self.obs_kind == "position":
            return (self.pos / [WIDTH, HEIGHT]).astype(np.float32)
        if self.obs_kind == "gray84":
            return draw(self.pos, 84, 84)[None, :, :, 0]
        return draw(self.pos)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = np.array(
            [
                self.np_random.integers(0, WIDTH - DOT + 1),
                self.np_random.integers(0, HEIGHT - DOT + 1),
            ]
        )
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.pos, reward = move(self.pos, int(action))
        self.t += 1
        return self._obs(), float(reward), False, self.t >= self.max_steps, {}

    def render(self):
        """The frame a person sees: the dot, and the goal (a green cross at the centre) under
        it, which the observations do not show. The goal is drawn once: a person's run renders
        every step (~20 us a frame instead of 1.4 ms; the same pixels as mark_goal(draw(pos)))."""
        return draw(self.pos, onto=_goal_background().copy())


@functools.cache
def _goal_background() -> np.ndarray:
    frame = mark_goal(np.zeros((HEIGHT, WIDTH, 3), np.uint8))
    frame.flags.writeable = False
    return frame


# the time limit is the env's own (it truncates itself at `max_steps`), stated for whoever reads
# the spec (a preference run's fixed horizon, `envs.episode_limit`)
for _id, _obs in (
    ("MovingDot-v0", "rgb"),
    ("MovingDotLowDim-v0", "position"),
    ("MovingDot84-v0", "gray84"),
):
    gym.register(_id, entry_point=MovingDot, kwargs={"obs": _obs}, max_episode_steps=1000)
