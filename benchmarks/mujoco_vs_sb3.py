"""backflip vs Stable-Baselines3 on MuJoCo: PPO and SAC on HalfCheetah-v5 and Hopper-v5, the
same settings in both libraries, the same machine, one run of this script.

- PPO: the PPO paper's MuJoCo settings (Schulman et al. 2017, table 3), which are SB3's PPO
  defaults, with rl-zoo's `normalize: true` (VecNormalize: observations, and rewards by the
  discounted return's scale) — backflip's `norm_obs` and `scale_reward`; lr 3e-4 held constant
  (SB3's default schedule), one env copy, 64-64 tanh networks.
- SAC: rl-zoo's sac.yml MuJoCo entries: SB3's SAC defaults (256-256, batch 256, lr 3e-4, buffer
  1e6, τ 0.005, one gradient step per env step, automatic temperature) with 10,000 random steps
  before learning.

Each run is its own process with one torch thread; `--workers 2` runs an SB3 run beside a
backflip run of the same seed (both see the same load). Reported per algorithm and env: training
steps/s (evaluation excluded) of each library, and over the learning phase alone (SAC: after
its random steps, which take no gradient step; the ratio is of these), and the final greedy
return (10
episodes on the same env seeds for both: `offpolicy.sb3_greedy_evaluator`) as the IQM over
seeds with a 95% bootstrap interval, at equal agent steps. The budgets are CPU-scale (the
rl-zoo budget is 1e6 steps for both): a return gap at equal steps is a bug to find, not a
figure to report. Results per run go to a fresh directory (printed); `--results DIR` reuses
those already there (the *same* code only).

    pip install -e '.[bench]' && python benchmarks/mujoco_vs_sb3.py [--algos ppo,sac]
        [--envs HalfCheetah-v5,Hopper-v5] [--seeds 3] [--ppo-steps 200000] [--sac-steps 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from offpolicy import SAC_ZOO, cached_run, sb3_greedy_evaluator, train_seed

# SB3's PPO defaults are the PPO paper's MuJoCo settings (rl-zoo: `normalize: true`)
PPO_SB3 = dict(
    n_steps=2048,
    batch_size=64,
    n_epochs=10,
    learning_rate=3e-4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
PPO_BACKFLIP = dict(
    num_envs=1,
    num_steps=2048,
    minibatch_size=64,
    epochs=10,
    lr=3e-4,
    anneal_lr=False,
    gamma=0.99,
    gae_lambda=0.95,
    clip=0.2,
    anneal_clip=False,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
    norm_obs=True,
    scale_reward=True,
    hidden="64,64",
    activation="tanh",
    log_std_init=0.0,
)
# rl-zoo, hyperparams/sac.yml, HalfCheetah/Hopper: SB3's defaults with learning_starts 10,000
SAC_SB3 = dict(learning_starts=10_000)
SAC_BACKFLIP = {**SAC_ZOO, "lr": 3e-4, "learning_starts": 10_000}  # SB3 defaults, 1e4 random steps


# --- one run per process ----------------------------------------------------------------------


def run_sb3(algo: str, env_id: str, seed: int, steps: int) -> dict:
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    env = make_vec_env(env_id, n_envs=1, seed=seed)
    if algo == "ppo":
        env = VecNormalize(env, gamma=PPO_SB3["gamma"])
        model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **PPO_SB3)
    else:
        model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **SAC_SB3)
    start = SAC_SB3["learning_starts"] if algo == "sac" else 0
    marks: dict[str, tuple[int, float]] = {}

    class Clock(BaseCallback):  # when learning starts (SAC: after the random steps)
        def _on_step(self):
            if self.num_timesteps >= start and "learning" not in marks:
                marks["learning"] = (self.num_timesteps, time.perf_counter())
            return True

    t0 = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Clock())
    train_s = time.perf_counter() - t0
    learning = (model.num_timesteps - marks["learning"][0]) / (t0 + train_s - marks["learning"][1])

    class Greedy:  # what the evaluator calls: the frozen normalizer, then the policy's mean
        @staticmethod
        def predict(obs, deterministic=True):
            if algo == "ppo":
                obs = env.normalize_obs(obs)
            return model.predict(obs, deterministic=deterministic)

    final = sb3_greedy_evaluator(env_id, seed)(Greedy)
    return {
        "steps": int(model.num_timesteps),
        "train_s": train_s,
        "learning_sps": learning,
        "final_return": final,
    }


def run_backflip(algo: str, env_id: str, seed: int, steps: int) -> dict:
    import torch

    from backflip.config import resolve

    torch.set_num_threads(1)
    sets = {**(PPO_BACKFLIP if algo == "ppo" else SAC_BACKFLIP), "eval_episodes": 10}
    cfg = resolve(algo, env_id, [seed], steps, set_values={k: str(v) for k, v in sets.items()})
    run, _, wall, metrics = train_seed(algo, cfg, seed)
    # when learning starts (SAC: after the random steps), from the rows' own wall clock
    start = SAC_BACKFLIP["learning_starts"] if algo == "sac" else 0
    row_steps, row_wall = metrics["time/wall_s"]
    first = int(np.searchsorted(row_steps, start))
    learning = (row_steps[-1] - row_steps[first]) / (row_wall[-1] - row_wall[first])
    return {
        "steps": int(run.result["steps"]),
        "train_s": wall - run.eval_time,
        "learning_sps": float(learning),
        "final_return": float(run.result["eval_return"]),
    }


# --- the comparison ---------------------------------------------------------------------------


def one(results: Path, algo: str, lib: str, env_id: str, seed: int, steps: int) -> dict:
    """One run in a fresh process (cached in `results`)."""
    path = results / f"{algo}-{lib}-{env_id}-{seed}-{steps}.json"
    return cached_run(path, __file__, f"{algo},{lib},{env_id},{seed},{steps}")


def iqm(values: list[float]) -> str:
    from backflip.stats import aggregate

    if len(values) < 2:
        return f"{values[0]:,.0f} (no interval: 1 seed)"
    value, low, high = aggregate(np.asarray(values, float)[:, None])["iqm"]
    return f"{value:,.0f} [{low:,.0f}, {high:,.0f}]"


def report(algo: str, env_id: str, steps: int, sb3: list[dict], bf: list[dict]) -> None:
    print(f"\n## {algo.upper()} on {env_id}, {steps:,} steps")
    print(
        "| seed | SB3 steps/s (learning) | backflip steps/s (learning) | ratio | "
        "SB3 greedy return | backflip |"
    )
    print("|---|---|---|---|---|---|")
    for seed, (a, b) in enumerate(zip(sb3, bf, strict=True)):
        sa, sb = a["steps"] / a["train_s"], b["steps"] / b["train_s"]
        la, lb = a["learning_sps"], b["learning_sps"]
        print(
            f"| {seed} | {sa:,.0f} ({la:,.0f}) | {sb:,.0f} ({lb:,.0f}) | {lb / la:.2f}× | "
            f"{a['final_return']:,.1f} | {b['final_return']:,.1f} |"
        )
    ra = np.median([a["learning_sps"] for a in sb3])
    rb = np.median([b["learning_sps"] for b in bf])
    print(
        f"| median (learning) / IQM [95% CI] | {ra:,.0f} | {rb:,.0f} | **{rb / ra:.2f}×** | "
        f"{iqm([a['final_return'] for a in sb3])} | {iqm([b['final_return'] for b in bf])} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="ppo,sac")
    p.add_argument("--envs", default="HalfCheetah-v5,Hopper-v5")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ppo-steps", type=int, default=200_000)
    p.add_argument("--sac-steps", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=2, help="runs at once (an SB3 and a backflip)")
    p.add_argument("--results", help="reuse the per-run results in this directory")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        algo, lib, env_id, seed, steps = args.one.split(",")
        import torch

        # the first optimizer either library builds imports torch._dynamo (1-2 s): untimed
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        run = run_sb3 if lib == "sb3" else run_backflip
        print(json.dumps(run(algo, env_id, int(seed), int(steps))))
        return

    results = Path(args.results or tempfile.mkdtemp(prefix="mujoco-vs-sb3-"))
    results.mkdir(parents=True, exist_ok=True)
    budget = {"ppo": args.ppo_steps, "sac": args.sac_steps}
    algos, envs, seeds = args.algos.split(","), args.envs.split(","), range(args.seeds)
    print(f"# MuJoCo: backflip vs Stable-Baselines3 — {time.strftime('%Y-%m-%d %H:%M')} UTC")
    print(
        f"# {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"load average at start {os.getloadavg()[0]:.2f}, {args.workers} run(s) at once"
    )
    print(f"# per-run results in {results}", flush=True)
    jobs = [(a, lib, e, s, budget[a]) for a in algos for e in envs for s in seeds
            for lib in ("sb3", "backflip")]  # fmt: skip
    t0 = time.time()
    with ThreadPoolExecutor(args.workers) as pool:
        futures = {job: pool.submit(one, results, *job) for job in jobs}
        for i, (job, f) in enumerate(futures.items(), 1):
            r = f.result()
            eta = (time.time() - t0) / i * (len(jobs) - i)
            print(
                f"[{i}/{len(jobs)}] {job[0]} {job[1]} {job[2]} seed {job[3]}: "
                f"{r['steps'] / r['train_s']:,.0f} steps/s, greedy {r['final_return']:,.1f} "
                f"(ETA {eta / 60:.0f} min)",
                file=sys.stderr,
                flush=True,
            )
    for a in algos:
        for e in envs:
            sb3 = [futures[(a, "sb3", e, s, budget[a])].result() for s in seeds]
            bf = [futures[(a, "backflip", e, s, budget[a])].result() for s in seeds]
            report(a, e, budget[a], sb3, bf)
    print(f"\n# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
