"""Pictures of observations, for the human labeling page.

Segments store observations, not rendered frames (rendering every training step would cost more
than the step). The page draws a frame from each stored observation instead:

- image observations are shown as they are (grayscale channel-first frames turned to RGB);
- MovingDot's position, CartPole's cart and pole, Pendulum's rod are drawn from their state;
  every MovingDot frame (drawn or observed) marks the goal, the centre, with a green cross;
- anything else becomes a bar chart of the observation vector (clipped to ±3).

`png(frames)` encodes a clip as one PNG sprite sheet (frames stacked top to bottom), which the
page's script plays in a loop on a canvas: a looping video without a codec dependency.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from backflip.envs import moving_dot

SIZE = (160, 160)  # height, width of drawn frames


def _blank() -> np.ndarray:
    return np.full((*SIZE, 3), 255, np.uint8)


def _line(img, x0, y0, x1, y1, color, width=3):
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    for t in np.linspace(0, 1, n):
        x, y = round(x0 + t * (x1 - x0)), round(y0 + t * (y1 - y0))
        img[
            max(0, y - width // 2) : y + width // 2 + 1, max(0, x - width // 2) : x + width // 2 + 1
        ] = color


def cartpole(obs) -> np.ndarray:
    img = _blank()
    h, w = SIZE
    x, theta = float(obs[0]), float(obs[2])
    img[int(h * 0.75), :] = 0  # track
    cx = int(w / 2 + np.clip(x / 2.4, -1.2, 1.2) * w * 0.4)
    cy = int(h * 0.75)
    img[cy - 6 : cy + 6, max(0, cx - 12) : cx + 12] = (40, 40, 40)
    length = h * 0.5
    _line(
        img,
        cx,
        cy - 6,
        cx + length * np.sin(theta),
        cy - 6 - length * np.cos(theta),
        (200, 120, 40),
    )
    return img


def pendulum(obs) -> np.ndarray:
    img = _blank()
    h, w = SIZE
    cos, sin = float(obs[0]), float(obs[1])
    r = h * 0.4
    _line(img, w / 2, h / 2, w / 2 + r * sin, h / 2 - r * cos, (200, 60, 60), width=5)
    return img


def bars(obs) -> np.ndarray:
    img = _blank()
    h, w = SIZE
    v = np.clip(np.asarray(obs, np.float64).ravel(), -3, 3)
    n = max(1, len(v))
    bw = max(1, w // n)
    for i, x in enumerate(v):
        top, bottom = sorted((h / 2, h / 2 - x / 3 * h * 0.45))
        img[int(top) : int(bottom) + 1, i * bw : (i + 1) * bw - 1] = (60, 90, 200)
    img[h // 2, :] = 0
    return img


mark_goal = moving_dot.mark_goal  # MovingDot's goal, drawn under the dot


def frame_fn(env_id: str, obs_shape: tuple[int, ...]):
    """obs -> an RGB frame (H, W, 3) uint8, chosen for the env."""
    dot_env = "MovingDot" in env_id
    if len(obs_shape) == 3:
        if obs_shape[0] in (1, 3) and obs_shape[-1] not in (1, 3):  # channel first
            show = lambda o: np.repeat(np.moveaxis(o, 0, -1), 3 // o.shape[0], -1).astype(np.uint8)  # noqa: E731
        else:
            show = lambda o: np.asarray(o, np.uint8)[..., :3]  # noqa: E731
        return (lambda o: mark_goal(show(o))) if dot_env else show
    if dot_env and obs_shape == (2,):
        return lambda o: mark_goal(
            moving_dot.draw(np.asarray(o) * [moving_dot.WIDTH, moving_dot.HEIGHT])
        )
    if "CartPole" in env_id and obs_shape == (4,):
        return cartpole
    if "Pendulum" in env_id and obs_shape == (3,):
        return pendulum
    return bars


def png(frames: np.ndarray) -> bytes:
    """Frames (T, H, W, 3) uint8 as one RGB PNG, frames stacked vertically."""
    frames = np.asarray(frames, np.uint8)
    buf = io.BytesIO()
    Image.fromarray(frames.reshape(-1, frames.shape[2], 3)).save(buf, format="PNG")
    return buf.getvalue()
