"""What rendering costs a person-labeled preference run: microseconds per env step of an env
stepped alone, and with its `rgb_array` frame rendered on every step (`RenderFrames`, what a
run labeled by people does so that each clip can be shown), random actions.

    python benchmarks/render_cost.py [--env MovingDotLowDim-v0] [--steps 5000]
    python benchmarks/render_cost.py --env Hopper-v5 --steps 300    # MuJoCo, software EGL here
"""

from __future__ import annotations

import argparse
import platform
import time

from backflip.envs import make_env  # as a run makes its envs (MuJoCo: EGL without a display)
from backflip.envs.wrappers import RenderFrames


def per_step(env, steps: int) -> float:
    env.reset(seed=0)
    env.action_space.seed(0)
    t = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - t) / steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="MovingDotLowDim-v0")
    ap.add_argument("--steps", type=int, default=5000)
    args = ap.parse_args()
    plain = per_step(make_env(args.env), args.steps)
    rendered = per_step(RenderFrames(make_env(args.env, render_mode="rgb_array")), args.steps)
    print(
        f"{args.env}, {args.steps:,} random steps, {platform.processor() or platform.machine()}: "
        f"step {plain:.1f} us, step + render {rendered:.1f} us (render {rendered - plain:.1f} us)"
    )


if __name__ == "__main__":
    main()
