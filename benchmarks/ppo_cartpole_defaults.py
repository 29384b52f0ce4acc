"""Which PPO settings solve CartPole-v1 soonest in wall-clock time, on every seed?

The study behind backflip's CartPole preset (docs/algorithms.md, "PPO"). Each variant runs the
full 1e5-step budget (so the learning rate anneals as in the preset) on seeds 0..N-1 with the
time-to-solve protocol of benchmarks/ppo_cartpole.py: a greedy evaluation of 10 episodes every
4,096 steps. Per variant it prints, over seeds:

- the step and the wall-clock seconds of the first evaluation >= 475 (median and worst seed);
- how many seeds end the budget with a greedy return >= 475 (the learning test's criterion);
- training steps/s.

Runs go to a pool of `--workers` processes with one torch thread each, so the seconds carry the
noise of a shared machine; they rank variants, and benchmarks/ppo_cartpole.py, one run at a time,
gives the figures to quote. Usage:

    python benchmarks/ppo_cartpole_defaults.py [--seeds 20] [--workers 2] [--only zoo,ep10]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time

import numpy as np

THRESHOLD, EVAL_EVERY, EVAL_EPISODES, BUDGET = 475.0, 4096, 10, 100_000

# Overrides of PPO's Config defaults (which are rl-zoo's CartPole-v1 entry: 8 envs x 32 steps,
# minibatch 256, 20 epochs, lr 1e-3, clip 0.2, both annealed, gamma 0.98, lambda 0.8).
VARIANTS: dict[str, dict] = {
    "zoo": {},
    "ep10": {"epochs": 10},
    "ep10 lr2e-3": {"epochs": 10, "lr": 2e-3},
    "ep10 lr3e-3": {"epochs": 10, "lr": 3e-3},
    "ep5 lr3e-3": {"epochs": 5, "lr": 3e-3},
    "8x16 mb128 ep10 lr2e-3": {"num_steps": 16, "minibatch_size": 128, "epochs": 10, "lr": 2e-3},
    "8x16 mb128 ep20": {"num_steps": 16, "minibatch_size": 128},
    "16x16 ep10 lr2e-3": {"num_envs": 16, "num_steps": 16, "epochs": 10, "lr": 2e-3},
    "mb128 ep10": {"minibatch_size": 128, "epochs": 10},
    "ep10 lr4e-3": {"epochs": 10, "lr": 4e-3},
    "ep8 lr4e-3": {"epochs": 8, "lr": 4e-3},
    "ep6 lr5e-3": {"epochs": 6, "lr": 5e-3},
    "mb128 ep10 lr3e-3": {"minibatch_size": 128, "epochs": 10, "lr": 3e-3},
}


def run_one(task: tuple[str, dict, int]) -> dict:
    name, sets, seed = task
    import torch

    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.seedrun import SeedRun
    from backflip.telemetry import read_metrics

    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # imports torch._dynamo, untimed
    values = {k: str(v) for k, v in {**sets, "eval_every": EVAL_EVERY}.items()}
    values["eval_episodes"] = str(EVAL_EPISODES)
    cfg = resolve("ppo", "CartPole-v1", [seed], BUDGET, set_values=values)
    with tempfile.TemporaryDirectory() as tmp:
        run = SeedRun(cfg, seed, tmp)
        t0 = time.perf_counter()
        get_algo("ppo").train(cfg.hp, run)
        wall = time.perf_counter() - t0
        run.close()
        m = read_metrics(os.path.join(tmp, "metrics.csv"))
    steps, rets = m["eval/return_mean"]
    wall_steps, walls = m["time/wall_s"]
    hit = np.flatnonzero(rets >= THRESHOLD)
    solved_step = int(steps[hit[0]]) if len(hit) else None
    solved_s = float(walls[wall_steps == solved_step][0]) if solved_step else None
    return {
        "variant": name,
        "seed": seed,
        "solved_step": solved_step,
        "solved_s": solved_s,
        "final": float(rets[-1]),
        "sps": run.result["steps"] / (wall - run.eval_time),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", help="comma-separated variant names (default: all)")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(VARIANTS)
    tasks = [
        (n, VARIANTS[n], s)
        for n in names
        for s in range(args.first_seed, args.first_seed + args.seeds)
    ]
    print(
        f"# PPO CartPole-v1 settings study — {time.strftime('%Y-%m-%d %H:%M')}, seeds "
        f"{args.first_seed}-{args.first_seed + args.seeds - 1}, {args.workers} workers, load average {os.getloadavg()[0]:.2f}"
    )
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(run_one, tasks, chunksize=1)
    print(
        "| variant | steps to 475: median, worst | seconds to 475: median, worst | "
        "final ≥ 475 | steps/s |"
    )
    print("|---|---|---|---|---|")
    for n in names:
        rs = [r for r in results if r["variant"] == n]
        st = [r["solved_step"] or np.inf for r in rs]
        ss = [r["solved_s"] or np.inf for r in rs]
        ok = sum(r["final"] >= THRESHOLD for r in rs)
        worst_final = min(r["final"] for r in rs)
        print(
            f"| {n} | {np.median(st):,.0f}, {max(st):,.0f} | {np.median(ss):.2f}, {max(ss):.2f} "
            f"| {ok} of {len(rs)} (min {worst_final:.1f}) | "
            f"{np.mean([r['sps'] for r in rs]):,.0f} |"
        )
    print("\nper seed (steps to 475):")
    for n in names:
        rs = sorted((r for r in results if r["variant"] == n), key=lambda r: r["seed"])
        print(f"  {n}: " + " ".join(str(r["solved_step"] or "never") for r in rs))


if __name__ == "__main__":
    main()
