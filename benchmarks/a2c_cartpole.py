"""A2C on CartPole-v1: backflip against Stable-Baselines3, same machine, same run, 3 seeds.

    python benchmarks/a2c_cartpole.py                       # both parts, 3 seeds
    python benchmarks/a2c_cartpole.py --part a --steps 100000

(a) Identical hyperparameters (rl-zoo's A2C CartPole-v1: n_envs 8, ent_coef 0, SB3 defaults:
    RMSprop lr 7e-4 alpha 0.99 eps 1e-5, n_steps 5, gamma 0.99, gae_lambda 1, vf_coef 0.5 on an
    unhalved MSE, max_grad_norm 0.5, 64-64 tanh, no advantage normalization, constant lr):
    training steps/s of each (evaluation excluded), the ratio, and the final greedy return.
(b) Time to solve: each library with its own recommended settings (backflip's defaults, SB3 with
    rl-zoo's), greedy evaluation (10 episodes, the same seeds for both) every --eval-every steps;
    training wall time (evaluation excluded) until the evaluation reaches 475, per seed.

Needs the `bench` extra (stable-baselines3==2.9.2). One torch thread, one process, runs in turn.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.envs import make_vec
from backflip.seedrun import EVAL_SEED_OFFSET, SeedRun, evaluate

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
    rets, _ = evaluate(act, envs, EVAL_EPISODES, seed * 1000 + EVAL_SEED_OFFSET)
    return float(rets.mean())


# --- backflip -----------------------------------------------------------------------------------


def run_backflip(seed: int, steps: int, sets: dict, eval_every: int = 0, stop_at_solved=False):
    """(training seconds, steps done, final greedy return, training seconds until solved)."""
    set_values = {k: str(v) for k, v in sets.items()}
    if eval_every:
        set_values["eval_every"] = str(eval_every)
    cfg = resolve("a2c", ENV, [seed], steps, set_values=set_values)
    solved_at: list[float] = []

    def on_row(step, row):
        if row.get("eval/return_mean", -np.inf) >= SOLVED and not solved_at:
            solved_at.append(time.perf_counter() - run.t_start - run.eval_time)
            if stop_at_solved:
                run.stopping = True

    run = SeedRun(cfg, seed, on_row=on_row)
    get_algo("a2c").train(cfg.hp, run)
    train_s = time.perf_counter() - run.t_start - run.eval_time
    run.close()
    final = run.result.get("eval_return", float("nan"))
    return train_s, run.result["steps"], final, (solved_at[0] if solved_at else None)


# --- Stable-Baselines3 --------------------------------------------------------------------------


def run_sb3(seed: int, steps: int, eval_every: int = 0, stop_at_solved=False):
    """Same tuple as `run_backflip`, for SB3's A2C with rl-zoo's CartPole-v1 settings."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    envs = eval_envs()

    class EvalEvery(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next_eval, self.eval_s, self.solved_at = eval_every or np.inf, 0.0, None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            t0 = time.perf_counter()
            ret = greedy_return(lambda o: model.predict(o, deterministic=True)[0], envs, seed)
            self.eval_s += time.perf_counter() - t0
            if ret >= SOLVED and self.solved_at is None:
                self.solved_at = time.perf_counter() - t_start - self.eval_s
                return not stop_at_solved
            return True

    model = A2C(
        "MlpPolicy", make_vec_env(ENV, n_envs=8, seed=seed), ent_coef=0.0, seed=seed, device="cpu"
    )
    callback = EvalEvery()
    t_start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=callback)
    train_s = time.perf_counter() - t_start - callback.eval_s
    final = greedy_return(lambda o: model.predict(o, deterministic=True)[0], envs, seed)
    return train_s, model.num_timesteps, final, callback.solved_at


# --- the two comparisons ------------------------------------------------------------------------


def part_a(seeds, steps):
    print(f"\n(a) identical hyperparameters (SB3 A2C defaults, rl-zoo CartPole), {steps:,} steps")
    print("seed  library   train_s   steps/s   final greedy return")
    ratios = []
    for seed in seeds:
        b_s, b_n, b_ret, _ = run_backflip(seed, steps, SB3_EQUIVALENT)
        s_s, s_n, s_ret, _ = run_sb3(seed, steps)
        print(f"{seed:>4}  backflip {b_s:8.1f} {b_n / b_s:9.0f}   {b_ret:.1f}")
        print(f"{seed:>4}  sb3      {s_s:8.1f} {s_n / s_s:9.0f}   {s_ret:.1f}")
        ratios.append((b_n / b_s) / (s_n / s_s))
    print(f"steps/s ratio backflip/sb3 per seed: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"median ratio: {np.median(ratios):.2f}x (target >= 2x)")


def part_b(seeds, sb3_steps, eval_every):
    print(f"\n(b) time to solve (greedy eval >= {SOLVED:.0f}, every {eval_every:,} steps)")
    print("backflip: its defaults and CartPole preset; sb3: rl-zoo settings, up to 5e5 steps")
    budget = resolve("a2c", ENV, [0], None).steps
    times = {"backflip": [], "sb3": []}
    for seed in seeds:
        for lib in ("backflip", "sb3"):
            if lib == "backflip":
                _, n, ret, solved = run_backflip(seed, budget, {}, eval_every, stop_at_solved=True)
            else:
                _, n, ret, solved = run_sb3(seed, sb3_steps, eval_every, stop_at_solved=True)
            times[lib].append(solved)
            when = f"solved after {solved:.1f}s" if solved is not None else "NOT solved"
            print(f"seed {seed} {lib:8s}: {when} ({n:,} steps; last greedy return {ret:.1f})")
    for lib, ts in times.items():
        ok = [t for t in ts if t is not None]
        worst = f"{max(ok):.1f}s" if len(ok) == len(ts) else "never (not every seed solved)"
        print(f"{lib}: solved {len(ok)}/{len(ts)} seeds; time until every seed solved: {worst}")
    b, s = times["backflip"], times["sb3"]
    if all(t is not None for t in b) and all(t is not None for t in s):
        print(f"ratio backflip/sb3 (worst seed): {max(b) / max(s):.2f} (target <= 0.5)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--part", choices=["a", "b", "ab"], default="ab")
    p.add_argument("--steps", type=float, default=5e5, help="budget of part (a)")
    p.add_argument("--sb3-steps", type=float, default=5e5, help="SB3's budget in part (b)")
    p.add_argument("--eval-every", type=int, default=10_000)
    args = p.parse_args()
    torch.set_num_threads(1)
    # the first optimizer either library builds imports torch._dynamo (seconds): do it untimed
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    load = os.getloadavg()
    print(f"A2C {ENV}: backflip vs stable-baselines3, {args.seeds} seeds, torch threads 1")
    print(f"machine: {os.cpu_count()} CPUs; load average at start {load[0]:.1f} {load[1]:.1f}")
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    if "a" in args.part:
        part_a(seeds, int(args.steps))
    if "b" in args.part:
        part_b(seeds, int(args.sb3_steps), args.eval_every)
    load = os.getloadavg()
    print(
        f"\ntotal {time.perf_counter() - t0:.0f}s; load average at end {load[0]:.1f} {load[1]:.1f}"
    )


if __name__ == "__main__":
    main()
