"""How much do parallel seeds save, and what does the Ray backend cost?

    python benchmarks/parallel_seeds.py [--seeds 8] [--steps 100000] [--no-ray]

Runs the same job — N seeds of PPO on CartPole-v1 — three ways, each into a fresh temporary
archive, and prints wall-clock times:

1. one worker: the seeds one after another;
2. two workers: the local process pool (the default backend);
3. two workers on Ray: a local Ray cluster started by the script (its startup timed apart),
   then the same job as Ray tasks.

Target (docs/benchmarks.md): 2 workers take <= 0.6x the time of 1 worker. The load average is
printed before and after: on a shared machine the figures are only as good as the quiet.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def timed_job(seeds: int, steps: int, workers: int, backend: str = "local") -> float:
    from backflip.config import resolve
    from backflip.launch import launch_run

    cfg = resolve("ppo", "CartPole-v1", list(range(seeds)), steps)
    with tempfile.TemporaryDirectory() as home:
        t0 = time.perf_counter()
        record = launch_run(
            cfg, Path(home), ["bench"], workers=workers, progress=False, backend=backend
        )
        wall = time.perf_counter() - t0
        assert record["status"] == "finished", record["status"]
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--no-ray", action="store_true")
    args = p.parse_args()
    print(
        f"{args.seeds} seeds of PPO on CartPole-v1, {args.steps:,} steps each; "
        f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()}"
    )
    one = timed_job(args.seeds, args.steps, workers=1)
    print(f"1 worker  (one after another): {one:7.1f} s", flush=True)
    two = timed_job(args.seeds, args.steps, workers=2)
    print(
        f"2 workers (local pool):        {two:7.1f} s   ratio {two / one:.2f} (target <= 0.60)",
        flush=True,
    )
    if not args.no_ray:
        import ray

        t0 = time.perf_counter()
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        )
        startup = time.perf_counter() - t0
        try:
            on_ray = timed_job(args.seeds, args.steps, workers=2, backend="ray")
        finally:
            ray.shutdown()
        print(
            f"2 workers (Ray tasks):         {on_ray:7.1f} s   overhead vs local pool "
            f"{on_ray - two:+.1f} s ({100 * (on_ray / two - 1):+.0f}%), plus "
            f"{startup:.1f} s to start a local cluster"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
