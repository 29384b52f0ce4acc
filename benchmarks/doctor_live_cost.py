"""Cost of the live doctor: one check of every live rule on a run's rows so far.

    python benchmarks/doctor_live_cost.py [--steps 100000]

Trains PPO on CartPole-v1 in-process (default budget, 391 metric rows), replays its rows into a
`LiveDoctor`, then times `check()` on all of them. The monitor checks at most once per 2 s, so
the cost per check bounds the overhead at (cost / 2 s) of a seed's time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.doctor.live import LiveDoctor
from backflip.seedrun import SeedRun


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    args = p.parse_args()
    cfg = resolve("ppo", "CartPole-v1", [0], args.steps, set_values={"doctor.live": "false"})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = SeedRun(cfg, 0, tmp, on_row=lambda step, row: rows.append((step, dict(row))))
        get_algo("ppo").train(cfg.hp, run)
        run.close()
    doctor = LiveDoctor(cfg, every_s=1e9)
    for step, row in rows:
        doctor(step, row)
    t0 = time.perf_counter()
    for _ in range(20):
        doctor.check()
    ms = (time.perf_counter() - t0) / 20 * 1000
    print(
        f"load average {os.getloadavg()[0]:.1f}; {len(rows)} rows; one live check: {ms:.1f} ms; "
        f"overhead at one check per 2 s: {ms / 2000:.1%}"
    )


if __name__ == "__main__":
    main()
