"""backflip PPO vs Stable-Baselines3 PPO on CartPole-v1, same machine, same run, alternating.

Two comparisons (issue #2):
1. Implementation efficiency — identical hyperparameters (rl-zoo's), fixed budget: steps/s of
   each, their ratio, and the step at which the rolling-100 training return first reaches 475.
2. Time to solve with defaults — backflip's default config vs SB3 with rl-zoo's: wall-clock
   seconds (evaluation time included) until a greedy evaluation (10 episodes, every 4,096 steps,
   same protocol for both) reaches 475, per seed.

Each run is its own process with one torch thread. Timing starts after one-time imports in both:
the first optimizer either library builds imports torch._dynamo (1-2 s here), which SB3 pays in
its constructor, outside `learn`, and `backflip train` pays once in its forkserver, not per seed;
so each process builds a throwaway optimizer first, untimed. backflip's steps/s exclude the time
spent in its final greedy evaluation (SB3's efficiency runs evaluate nothing). With
`--baseline-code DIR` comparison 1 also runs another checkout's backflip (DIR first on the
Python path), alternating with the other two, so before and after a change see the same load.
Usage:

    pip install -e '.[bench]' && python benchmarks/ppo_cartpole.py [--seeds 3] [--steps 100000]
        [--baseline-code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

THRESHOLD = 475.0
EVAL_EVERY = 4096
EVAL_EPISODES = 10
SOLVE_BUDGET = 100_000  # rl-zoo's n_timesteps and backflip's preset: both anneal over it

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1
ZOO = dict(
    n_envs=8,
    n_steps=32,
    batch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    n_epochs=20,
    ent_coef=0.0,
    learning_rate=1e-3,
    clip_range=0.2,
)
# the same settings in backflip's names
ZOO_BACKFLIP = dict(
    num_envs=8,
    num_steps=32,
    minibatch_size=256,
    gae_lambda=0.8,
    gamma=0.98,
    epochs=20,
    ent_coef=0.0,
    lr=1e-3,
    clip=0.2,
    anneal_lr=True,
    anneal_clip=True,
)


def first_crossing(steps, returns, window=100, threshold=THRESHOLD):
    """First env step at which the mean of the last `window` episode returns reaches `threshold`."""
    returns = np.asarray(returns, float)
    for i in range(window - 1, len(returns)):
        if returns[i - window + 1 : i + 1].mean() >= threshold:
            return int(steps[i])
    return None


# --- one run per process -------------------------------------------------------------------


def run_sb3(seed: int, steps: int, solve: bool) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import (
        BaseCallback,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    episodes = []

    class Episodes(BaseCallback):
        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    episodes.append((self.num_timesteps, info["episode"]["r"]))
            return True

    env = make_vec_env("CartPole-v1", n_envs=ZOO["n_envs"], seed=seed)
    params = {k: v for k, v in ZOO.items() if k != "n_envs"}
    lr0, clip0 = params.pop("learning_rate"), params.pop("clip_range")
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=lambda f: f * lr0,
        clip_range=lambda f: f * clip0,
        seed=seed,
        device="cpu",
        verbose=0,
        **params,
    )
    callbacks = [Episodes()]
    if solve:
        eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
        stop = StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD, verbose=0)
        callbacks.append(
            EvalCallback(
                eval_env,
                callback_on_new_best=stop,
                eval_freq=EVAL_EVERY // ZOO["n_envs"],
                n_eval_episodes=EVAL_EPISODES,
                deterministic=True,
                verbose=0,
            )
        )
    t0 = time.perf_counter()
    model.learn(total_timesteps=SOLVE_BUDGET if solve else steps, callback=callbacks)
    wall = time.perf_counter() - t0
    out = {
        "steps": model.num_timesteps,
        "wall_s": wall,
        "sps": model.num_timesteps / wall,
        "rolling100_475_step": first_crossing(*zip(*episodes, strict=True)) if episodes else None,
    }
    if solve:
        best = callbacks[1].best_mean_reward
        out["solved_s"] = wall if best >= THRESHOLD else None
        out["best_eval"] = float(best)
    return out


def run_backflip(seed: int, steps: int, solve: bool) -> dict:
    import torch

    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.seedrun import SeedRun
    from backflip.telemetry import read_episodes

    torch.set_num_threads(1)
    sets = {} if solve else dict(ZOO_BACKFLIP)
    if solve:
        sets.update(eval_every=EVAL_EVERY, eval_episodes=EVAL_EPISODES, target_return=THRESHOLD)
    cfg = resolve(
        "ppo",
        "CartPole-v1",
        [seed],
        SOLVE_BUDGET if solve else steps,
        set_values={k: str(v) for k, v in sets.items()},
    )
    with tempfile.TemporaryDirectory() as tmp:
        run = SeedRun(cfg, seed, tmp)
        t0 = time.perf_counter()
        get_algo("ppo").train(cfg.hp, run)
        wall = time.perf_counter() - t0
        run.close()
        ep_steps, ep_returns, _ = read_episodes(os.path.join(tmp, "episodes.csv"))
    out = {
        "steps": run.result["steps"],
        "wall_s": wall,
        "sps": run.result["steps"] / (wall - run.eval_time),
        "rolling100_475_step": first_crossing(ep_steps, ep_returns),
    }
    if solve:
        out["solved_s"] = run.result.get("solved_s")
        out["best_eval"] = run.result.get("eval_return")
    return out


# --- the comparison -------------------------------------------------------------------------


def one(lib: str, seed: int, steps: int, solve: bool, code: str | None = None) -> dict:
    """Run one configuration in a fresh process and return its JSON result; `code`: the
    checkout whose backflip it imports (default: this one's)."""
    cmd = [sys.executable, __file__, "--one", lib, "--seed", str(seed), "--steps", str(steps)]
    if solve:
        cmd.append("--solve")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if code:
        env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(x, unit=""):
    return "never" if x is None else f"{x:,.0f}{unit}" if x >= 100 else f"{x:.1f}{unit}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--one", choices=["sb3", "backflip"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--solve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--baseline-code",
        metavar="DIR",
        help="another checkout of backflip: comparison 1 also runs its PPO, alternating",
    )
    args = p.parse_args()
    if args.one:
        import torch

        # the first optimizer either library builds imports torch._dynamo: do it untimed
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        fn = run_sb3 if args.one == "sb3" else run_backflip
        print(json.dumps(fn(args.seed, args.steps, args.solve)))
        return

    print(
        f"# PPO on CartPole-v1: backflip vs Stable-Baselines3 — {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        f"# {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    results = {"efficiency": {"sb3": [], "backflip": []}, "solve": {"sb3": [], "backflip": []}}
    libs = ["sb3", "backflip"]
    if args.baseline_code:
        libs.append("baseline")
        results["efficiency"]["baseline"] = []
        print(f"# baseline: {os.path.abspath(args.baseline_code)}")
    for seed in range(args.seeds):
        k = seed % len(libs)
        for lib in libs[k:] + libs[:k]:  # each library first in turn
            code = args.baseline_code if lib == "baseline" else None
            lib_run = "backflip" if lib == "baseline" else lib
            results["efficiency"][lib].append(one(lib_run, seed, args.steps, False, code))
        order = ["sb3", "backflip"] if seed % 2 == 0 else ["backflip", "sb3"]
        for lib in order:
            results["solve"][lib].append(one(lib, seed, args.steps, solve=True))

    print(f"\n## 1. Identical hyperparameters (rl-zoo), {args.steps:,} steps, {args.seeds} seeds")
    print(
        "| seed | SB3 steps/s | backflip steps/s | ratio | SB3 rolling-100 ≥ 475 at | "
        "backflip rolling-100 ≥ 475 at |"
    )
    print("|---|---|---|---|---|---|")
    eff = results["efficiency"]
    for s, (a, b) in enumerate(zip(eff["sb3"], eff["backflip"], strict=True)):
        print(
            f"| {s} | {fmt(a['sps'])} | {fmt(b['sps'])} | {b['sps'] / a['sps']:.2f}× | "
            f"{fmt(a['rolling100_475_step'])} | {fmt(b['rolling100_475_step'])} |"
        )
    sa, sb = (np.mean([r["sps"] for r in eff[k]]) for k in ("sb3", "backflip"))
    print(f"| mean | {fmt(sa)} | {fmt(sb)} | **{sb / sa:.2f}×** | | |")
    if args.baseline_code:
        print("\n| seed | baseline steps/s | baseline / SB3 | this / baseline |")
        print("|---|---|---|---|")
        for s, (a, b, c) in enumerate(
            zip(eff["sb3"], eff["backflip"], eff["baseline"], strict=True)
        ):
            print(
                f"| {s} | {fmt(c['sps'])} | {c['sps'] / a['sps']:.2f}× | {b['sps'] / c['sps']:.3f} |"
            )
        sc = np.mean([r["sps"] for r in eff["baseline"]])
        print(f"| mean | {fmt(sc)} | **{sc / sa:.2f}×** | **{sb / sc:.3f}** |")

    print(
        f"\n## 2. Time to solve (greedy eval of {EVAL_EPISODES} episodes every {EVAL_EVERY:,} "
        f"steps ≥ {THRESHOLD:g}; budget {SOLVE_BUDGET:,} steps)"
    )
    print("| seed | SB3 rl-zoo: seconds (steps) | backflip defaults: seconds (steps) | ratio |")
    print("|---|---|---|---|")
    sol = results["solve"]
    for s, (a, b) in enumerate(zip(sol["sb3"], sol["backflip"], strict=True)):
        ratio = f"{b['solved_s'] / a['solved_s']:.2f}" if a["solved_s"] and b["solved_s"] else "-"
        print(
            f"| {s} | {fmt(a['solved_s'], ' s')} ({a['steps']:,}) | "
            f"{fmt(b['solved_s'], ' s')} ({b['steps']:,}) | {ratio} |"
        )
    if all(r["solved_s"] for k in sol for r in sol[k]):
        ta, tb = (max(r["solved_s"] for r in sol[k]) for k in ("sb3", "backflip"))
        print(f"| slowest seed | {ta:.1f} s | {tb:.1f} s | **{tb / ta:.2f}** |")
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
