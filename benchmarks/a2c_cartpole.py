"""A2C on CartPole-v1: backflip against Stable-Baselines3, same machine, same run, 3 seeds.

    python benchmarks/a2c_cartpole.py                       # both parts, 3 seeds
    python benchmarks/a2c_cartpole.py --part a --steps 100000

(a) Identical hyperparameters (rl-zoo's A2C CartPole-v1: n_envs 8, ent_coef 0, SB3 defaults:
    RMSprop lr 7e-4 alpha 0.99 eps 1e-5, n_steps 5, gamma 0.99, gae_lambda 1, vf_coef 0.5 on an
    unhalved MSE, max_grad_norm 0.5, 64-64 tanh, no advantage normalization, constant lr):
    training steps/s of each (evaluation excluded), the ratio, and the final greedy return.
(b) Time to solve: each library with its own recommended settings (backflip's defaults, SB3 with
    rl-zoo's), greedy evaluation (10 episodes, the same env seeds for both) every --eval-every
    steps; wall-clock seconds (evaluation included, as in benchmarks/ppo_cartpole.py) until the
    evaluation reaches 475, per seed. SB3 gets rl-zoo's budget (5e5), backflip its preset's.

Needs the `bench` extra (stable-baselines3==2.9.2). Each run is its own process with one torch
thread; the libraries alternate. With `--baseline-code DIR`, part (a) also runs another
checkout's backflip (DIR first on the Python path), alternating with the other two, so before
and after a change see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.envs import make_vec
from backflip.runs.layout import eval_seed
from backflip.seedrun import SeedRun, evaluate

ENV, SOLVED, EVAL_EPISODES = "CartPole-v1", 475.0, 10

# backflip's A2C set to SB3's A2C defaults (rl-zoo's CartPole entry only sets n_envs and
# ent_coef). SB3's value loss is the plain MSE, backflip's is ½·MSE, so vf_coef 1.0 == SB3's 0.5.
SB3_EQUIVALENT = {
    "num_envs": 8,
    "num_steps": 5,
    "gamma": 0.99,
    "gae_lambda": 1.0,
    "optimizer": "rmsprop",
    "lr": 7e-4,
    "anneal_lr": False,
    "opt_eps": 1e-5,
    "vf_coef": 1.0,
    "ent_coef": 0.0,
    "max_grad_norm": 0.5,
    "norm_adv": False,
    "hidden": "64,64",
    "activation": "tanh",
}


def eval_envs():
    return make_vec(ENV, EVAL_EPISODES)


def greedy_return(act, envs, seed: int) -> float:
    rets, _ = evaluate(act, envs, EVAL_EPISODES, eval_seed(seed))
    return float(rets.mean())


# --- backflip -----------------------------------------------------------------------------------


def run_backflip(seed: int, steps: int, sets: dict, eval_every: int = 0, solve=False) -> dict:
    set_values = {k: str(v) for k, v in sets.items()}
    if solve:
        set_values.update(eval_every=str(eval_every), target_return=str(SOLVED))
    cfg = resolve("a2c", ENV, [seed], steps, set_values=set_values)
    run = SeedRun(cfg, seed)
    t0 = time.perf_counter()
    get_algo("a2c").train(cfg.hp, run)
    wall = time.perf_counter() - t0
    run.close()
    train_s = wall - run.eval_time
    return {
        "steps": run.result["steps"],
        "train_s": train_s,
        "sps": run.result["steps"] / train_s,
        "final": run.result.get("eval_return"),
        "solved_s": run.result.get("solved_s"),
    }


# --- Stable-Baselines3 --------------------------------------------------------------------------


def run_sb3(seed: int, steps: int, eval_every: int = 0, solve=False) -> dict:
    """SB3's A2C with rl-zoo's CartPole-v1 settings; the same result keys as `run_backflip`."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    envs = eval_envs()

    def act(o):
        return model.predict(o, deterministic=True)[0]

    class EvalEvery(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next_eval, self.eval_s, self.solved_s = eval_every or np.inf, 0.0, None

        def _on_step(self) -> bool:
            if not solve or self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            t0 = time.perf_counter()
            ret = greedy_return(act, envs, seed)
            self.eval_s += time.perf_counter() - t0
            if ret >= SOLVED:
                self.solved_s = time.perf_counter() - t_start
                return False
            return True

    model = A2C(
        "MlpPolicy", make_vec_env(ENV, n_envs=8, seed=seed), ent_coef=0.0, seed=seed, device="cpu"
    )
    callback = EvalEvery()
    t_start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    train_s = time.perf_counter() - t_start - callback.eval_s
    return {
        "steps": model.num_timesteps,
        "train_s": train_s,
        "sps": model.num_timesteps / train_s,
        "final": greedy_return(act, envs, seed),
        "solved_s": callback.solved_s,
    }


def one(lib: str, seed: int, part: str, args) -> dict:
    """Run one configuration in a fresh process and return its result."""
    cmd = [sys.executable, __file__, "--one", lib, "--seed", str(seed), "--part", part]
    cmd += ["--steps", str(args.steps), "--sb3-steps", str(args.sb3_steps)]
    cmd += ["--eval-every", str(args.eval_every)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if lib == "baseline":  # another checkout's backflip: first on the path of a fresh process
        cmd[cmd.index("baseline")] = "backflip"
        env["PYTHONPATH"] = os.pathsep.join([args.baseline_code, env.get("PYTHONPATH", "")])
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_one(args) -> dict:
    torch.set_num_threads(1)
    # the first optimizer either library builds imports torch._dynamo (seconds): do it untimed
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    if args.part == "a":
        if args.one == "sb3":
            return run_sb3(args.seed, int(args.steps))
        return run_backflip(args.seed, int(args.steps), SB3_EQUIVALENT)
    if args.one == "sb3":
        return run_sb3(args.seed, int(args.sb3_steps), args.eval_every, solve=True)
    budget = resolve("a2c", ENV, [0], None).steps
    return run_backflip(args.seed, budget, {}, args.eval_every, solve=True)


# --- the two comparisons ------------------------------------------------------------------------


def part_a(seeds, args):
    print(
        f"\n(a) identical hyperparameters (SB3 A2C defaults, rl-zoo CartPole), {args.steps:,.0f} steps"
    )
    libs = ["backflip", "sb3"] + (["baseline"] if args.baseline_code else [])
    if args.baseline_code:
        print(f"baseline: {os.path.abspath(args.baseline_code)}")
    print("seed  library   train_s   steps/s   final greedy return")
    ratios, base_ratios, this_base = [], [], []
    for seed in seeds:
        k = seed % len(libs)
        r = {lib: one(lib, seed, "a", args) for lib in libs[k:] + libs[:k]}  # each first in turn
        for lib in libs:
            x = r[lib]
            print(f"{seed:>4}  {lib:8s} {x['train_s']:8.1f} {x['sps']:9.0f}   {x['final']:.1f}")
        ratios.append(r["backflip"]["sps"] / r["sb3"]["sps"])
        if args.baseline_code:
            base_ratios.append(r["baseline"]["sps"] / r["sb3"]["sps"])
            this_base.append(r["backflip"]["sps"] / r["baseline"]["sps"])
    print(f"steps/s ratio backflip/sb3 per seed: {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"median ratio: {np.median(ratios):.2f}x (target >= 2x)")
    if args.baseline_code:
        print(f"baseline/sb3 per seed: {', '.join(f'{x:.2f}' for x in base_ratios)}")
        print(f"baseline median ratio: {np.median(base_ratios):.2f}x")
        print(f"this/baseline per seed: {', '.join(f'{x:.3f}' for x in this_base)}")
        print(f"this/baseline median: {np.median(this_base):.3f}")


def part_b(seeds, args):
    budget = resolve("a2c", ENV, [0], None).steps
    print(
        f"\n(b) time to solve: greedy eval >= {SOLVED:.0f} (10 episodes every {args.eval_every:,} steps)"
    )
    print(
        f"backflip: defaults, budget {budget:,}; sb3: rl-zoo settings, budget {args.sb3_steps:,.0f}"
    )
    times = {"backflip": [], "sb3": []}
    for seed in seeds:
        order = ("backflip", "sb3") if seed % 2 == 0 else ("sb3", "backflip")
        for lib in order:
            x = one(lib, seed, "b", args)
            times[lib].append(x["solved_s"])
            when = f"solved after {x['solved_s']:.1f}s" if x["solved_s"] else "NOT solved"
            print(f"seed {seed} {lib:8s}: {when} ({x['steps']:,} steps)")
    for lib, ts in times.items():
        ok = [t for t in ts if t is not None]
        worst = f"{max(ok):.1f}s" if len(ok) == len(ts) else "never (not every seed solved)"
        print(f"{lib}: solved {len(ok)}/{len(ts)} seeds; wall until every seed solved: {worst}")
    b, s = times["backflip"], times["sb3"]
    if all(t is not None for t in b + s):
        print(f"ratio backflip/sb3 (slowest seed): {max(b) / max(s):.2f} (target <= 0.5)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--part", choices=["a", "b", "ab"], default="ab")
    p.add_argument("--steps", type=float, default=5e5, help="budget of part (a)")
    p.add_argument("--sb3-steps", type=float, default=5e5, help="SB3's budget in part (b)")
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--one", choices=["sb3", "backflip"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--baseline-code",
        metavar="DIR",
        help="another checkout of backflip: part (a) also runs its A2C, alternating",
    )
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_one(args)))
        return
    load = os.getloadavg()
    print(f"A2C {ENV}: backflip vs stable-baselines3, {args.seeds} seeds, one torch thread each")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average at start {load[0]:.1f} {load[1]:.1f}"
    )
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    if "a" in args.part:
        part_a(seeds, args)
    if "b" in args.part:
        part_b(seeds, args)
    load = os.getloadavg()
    print(
        f"\ntotal {time.perf_counter() - t0:.0f}s; load average at end {load[0]:.1f} {load[1]:.1f}"
    )


if __name__ == "__main__":
    main()
