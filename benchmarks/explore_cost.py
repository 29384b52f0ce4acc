"""What exploring before the first labels costs per agent step: `NoveltyBonus` on a full memory
(2,048 recent observations), one torch thread, for the observation kinds a preference run meets.

Each case calls the bonus on `--envs` env copies at a time (one vector step), as the pipeline does
while `prefs.explore_steps` run, and prints microseconds per agent step (median of `--repeats`
calls after the memory is full), beside what the distances alone cost. Compare it with the
policy's own step: PPO on a low-dimensional env takes ~250-450 us per agent step on this kind of
CPU, an Atari preset ~3-6 ms (docs/benchmarks.md).

    python benchmarks/explore_cost.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch

from backflip.prefs.explore import MEMORY, NoveltyBonus

# name: (observation shape, dtype, env copies, image)
CASES = {
    "CliffWalking (48 one-hot)": ((48,), np.float32, 8, False),
    "HalfCheetah (17 floats)": ((17,), np.float32, 1, False),
    "Humanoid (348 floats)": ((348,), np.float32, 1, False),
    "MovingDot84 (84x84x1 uint8)": ((84, 84, 1), np.uint8, 8, True),
    "Atari (4x84x84 uint8)": ((4, 84, 84), np.uint8, 8, True),
}


def per_step_us(bonus: NoveltyBonus, batches: list[np.ndarray], n_envs: int) -> float:
    times = []
    for obs in batches:
        t0 = time.perf_counter()
        bonus(obs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / n_envs * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2000)
    args = p.parse_args()
    torch.set_num_threads(1)  # a seed's
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'observations':30s} {'envs':>4s} {'us per agent step':>18s}")
    rng = np.random.default_rng(0)
    for name, (shape, dtype, n_envs, image) in CASES.items():
        draw = lambda shape=shape, dtype=dtype, n=n_envs: (  # noqa: E731
            rng.integers(0, 256, (n, *shape), dtype=np.uint8)
            if dtype == np.uint8
            else rng.normal(size=(n, *shape)).astype(dtype)
        )
        bonus = NoveltyBonus(lambda o: o, image=image)
        for _ in range(MEMORY // n_envs + 1):  # fill the memory: the steady state
            bonus(draw())
        batches = [draw() for _ in range(args.repeats)]
        print(f"{name:30s} {n_envs:4d} {per_step_us(bonus, batches, n_envs):18.1f}", flush=True)


if __name__ == "__main__":
    main()
