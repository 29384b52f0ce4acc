"""What does logging everything cost? PPO on CartPole-v1 with telemetry on vs off.

"On" computes and writes every diagnostic (docs/metrics.md) to metrics.csv and TensorBoard;
"off" (`--set telemetry=false`) skips the diagnostics and writes only steps/s and episodes.
Runs alternate on/off in fresh processes, one seed per pair; reports wall and CPU seconds, the
overhead, and a t-interval on the mean per-pair difference (run-to-run noise here is ~±5%).

    python benchmarks/telemetry_overhead.py [--pairs 3] [--steps 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy import stats


def one(telemetry: bool, seed: int, steps: int) -> dict:
    import torch

    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.seedrun import SeedRun

    torch.set_num_threads(1)
    # the first optimizer imports torch._dynamo (1-2 s, paid once per process, and by
    # `backflip train` once in its forkserver): untimed, so it does not dilute the overhead
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    cfg = resolve(
        "ppo", "CartPole-v1", [seed], steps, set_values={"telemetry": str(telemetry).lower()}
    )
    with tempfile.TemporaryDirectory() as tmp:
        run = SeedRun(cfg, seed, tmp)
        w0, c0 = time.perf_counter(), time.process_time()
        get_algo("ppo").train(cfg.hp, run)
        run.close()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        rows = sum(1 for _ in open(os.path.join(tmp, "metrics.csv"))) - 1
    return {"wall_s": wall, "cpu_s": cpu, "metric_values": rows}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one == "on", args.seed, args.steps)))
        return
    print(
        f"# telemetry overhead, PPO CartPole-v1, {args.steps:,} steps — "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f}"
    )
    res = {"on": [], "off": []}
    for i in range(args.pairs):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    mode,
                    "--seed",
                    str(i),
                    "--steps",
                    str(args.steps),
                ],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, OMP_NUM_THREADS="1"),
            )
            res[mode].append(json.loads(out.stdout.splitlines()[-1]))
    print("| mode | wall s (per run) | CPU s (per run) | metric values written |")
    print("|---|---|---|---|")
    for mode in ("off", "on"):
        w = [r["wall_s"] for r in res[mode]]
        c = [r["cpu_s"] for r in res[mode]]
        print(
            f"| telemetry {mode} | {np.mean(w):.2f} ({', '.join(f'{x:.1f}' for x in w)}) | "
            f"{np.mean(c):.2f} | {res[mode][0]['metric_values']:,} |"
        )
    for key in ("wall_s", "cpu_s"):
        on, off = (np.array([r[key] for r in res[m]]) for m in ("on", "off"))
        # runs of one pair share a seed, so the pair differences carry less noise than the runs
        d = on - off
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0
        print(
            f"overhead ({key[:-2]}): {100 * (on.mean() / off.mean() - 1):+.1f}% "
            f"(per pair {d.mean():+.2f} s, 95% CI {d.mean() - half:+.2f} to {d.mean() + half:+.2f} s)"
        )


if __name__ == "__main__":
    main()
