"""What does logging everything cost? PPO on CartPole-v1 with telemetry on vs off.

"On" computes and writes every diagnostic (docs/metrics.md) to metrics.csv and TensorBoard;
"off" (`--set telemetry=false`) skips the diagnostics and writes only steps/s and episodes.
Runs alternate on/off in fresh processes, one seed per pair; reports wall and CPU seconds (mean,
median, fastest), the seconds each mode spent in rollouts and updates, the overhead with a
t-interval on the mean per-pair difference (run-to-run noise: ~±5% on a quiet machine, ~±15% on
a busy host), the median per-pair difference with a distribution-free interval (a slow spell of
the host that hits one run moves the mean, not the median), and the direct cost the on-runs
timed themselves (`time/diagnostics_s` + `time/log_s`), which that noise does not blur.

`--instructions` counts instead: each mode runs under valgrind (cachegrind, no cache simulation,
~60x slower), once for `--steps` and once for one 256-step iteration, and the difference is the
training loop's instruction count. It is the same on every run (it does not see other processes
on the machine), so it measures the work logging adds when wall time is too noisy to; it does
not see what that work costs in cache misses.

    python benchmarks/telemetry_overhead.py [--pairs 10] [--steps 100000] [--instructions]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
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
    from backflip.telemetry import read_metrics

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
        # the run's own account of its logging (docs/metrics.md): zero with telemetry off
        metrics = read_metrics(os.path.join(tmp, "metrics.csv"))
        timed = {k: float(metrics[k][1].sum()) if k in metrics else 0.0 for k in TIMED + PHASES}
    return {"wall_s": wall, "cpu_s": cpu, "metric_values": rows, **timed}


TIMED = ("time/diagnostics_s", "time/log_s")  # what the run itself timed of its logging
PHASES = ("time/rollout_s", "time/update_s")  # where a slow run lost its time


VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def instructions(mode: str, steps: int) -> int:
    """Instructions executed by one `--one` run under valgrind (deterministic for a seed)."""
    out = subprocess.run(
        [*VALGRIND, sys.executable, __file__, "--one", mode, "--steps", str(steps)],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0"),
    )
    return int(re.search(r"I\s+refs:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))


def count_instructions(steps: int) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    print(
        f"# telemetry overhead in instructions, PPO CartPole-v1, {steps:,} steps, seed 0 — "
        f"{time.strftime('%Y-%m-%d %H:%M')} (valgrind: several minutes)"
    )
    loop = {}
    for mode in ("off", "on"):
        full, first = instructions(mode, steps), instructions(mode, 256)
        loop[mode] = full - first
        print(
            f"telemetry {mode}: {full:,} instructions, {first:,} for one iteration, "
            f"{loop[mode]:,} in the loop after it",
            flush=True,
        )
    print(f"overhead (instructions in the loop): {100 * (loop['on'] / loop['off'] - 1):+.2f}%")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--instructions", action="store_true", help="count instructions (valgrind)")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one == "on", args.seed, args.steps)))
        return
    if args.instructions:
        count_instructions(args.steps)
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
    print(
        "| mode | wall s: mean (per run) | median | fastest | CPU s | rollout s | update s "
        "| metric values written |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mode in ("off", "on"):
        w = [r["wall_s"] for r in res[mode]]
        c = [r["cpu_s"] for r in res[mode]]
        print(
            f"| telemetry {mode} | {np.mean(w):.2f} ({', '.join(f'{x:.1f}' for x in w)}) | "
            f"{np.median(w):.2f} | {min(w):.2f} | {np.mean(c):.2f} | "
            + " | ".join(phase_s([r[k] for r in res[mode]]) for k in PHASES)
            + f" | {res[mode][0]['metric_values']:,} |"
        )
    on = res["on"]
    direct = [sum(r[k] for k in TIMED) for r in on]
    share = np.mean([d / r["wall_s"] for d, r in zip(direct, on, strict=True)])
    print(
        f"direct cost, timed inside the on-runs: {np.mean(direct):.2f} s per run = "
        f"{100 * share:.1f}% of their wall time ("
        + ", ".join(f"{k} {np.mean([r[k] for r in on]):.2f} s" for k in TIMED)
        + ")"
    )
    for key in ("wall_s", "cpu_s"):
        on, off = (np.array([r[key] for r in res[m]]) for m in ("on", "off"))
        # runs of one pair share a seed, so the pair differences carry less noise than the runs
        d = on - off
        half = (
            stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
            if len(d) > 1
            else np.nan
        )
        print(
            f"overhead ({key[:-2]}): {100 * (on.mean() / off.mean() - 1):+.1f}% "
            f"(per pair {d.mean():+.2f} s, 95% CI {d.mean() - half:+.2f} to {d.mean() + half:+.2f} s)"
        )
    # A slow spell of the host hits single runs by +20-50% and drags the mean with it; the
    # median pair difference ignores such spells, and its interval assumes nothing about their
    # shape (order statistics of the differences, the sign test's confidence interval).
    on, off = (np.array([r["wall_s"] for r in res[m]]) for m in ("on", "off"))
    d = np.sort(on - off)
    lo, hi = median_ci(d)
    print(
        f"overhead (wall, median pair): {100 * np.median(d) / np.median(off):+.1f}% "
        f"(per pair {np.median(d):+.2f} s, 95% CI {lo:+.2f} to {hi:+.2f} s = "
        f"{100 * lo / np.median(off):+.1f}% to {100 * hi / np.median(off):+.1f}%); "
        f"fastest runs: {100 * (on.min() / off.min() - 1):+.1f}%"
    )


def phase_s(seconds: list[float]) -> str:
    """Mean seconds in a phase; "–" with telemetry off, which does not time its phases."""
    return f"{np.mean(seconds):.2f}" if any(seconds) else "–"


def median_ci(d: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval on the median of sorted d: the order statistics k, n-1-k
    with the largest k such that P(Binomial(n, 1/2) < k+1) <= (1-level)/2; NaN when even the
    extremes do not reach `level` (95%: fewer than 6 pairs)."""
    n = len(d)
    if stats.binom.cdf(0, n, 0.5) > (1 - level) / 2:
        return math.nan, math.nan
    k = int(stats.binom.ppf((1 - level) / 2, n, 0.5))
    k = max(k - 1, 0) if stats.binom.cdf(k, n, 0.5) > (1 - level) / 2 else k
    return float(d[k]), float(d[n - 1 - k])


if __name__ == "__main__":
    main()
