"""backflip DQN, TD3 and SAC vs Stable-Baselines3: DQN on CartPole-v1, TD3 and SAC on Pendulum-v1.

Same machine, same invocation, seeds interleaved. Two comparisons per algorithm (issue #3):

1. Identical hyperparameters (rl-zoo's, `benchmarks/offpolicy.py`), full rl-zoo budget:
   training steps/s (evaluation time excluded), final greedy return, and the FLOP rate of the
   updates — FLOPs per gradient step counted by `torch.utils.flop_counter` (matmuls, forward
   and backward) times gradient steps, divided by the seconds spent in updates.
2. Time to solve: SB3 with rl-zoo's settings vs backflip with its defaults: wall-clock seconds
   (evaluation included) until a greedy evaluation (10 episodes every 1,000 steps, the same
   protocol and env seeds for both) reaches the threshold (CartPole 475, Pendulum −200), per
   seed. SB3's times come from the runs of comparison 1, which evaluate on the same schedule.

Each run is its own process with one torch thread; `--workers 2` runs an SB3 run and a backflip
run side by side (both see the same load). Both build a throwaway optimizer before their clocks
start: the first one imports torch._dynamo (1-2 s), which SB3 pays in its constructor, outside
its timing, and `backflip train` once in its forkserver, not per seed. Each run's result is
written to a fresh directory (printed at the start); `--results DIR` reuses the results already
in DIR, to resume an interrupted benchmark of the *same* code — results there are never
invalidated, so a benchmark of changed code needs a fresh directory. Usage:

    pip install -e '.[bench]' && python benchmarks/offpolicy_vs_sb3.py [--algos dqn,td3,sac] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from offpolicy import (
    DQN_ZOO,
    DQN_ZOO_SB3,
    SAC_ZOO,
    SAC_ZOO_SB3,
    TD3_ZOO,
    TD3_ZOO_SB3,
    cached_run,
    count_flops,
    sb3_greedy_evaluator,
    train_seed,
)

EVAL_EVERY = 1000
TASKS = {
    # algo: (env, threshold, rl-zoo budget, SB3 kwargs, the same in backflip's names)
    "dqn": ("CartPole-v1", 475.0, 50_000, DQN_ZOO_SB3, DQN_ZOO),
    "td3": ("Pendulum-v1", -200.0, 20_000, TD3_ZOO_SB3, TD3_ZOO),
    "sac": ("Pendulum-v1", -200.0, 20_000, SAC_ZOO_SB3, SAC_ZOO),
}


# --- one run per process ----------------------------------------------------------------------


def run_sb3(algo: str, seed: int) -> dict:
    import torch
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    env_id, threshold, budget, params, _ = TASKS[algo]
    evaluate = sb3_greedy_evaluator(env_id, seed)
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    kwargs = dict(params)
    if algo == "td3":  # rl-zoo: noise_type normal, noise_std 0.1
        n = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))
    model = {"dqn": DQN, "td3": TD3, "sac": SAC}[algo](
        "MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs
    )
    timing = {"update_s": 0.0, "updates": 0, "eval_s": 0.0}
    train = model.train

    def timed_train(gradient_steps, batch_size=100):
        t = time.perf_counter()
        train(gradient_steps=gradient_steps, batch_size=batch_size)
        timing["update_s"] += time.perf_counter() - t
        timing["updates"] += gradient_steps

    model.train = timed_train
    evals, t0 = [], time.perf_counter()

    class Evaluate(BaseCallback):
        def _on_step(self):
            if self.num_timesteps % EVAL_EVERY == 0:
                t = time.perf_counter()
                ret = evaluate(self.model)
                timing["eval_s"] += time.perf_counter() - t
                evals.append((self.num_timesteps, ret, time.perf_counter() - t0))
            return True

    model.learn(total_timesteps=budget, callback=Evaluate())
    wall = time.perf_counter() - t0
    final = evaluate(model)
    model.train = train
    flops = count_flops(lambda: train(gradient_steps=10, batch_size=model.batch_size)) / 10
    return summarize(budget, wall, timing, evals, final, flops, threshold)


def run_backflip(algo: str, seed: int, mode: str) -> dict:
    import torch

    from backflip.config import resolve

    torch.set_num_threads(1)
    env_id, threshold, budget, _, zoo = TASKS[algo]
    sets = {"eval_every": EVAL_EVERY, "log_every": EVAL_EVERY}
    if mode == "zoo":
        sets.update(zoo)
    else:  # backflip's defaults, stopping at the threshold
        sets["target_return"] = threshold
        budget = None
    cfg = resolve(algo, env_id, [seed], budget, set_values={k: str(v) for k, v in sets.items()})
    run, evals, wall, metrics = train_seed(algo, cfg, seed)
    _, update_s = metrics.get("time/update_s", ([], [0.0]))
    _, updates = metrics["train/updates"]
    timing = {
        "update_s": float(np.sum(update_s)),
        "updates": int(updates[-1]),
        "eval_s": run.eval_time,
    }
    final = run.result["eval_return"]
    out = summarize(run.result["steps"], wall, timing, evals, final, backflip_flops(cfg), threshold)
    if mode == "defaults":
        out["solved_s"] = run.result.get("solved_s")
        out["solved_step"] = run.result.get("solved_step")
    return out


def backflip_flops(cfg) -> float:
    """FLOPs per gradient step: count two short runs and divide the difference in FLOPs by the
    difference in gradient steps (so env steps, acting and evaluation cancel out)."""
    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.seedrun import SeedRun

    hp = cfg.hp
    start = hp.train_every * 2
    counts = []
    for phases in (2, 12):
        sets = {"eval_episodes": "1", "log_every": str(10**9)}
        steps = start + phases * hp.train_every
        short = resolve(cfg.algo, cfg.env_id, [0], steps, set_values=sets)
        short.hp = type(hp)(**{**hp.__dict__, "learning_starts": start})
        run = SeedRun(short, 0)
        flops = count_flops(lambda run=run, short=short: get_algo(cfg.algo).train(short.hp, run))
        counts.append((flops, (phases + 1) * hp.gradient_steps))
        run.close()
    (f1, u1), (f2, u2) = counts
    return (f2 - f1) / (u2 - u1)


def summarize(steps, wall, timing, evals, final, flops, threshold) -> dict:
    train_s = wall - timing["eval_s"]
    solved = next(((s, t) for s, r, t in evals if r >= threshold), (None, None))
    return {
        "steps": int(steps),
        "wall_s": wall,
        "train_s": train_s,
        "sps": steps / train_s,
        "final_return": float(final),
        "updates": timing["updates"],
        "update_s": timing["update_s"],
        "flops_per_update": float(flops),
        "gflops": flops * timing["updates"] / timing["update_s"] / 1e9
        if timing["update_s"]
        else 0.0,
        "first_solved_step": solved[0],
        "first_solved_s": solved[1],
        "evals": evals,
    }


# --- the comparison ---------------------------------------------------------------------------


def one(results: Path, algo: str, lib: str, mode: str, seed: int) -> dict:
    """One run in a fresh process (cached in `results`)."""
    path = results / f"{algo}-{lib}-{mode}-{seed}.json"
    return cached_run(path, __file__, f"{algo},{lib},{mode},{seed}")


def fmt(x, digits=0):
    return "never" if x is None else f"{x:,.{digits}f}"


def report(algo: str, runs: dict, seeds: list[int]) -> None:
    env_id, threshold, budget, _, _ = TASKS[algo]
    sb3, bf, bfd = (runs[algo][k] for k in ("sb3", "zoo", "defaults"))
    print(f"\n## {algo.upper()} on {env_id}")
    print(f"\n### 1. Identical hyperparameters (rl-zoo), {budget:,} steps")
    print(
        "| seed | SB3 steps/s | backflip steps/s | ratio | SB3 final return | "
        "backflip final return | SB3 GFLOP/s in updates | backflip GFLOP/s in updates |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s, a, b in zip(seeds, sb3, bf, strict=True):
        print(
            f"| {s} | {fmt(a['sps'])} | {fmt(b['sps'])} | {b['sps'] / a['sps']:.2f}× | "
            f"{a['final_return']:.1f} | {b['final_return']:.1f} | {a['gflops']:.1f} | "
            f"{b['gflops']:.1f} |"
        )
    ma, mb = (np.mean([r["sps"] for r in x]) for x in (sb3, bf))
    print(
        f"| mean | {fmt(ma)} | {fmt(mb)} | **{mb / ma:.2f}×** | "
        f"{np.mean([r['final_return'] for r in sb3]):.1f} | "
        f"{np.mean([r['final_return'] for r in bf]):.1f} | "
        f"{np.mean([r['gflops'] for r in sb3]):.1f} | {np.mean([r['gflops'] for r in bf]):.1f} |"
    )
    print(
        f"\nFLOPs per gradient step: SB3 {sb3[0]['flops_per_update'] / 1e6:.1f} M, backflip "
        f"{bf[0]['flops_per_update'] / 1e6:.1f} M; seconds per gradient step: SB3 "
        f"{np.mean([r['update_s'] / r['updates'] for r in sb3]) * 1e3:.2f} ms, backflip "
        f"{np.mean([r['update_s'] / r['updates'] for r in bf]) * 1e3:.2f} ms"
    )
    print(
        f"\n### 2. Time to solve (greedy eval ≥ {threshold:g}, 10 episodes every {EVAL_EVERY:,} "
        "steps, evaluation time included)"
    )
    print("| seed | SB3 rl-zoo: seconds (steps) | backflip defaults: seconds (steps) | ratio |")
    print("|---|---|---|---|")
    for s, a, b in zip(seeds, sb3, bfd, strict=True):
        ratio = (
            f"{b['solved_s'] / a['first_solved_s']:.2f}"
            if a["first_solved_s"] and b["solved_s"]
            else "-"
        )
        print(
            f"| {s} | {fmt(a['first_solved_s'], 1)} ({fmt(a['first_solved_step'])}) | "
            f"{fmt(b['solved_s'], 1)} ({fmt(b['solved_step'])}) | {ratio} |"
        )
    ta = [r["first_solved_s"] for r in sb3]
    tb = [r["solved_s"] for r in bfd]
    worst_a = None if None in ta else max(ta)
    worst_b = None if None in tb else max(tb)
    ratio = f"**{worst_b / worst_a:.2f}**" if worst_a and worst_b else "-"
    print(
        f"| every seed (slowest) | {fmt(worst_a, 1)} | {fmt(worst_b, 1)} | {ratio} |"
        f"\n\nsolved on {sum(t is not None for t in ta)}/{len(ta)} seeds (SB3) and "
        f"{sum(t is not None for t in tb)}/{len(tb)} (backflip defaults); SB3 final greedy "
        f"returns ≥ threshold on {sum(r['final_return'] >= threshold for r in sb3)}/{len(sb3)}"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="dqn,td3,sac")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2, help="runs at once (an SB3 and a backflip)")
    p.add_argument(
        "--results", help="resume: reuse the per-run results in this directory (default: fresh)"
    )
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        algo, lib, mode, seed = args.one.split(",")
        import torch

        # the first optimizer either library builds imports torch._dynamo (1-2 s); SB3 pays it
        # in its constructor, before its clock starts, `backflip train` once in its forkserver
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        out = run_sb3(algo, int(seed)) if lib == "sb3" else run_backflip(algo, int(seed), mode)
        print(json.dumps(out))
        return

    results = Path(args.results or tempfile.mkdtemp(prefix="offpolicy-vs-sb3-"))
    results.mkdir(parents=True, exist_ok=True)
    reused = len(list(results.glob("*.json")))
    algos, seeds = args.algos.split(","), list(range(args.seeds))
    print(f"# Off-policy: backflip vs Stable-Baselines3 — {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"# {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"load average at start {os.getloadavg()[0]:.2f}, {args.workers} run(s) at once"
    )
    print(f"# per-run results in {results}" + (f" ({reused} reused)" if reused else ""))
    runs = {a: {"sb3": [], "zoo": [], "defaults": []} for a in algos}
    # an SB3 run next to a backflip run with the same settings, then backflip's defaults
    jobs = [
        [(a, "sb3", "zoo", s), (a, "backflip", "zoo", s), (a, "backflip", "defaults", s)]
        for a in algos
        for s in seeds
    ]
    with ThreadPoolExecutor(args.workers) as pool:
        futures = [[pool.submit(one, results, *job) for job in group] for group in jobs]
        for group, fs in zip(jobs, futures, strict=True):
            for (a, lib, mode, _), f in zip(group, fs, strict=True):
                runs[a]["sb3" if lib == "sb3" else mode].append(f.result())
    for a in algos:
        report(a, runs, seeds)
    print(f"\n# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
