"""Videos of greedy episodes (Achiam: watch your agent; the curves don't show what it does).

During training, `--set video_every=N` makes `SeedRun.evaluate` record one greedy episode every N
env steps (and at the end) to `seeds/<seed>/videos/step_<n>.mp4`, on a separate env copy made with
`render_mode="rgb_array"` and seeded like the evaluation copies. `backflip watch ID` does the same
from a checkpoint (`backflip/experiments/watch.py`).

MP4 (H.264, yuv420p) is written with imageio-ffmpeg, which ships its own ffmpeg binary
(`pip install 'backflip[video]'`); rendering classic-control envs needs pygame (same extra).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from backflip.envs import make_env, steps_per_second
from backflip.errors import UserError

MAX_FRAMES = 2000  # one episode is cut here (about a minute at 30 fps)
# what a person is shown plays at the env's real speed and at most this many frames a second:
# a faster env (Hopper's 125 steps a second) is rendered every k-th step. A browser or a video
# player shows at most the screen's 60 a second anyway, and each frame rendered costs (software
# EGL: 50 ms a MuJoCo frame, docs/benchmarks.md)
PLAYBACK_FPS = 30


def playback(steps_per_s: float, stride: int = 0) -> tuple[int, float]:
    """(stride, frames per second): the steps of which a frame is shown (every `stride`-th; 0
    picks the smallest that keeps to `PLAYBACK_FPS`) and the rate that plays them at the env's
    real speed (`envs.steps_per_second`)."""
    stride = stride or max(1, math.ceil(steps_per_s / PLAYBACK_FPS - 1e-9))
    return stride, steps_per_s / stride


def _require_ffmpeg():
    try:
        import imageio_ffmpeg  # the `video` extra
    except ImportError:
        raise UserError("videos need imageio-ffmpeg: pip install 'backflip[video]'") from None
    return imageio_ffmpeg


def make_render_env(env_id: str, opts=None):
    """One env copy that renders frames, with the run's `env.*` wrappers."""
    # pygame (classic-control rendering) must not look for a display or a sound card
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        return make_env(env_id, opts, render_mode="rgb_array")
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 — pygame missing, or the env can't render: say which
        raise UserError(f"cannot render {env_id}: {type(e).__name__}: {e}") from None


def render(env) -> np.ndarray | None:
    """The env's frame; its own `render()` failing is a UserError naming it (the user's code)."""
    try:
        return env.render()
    except Exception as e:  # noqa: BLE001 — the env's code, not ours: one line, not a traceback
        name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        raise UserError(f"{name}'s render() failed: {type(e).__name__}: {e}") from None


def record_episode(
    act: Callable[[np.ndarray], np.ndarray],
    env,
    seed: int,
    max_frames: int = MAX_FRAMES,
    stride: int = 1,
) -> tuple[list[np.ndarray], float, int]:
    """Play one greedy episode; returns (frames, return, length). `act` takes a batch of obs;
    a frame is rendered every `stride`-th step (and the last one, the end)."""
    obs, _ = env.reset(seed=seed)
    frames = [render(env)]
    ret, length = 0.0, 0
    while length < max_frames * stride:
        action = act(obs[None])[0]
        obs, r, term, trunc, _ = env.step(action)
        ret += float(r)
        length += 1
        end = term or trunc
        if length % stride == 0 or end:
            frames.append(render(env))
        if end:
            break
    return [f for f in frames if f is not None], ret, length


def write_mp4(frames: list[np.ndarray], path: Path, fps: float = 30) -> Path:
    """Encode RGB frames (H, W, 3 uint8) as H.264 MP4, atomically (temp file, then rename)."""
    ffmpeg = _require_ffmpeg()
    if not frames:
        raise UserError("no frames to write: the environment rendered nothing")
    h, w = frames[0].shape[:2]
    # yuv420p needs even sizes; pad by one row/column of edge pixels when odd
    ph, pw = h + h % 2, w + w % 2
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.mp4")
    writer = ffmpeg.write_frames(
        str(tmp), (pw, ph), fps=fps, codec="libx264", macro_block_size=1, quality=6
    )
    writer.send(None)
    for f in frames:
        f = np.asarray(f, dtype=np.uint8)[..., :3]
        if (ph, pw) != f.shape[:2]:
            f = np.pad(f, ((0, ph - h), (0, pw - w), (0, 0)), mode="edge")
        writer.send(np.ascontiguousarray(f))
    writer.close()
    tmp.replace(path)
    return path


def record_video(
    act: Callable[[np.ndarray], np.ndarray],
    env,
    path: Path,
    seed: int,
    max_frames: int = MAX_FRAMES,
) -> dict:
    """One greedy episode to `path`, at the env's real speed: {'path', 'return', 'length',
    'seconds'}."""
    t0 = time.perf_counter()
    stride, fps = playback(steps_per_second(env))
    frames, ret, length = record_episode(act, env, seed, max_frames, stride)
    write_mp4(frames, path, max(fps, 1.0))
    return {"path": str(path), "return": ret, "length": length, "seconds": time.perf_counter() - t0}
