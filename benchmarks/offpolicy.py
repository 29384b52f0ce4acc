"""Shared pieces of the off-policy benchmarks: rl-zoo's hyperparameters in SB3's and backflip's
names, one evaluation protocol for both libraries, FLOP counting of one gradient step, and
training one backflip seed in a throwaway directory."""

from __future__ import annotations

import numpy as np

EVAL_EPISODES = 10

# rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (5e4 steps)
DQN_ZOO_SB3 = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    policy_kwargs=dict(net_arch=[256, 256]),
)
# the same in backflip's names (SB3: hard target copy, Huber loss, grad clip 10, plain DQN target;
# SB3 copies every 10 env steps, so the target is the online network as it was before each burst
# of 128 gradient steps: backflip counts target_every in gradient steps)
DQN_ZOO = dict(
    lr=2.3e-3,
    anneal_lr=False,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    n_step=1,
    target_every=128,
    tau=1.0,
    train_every=256,
    gradient_steps=128,
    eps_fraction=0.16,
    eps_end=0.04,
    hidden="256,256",
    double=False,
    huber=True,
    max_grad_norm=10.0,
    adam_eps=1e-8,
)

# rl-zoo, hyperparams/td3.yml, Pendulum-v1 (2e4 steps); SB3 defaults otherwise (batch 256,
# tau 0.005, policy delay 2, target noise 0.2 clipped at 0.5)
TD3_ZOO_SB3 = dict(
    gamma=0.98,
    buffer_size=200_000,
    learning_starts=10_000,
    gradient_steps=1,
    train_freq=1,
    learning_rate=1e-3,
    policy_kwargs=dict(net_arch=[400, 300]),
)
TD3_ZOO = dict(
    gamma=0.98,
    buffer_size=200_000,
    learning_starts=10_000,
    gradient_steps=1,
    train_every=1,
    lr=1e-3,
    hidden="400,300",
    batch_size=256,
    tau=0.005,
    policy_delay=2,
    action_noise=0.1,
    target_noise=0.2,
    target_noise_clip=0.5,
)

# rl-zoo, hyperparams/sac.yml, Pendulum-v1 (2e4 steps): lr 1e-3, SB3 defaults otherwise
SAC_ZOO_SB3 = dict(learning_rate=1e-3)
SAC_ZOO = dict(
    lr=1e-3,
    hidden="256,256",
    batch_size=256,
    buffer_size=1_000_000,
    learning_starts=100,
    gamma=0.99,
    tau=0.005,
    train_every=1,
    gradient_steps=1,
    target_every=1,
    alpha_init=1.0,
    autotune_alpha=True,
)


def sb3_greedy_evaluator(env_id: str, seed: int):
    """evaluate(model) -> mean greedy return, on the same env copies and seeds backflip uses."""
    from backflip.envs import make_vec
    from backflip.runs import layout
    from backflip.seedrun import evaluate

    envs = make_vec(env_id, EVAL_EPISODES)
    eval_seed = layout.eval_seed(seed)  # the seeds SeedRun.evaluate uses

    def run(model) -> float:
        def act(obs: np.ndarray) -> np.ndarray:
            return model.predict(obs, deterministic=True)[0]

        rets, _ = evaluate(act, envs, EVAL_EPISODES, eval_seed)
        return float(rets.mean())

    return run


def cached_run(path, script: str, spec: str) -> dict:
    """`python SCRIPT --one SPEC` in a fresh process with one OpenMP thread: the JSON its last
    line prints, kept in `path` and read from there when it is already written (a resumed
    benchmark of the same code)."""
    import json
    import os
    import subprocess
    import sys

    if path.exists():
        return json.loads(path.read_text())
    cmd = [sys.executable, script, "--one", spec]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    path.write_text(json.dumps(result))
    return result


def count_flops(fn) -> int:
    """Floating-point operations (matmuls, forward and backward) torch performs in fn()."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def train_seed(algo: str, cfg, seed: int):
    """Train one seed of the resolved config `cfg` in a throwaway directory: (run, evals, wall,
    metrics) — the closed SeedRun (`result`, `eval_time`), every greedy evaluation as (step,
    return, seconds since the start), the wall seconds until training ended, and the metrics
    table, read back before the directory goes."""
    import tempfile
    import time
    from pathlib import Path

    from backflip.algos import get_algo
    from backflip.seedrun import SeedRun
    from backflip.telemetry import read_metrics

    evals = []

    def on_row(step, row):
        if "eval/return_mean" in row:
            evals.append((step, row["eval/return_mean"], time.perf_counter() - run.t_start))

    with tempfile.TemporaryDirectory() as tmp:
        run = SeedRun(cfg, seed, tmp, on_row=on_row)
        get_algo(algo).train(cfg.hp, run)
        wall = time.perf_counter() - run.t_start
        run.close()
        metrics = read_metrics(Path(tmp) / "metrics.csv")
    return run, evals, wall, metrics
