"""Calibrate the doctor on the real libraries' own code: backflip, Stable-Baselines3 and CleanRL.

    python benchmarks/doctor_calibration_libs.py --cache DIR --cleanrl /work/cleanrl \
        --cleanrl-python /work/cleanrl-venv/bin/python [--jobs 2] [--libs backflip,sb3,cleanrl] \
        [--only healthy|faults] [--seeds 0,1] [--match KEY,...] [--no-train] [--markdown FILE]

Beside `doctor_calibration.py` (backflip's own algorithms, CartPole and Pendulum), this set runs
each library's own code on six environments, healthy and with an injected fault of every kind in
the catalog (docs/doctor.md, "Fault injection"):

- backflip through `backflip train`;
- Stable-Baselines3 2.9.2 as a package (the `test` extra), with rl-baselines3-zoo's tuned
  hyperparameters where the zoo has an entry, shorter budgets where its budget is long;
- CleanRL's own single-file scripts (`cleanrl/ppo.py`, `dqn.py`, `sac_continuous_action.py`,
  `td3_continuous_action.py`, `ppo_continuous_action.py`), run unchanged from `--cleanrl PATH`
  (a checkout of github.com/vwxyzjn/cleanrl: its `cleanrl/` and `cleanrl_utils/` folders) with
  the interpreter `--cleanrl-python`, a virtualenv holding what the scripts declare: Gymnasium
  0.29.1 (under Gymnasium 1.x they log no episode returns, and the off-policy ones crash at the
  first time limit), NumPy < 2, torch, tyro, tensorboard, mujoco 2.3 and imageio. Nothing of
  CleanRL is in this repository: faults reach its environments through env ids this script
  registers (`_cleanrl_launch`) with backflip's fault wrappers (`backflip/envs/faults.py`, loaded
  by path: it needs no Gymnasium 1.x).

Each run is one seed in its own folder under `--cache` (healthy runs once per seed in `--seeds`,
faults with seed 0); a finished run leaves `done.json` and is never trained again, so an
interrupted calibration resumes where it stopped (a run it stopped half-way is trained again
beside what it left, and the newer one is read; `--no-train` lists the runs it leaves out). The doctor then
reads every run with the rules as they are now (`backflip doctor` on the run directory or the
TensorBoard logdir), so a changed rule is re-measured without training anything; with
`PYTHONPATH=<a checkout of another commit>` and `--no-train`, that commit's doctor reads the same
runs (a crash of it is counted as an error, `doctor-crash`), for a before/after comparison.

A healthy run counts only if it learned: its final return (backflip: the greedy evaluation;
SB3: a greedy evaluation of 10 episodes, or for runs made before it was added the last logged
`ep_rew_mean`, the mean of the last 100 episodes; CleanRL: the mean of the last 20% of its
episodes) reaches the bar in `LEARNED`.
Runs that did not get there are listed apart as "did not learn": the doctor must say something
(a warning or an error) about them, like about a fault. Targets (issue 23): 0 errors on healthy
runs, >= 95% of faults found (a warning or an error of the expected rule, or of any rule for a
run that did not learn); warnings on healthy runs are counted per rule.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# a return that says the run learned the task (Gymnasium's reward_threshold where it has one,
# a little below it for short budgets; Pendulum has none: -400 is a pendulum held up most of
# the time, a random policy scores ~-1200)
LEARNED = {
    "CartPole-v1": 400.0,
    "Acrobot-v1": -120.0,
    "MountainCar-v0": -160.0,
    "Pendulum-v1": -400.0,
    "MountainCarContinuous-v0": 80.0,
    "InvertedPendulum-v5": 800.0,
    "InvertedPendulum-v4": 800.0,
}


@dataclass
class Job:
    lib: str
    algo: str
    env: str
    steps: int
    fault: str | None = None
    expect: str | None = None
    """the rule a fault should draw (None: any warning or error)"""
    settings: dict = field(default_factory=dict)
    seed: int = 0

    @property
    def key(self) -> str:
        return f"{self.lib}-{self.algo}-{self.env}-{self.fault or 'healthy'}-s{self.seed}"


# --- the set ------------------------------------------------------------------------------------

# backflip: (algo, env, steps or None for the preset's budget, settings)
BACKFLIP_HEALTHY = [
    ("ppo", "CartPole-v1", None, {}),
    ("ppo", "Acrobot-v1", 100_000, {}),
    ("ppo", "Pendulum-v1", None, {}),
    ("ppo", "InvertedPendulum-v5", 100_000, {}),
    ("a2c", "CartPole-v1", None, {}),
    ("a2c", "Acrobot-v1", 200_000, {}),
    ("dqn", "CartPole-v1", None, {}),
    ("dqn", "Acrobot-v1", 60_000, {}),
    ("sac", "Pendulum-v1", None, {}),
    ("td3", "Pendulum-v1", None, {}),
    ("sac", "InvertedPendulum-v5", 10_000, {}),
    ("td3", "InvertedPendulum-v5", 10_000, {}),
    ("sac", "MountainCarContinuous-v0", 30_000, {
        "lr": 3e-4, "batch_size": 512, "train_every": 32, "gradient_steps": 32,
        "gamma": 0.9999, "tau": 0.01, "alpha_init": 0.1, "autotune_alpha": False,
        "hidden": "64,64",
    }),
]  # fmt: skip
BACKFLIP_FAULTS = [  # (fault, env, steps, settings, expected rule): docs/doctor.md's table
    ("ent_coef=-10", "CartPole-v1", 20_000, {"ent_coef": -10}, "entropy-collapse"),
    ("lr=1e-8", "CartPole-v1", 20_000, {"lr": 1e-8}, "entropy-flat"),
    ("lr=1e-8", "Pendulum-v1", 40_960, {"lr": 1e-8}, "entropy-flat"),
    ("KL blow-up", "CartPole-v1", 20_000,
     {"lr": 0.01, "clip": 1e6, "max_grad_norm": 0}, "kl-large"),
    ("vf_coef=0", "CartPole-v1", 20_000, {"vf_coef": 0}, "explained-variance"),
    ("rewards x1000", "CartPole-v1", 20_000, {"env.reward_scale": 1000}, "reward-scale"),
    ("obs x1000+500", "CartPole-v1", 20_000,
     {"env.obs_scale": 1000, "env.obs_shift": 500}, "obs-scale"),
    ("NaN rewards", "CartPole-v1", 20_000, {"env.nan_reward_at": 1000}, "nonfinite"),
    ("growing work", "CartPole-v1", 20_000, {"env.slowdown": 300}, "throughput-decline"),
]  # fmt: skip
BACKFLIP_FAULTS_OFFPOLICY = [  # (algo, fault, env, steps, settings, expected rule)
    ("dqn", "eps stuck at 1", "CartPole-v1", 20_000, {"eps_end": 1.0}, "epsilon-stuck"),
    ("dqn", "rewards x1000", "CartPole-v1", 20_000, {"env.reward_scale": 1000}, "reward-scale"),
    ("dqn", "NaN rewards", "CartPole-v1", 20_000, {"env.nan_reward_at": 3000}, "nonfinite"),
    ("sac", "lr=1e-8", "Pendulum-v1", 10_000, {"lr": 1e-8}, "entropy-flat"),
]

# Stable-Baselines3: rl-baselines3-zoo's hyperparameters (hyperparams/*.yml, 2.x)
SB3_ZOO = {
    ("ppo", "CartPole-v1"): dict(
        n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate="lin_1e-3", clip_range="lin_0.2"),
    ("ppo", "Acrobot-v1"): dict(
        normalize=True, n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4,
        ent_coef=0.0),
    ("ppo", "Pendulum-v1"): dict(
        n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
        learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    ("ppo", "InvertedPendulum-v5"): dict(n_envs=1),  # no zoo entry: SB3's defaults
    ("a2c", "CartPole-v1"): dict(n_envs=8, ent_coef=0.0),
    ("a2c", "Acrobot-v1"): dict(normalize=True, n_envs=16, ent_coef=0.0),
    ("dqn", "CartPole-v1"): dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04, net_arch=[256, 256]),
    ("dqn", "Acrobot-v1"): dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
        gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
        exploration_fraction=0.12, exploration_final_eps=0.1, net_arch=[256, 256]),
    ("dqn", "MountainCar-v0"): dict(
        learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000,
        gamma=0.98, target_update_interval=600, train_freq=16, gradient_steps=8,
        exploration_fraction=0.2, exploration_final_eps=0.07, net_arch=[256, 256]),
    ("sac", "Pendulum-v1"): dict(learning_rate=1e-3),
    ("sac", "MountainCarContinuous-v0"): dict(
        learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1, train_freq=32,
        gradient_steps=32, gamma=0.9999, tau=0.01, learning_starts=0, use_sde=True,
        log_std_init=-3.67, net_arch=[64, 64]),
    ("sac", "InvertedPendulum-v5"): dict(),
    ("td3", "Pendulum-v1"): dict(
        gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_std=0.1,
        gradient_steps=1, train_freq=1, learning_rate=1e-3, net_arch=[400, 300]),
    ("td3", "InvertedPendulum-v5"): dict(noise_std=0.1),
}  # fmt: skip
SB3_HEALTHY = [  # (algo, env, steps): the zoo's budget, or shorter where it is long
    ("ppo", "CartPole-v1", 100_000),
    ("ppo", "Acrobot-v1", 100_000),  # zoo: 1e6
    ("ppo", "Pendulum-v1", 100_000),
    ("ppo", "InvertedPendulum-v5", 50_000),
    ("a2c", "CartPole-v1", 100_000),  # zoo: 5e5
    ("a2c", "Acrobot-v1", 100_000),  # zoo: 5e5
    ("dqn", "CartPole-v1", 50_000),
    ("dqn", "MountainCar-v0", 120_000),
    ("sac", "Pendulum-v1", 20_000),
    ("sac", "MountainCarContinuous-v0", 50_000),
    ("sac", "InvertedPendulum-v5", 10_000),
    ("td3", "Pendulum-v1", 20_000),
    ("td3", "InvertedPendulum-v5", 10_000),
]
SB3_FAULT_SETTINGS = {  # as tests/sb3_logs.py
    "ent_coef=-1": {"ent_coef": -1.0},
    "ent_coef=-5": {"ent_coef": -5.0},
    "lr=1e-8": {"learning_rate": 1e-8},
    "KL blow-up": {"learning_rate": 0.01, "clip_range": 1e6, "max_grad_norm": 1e9},
    "vf_coef=0": {"vf_coef": 0.0},
    "eps stuck at 1": {"exploration_initial_eps": 1.0, "exploration_final_eps": 1.0},
}
ENV_FAULTS = {  # fault -> (wrapper name, arguments) of backflip/envs/faults.py
    "rewards x1000": ("ScaleReward", (1000.0,)),
    "obs x1000+500": ("AffineObservation", (1000.0, 500.0)),
    "NaN rewards": ("NaNRewardAfter", (1000,)),
    "NaN rewards early": ("NaNRewardAfter", (100,)),
    "growing work": ("GrowingWork", (300.0,)),
}
SB3_FAULTS = [  # (algo, fault, steps, expected rule)
    ("ppo", "ent_coef=-1", 30_000, "entropy-collapse"),
    ("ppo", "lr=1e-8", 30_000, "entropy-flat"),
    ("ppo", "KL blow-up", 30_000, "kl-large"),
    ("ppo", "vf_coef=0", 30_000, "explained-variance"),
    ("ppo", "rewards x1000", 30_000, "reward-scale"),
    ("ppo", "NaN rewards early", 30_000, "nonfinite"),
    ("ppo", "growing work", 30_000, "throughput-decline"),
    ("a2c", "ent_coef=-5", 30_000, "entropy-collapse"),
    ("a2c", "lr=1e-8", 30_000, "entropy-flat"),
    ("a2c", "vf_coef=0", 30_000, "explained-variance"),
    ("a2c", "rewards x1000", 30_000, "reward-scale"),
    ("a2c", "growing work", 30_000, "throughput-decline"),
    ("dqn", "lr=1e-8", 20_000, "never-better"),
    ("dqn", "rewards x1000", 20_000, "reward-scale"),
    ("dqn", "NaN rewards", 20_000, "nonfinite"),
    ("dqn", "eps stuck at 1", 20_000, "epsilon-stuck"),
]

# CleanRL: (script, env, steps, arguments); its own defaults otherwise
CLEANRL_HEALTHY = [
    ("ppo", "CartPole-v1", 100_000, []),
    ("ppo", "Acrobot-v1", 100_000, []),
    # DQN: its default budget (ε decays over the first half of it)
    ("dqn", "CartPole-v1", 500_000, []),
    ("dqn", "Acrobot-v1", 500_000, []),
    ("sac_continuous_action", "Pendulum-v1", 20_000, []),
    ("td3_continuous_action", "Pendulum-v1", 20_000, ["--learning-starts", "10000"]),
    ("sac_continuous_action", "InvertedPendulum-v4", 10_000, ["--learning-starts", "1000"]),
    ("ppo_continuous_action", "InvertedPendulum-v4", 50_000, []),
    ("sac_continuous_action", "MountainCarContinuous-v0", 30_000, []),
]
CLEANRL_FAULTS = [  # (script, fault, steps, arguments, expected rule)
    # -1 only slowed CleanRL's PPO (lr 2.5e-4: entropy 0.5, return 32 -> 75 in 3e4 steps); -10
    # brought the entropy to 0.17 by the end, not within the first quarter, as the return rose
    ("ppo", "ent_coef=-10", 30_000, ["--ent-coef", "-10"], "entropy-collapse"),
    ("ppo", "lr=1e-8", 30_000, ["--learning-rate", "1e-8"], "entropy-flat"),
    ("ppo", "KL blow-up", 30_000,
     ["--learning-rate", "0.01", "--clip-coef", "1e6", "--max-grad-norm", "1e9"], "kl-large"),
    ("ppo", "vf_coef=0", 30_000, ["--vf-coef", "0"], "explained-variance"),
    ("ppo", "rewards x1000", 30_000, [], "reward-scale"),
    ("ppo", "NaN rewards early", 30_000, [], "nonfinite"),
    ("ppo", "growing work", 30_000, [], "throughput-decline"),
    # its return still rose (ε decays onto the initial network's argmax): what shows is Q
    ("dqn", "lr=1e-8", 30_000, ["--learning-rate", "1e-8", "--learning-starts", "1000"],
     "q-stuck"),
    # CleanRL's dqn.py logs no ε: what shows is its consequence
    ("dqn", "eps stuck at 1", 30_000, ["--end-e", "1.0", "--learning-starts", "1000"],
     "never-better"),
    ("dqn", "NaN rewards", 30_000, ["--learning-starts", "1000"], "nonfinite"),
]  # fmt: skip


def jobs(libs: set[str], only: str | None, seeds: tuple[int, ...] = (0,)) -> list[Job]:
    """The set: each healthy run once per seed in `seeds`, each fault once (seed 0)."""
    out = []
    if "backflip" in libs:
        if only != "faults":
            for algo, env, steps, settings in BACKFLIP_HEALTHY:
                for s in seeds:
                    out.append(Job("backflip", algo, env, steps or 0, settings=settings, seed=s))
        if only != "healthy":
            for fault, env, steps, settings, rule in BACKFLIP_FAULTS:
                out.append(Job("backflip", "ppo", env, steps, fault, rule, settings))
            for algo, fault, env, steps, settings, rule in BACKFLIP_FAULTS_OFFPOLICY:
                out.append(Job("backflip", algo, env, steps, fault, rule, settings))
    if "sb3" in libs:
        if only != "faults":
            for algo, env, steps in SB3_HEALTHY:
                out += [Job("sb3", algo, env, steps, seed=s) for s in seeds]
        if only != "healthy":
            for algo, fault, steps, rule in SB3_FAULTS:
                out.append(Job("sb3", algo, "CartPole-v1", steps, fault, rule))
    if "cleanrl" in libs:
        if only != "faults":
            for script, env, steps, args in CLEANRL_HEALTHY:
                for s in seeds:
                    job = Job("cleanrl", script, env, steps, settings={"args": args}, seed=s)
                    out.append(job)
        if only != "healthy":
            for script, fault, steps, args, rule in CLEANRL_FAULTS:
                job = Job("cleanrl", script, "CartPole-v1", steps, fault, rule, {"args": args})
                out.append(job)
    # the short fault runs first, then the healthy ones, longest first within each library
    return sorted(out, key=lambda j: (j.fault is None, -j.steps))


# --- running one job ------------------------------------------------------------------------------


def run_job(job: Job, cache: Path, cleanrl: Path | None, cleanrl_python: str) -> dict:
    folder = cache / job.key
    if (folder / "done.json").exists():
        return json.loads((folder / "done.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if job.lib == "backflip":
        cmd = [sys.executable, "-m", "backflip", "train", job.algo, "--env", job.env,
               "--seed-list", str(job.seed), "--no-progress", "--json", "--no-ask",
               "--home", str(folder / "home")]  # fmt: skip
        if job.steps:
            cmd += ["--steps", str(job.steps)]
        for k, v in job.settings.items():
            cmd += ["--set", f"{k}={v}"]
        env["PYTHONPATH"] = str(ROOT)
    elif job.lib == "sb3":
        cmd = [sys.executable, __file__, "--_sb3", json.dumps(asdict(job)), str(folder / "tb")]
        env["PYTHONPATH"] = str(ROOT)
    else:
        if cleanrl is None:
            raise SystemExit("CleanRL runs need --cleanrl PATH (a checkout of its scripts)")
        script = cleanrl / "cleanrl" / f"{job.algo}.py"
        cmd = [cleanrl_python, __file__, "--_cleanrl", str(script), job.env, job.fault or "",
               "--seed", str(job.seed + 1), "--total-timesteps", str(job.steps), "--no-cuda",
               *job.settings.get("args", [])]  # fmt: skip
        env["PYTHONPATH"] = str(cleanrl)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder)
    (folder / "stdout.log").write_text(proc.stdout[-200_000:])
    (folder / "stderr.log").write_text(proc.stderr[-200_000:])
    done = {"job": asdict(job), "returncode": proc.returncode, "seconds": time.time() - t0}
    if proc.returncode != 0 and job.fault is None:
        print(f"  {job.key} FAILED (exit {proc.returncode}): {proc.stderr[-600:]}", flush=True)
        return done  # not cached: a healthy run that crashed is retried next time
    (folder / "done.json").write_text(json.dumps(done))
    return done


def _sb3_child(spec: str, logdir: str) -> None:
    """Train one Stable-Baselines3 run (in a child process) with TensorBoard logging."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize

    import backflip.envs.faults as faults

    torch.set_num_threads(1)
    job = Job(**json.loads(spec))
    zoo = dict(SB3_ZOO.get((job.algo, job.env), {}))
    if job.fault:
        zoo = dict(SB3_ZOO[(job.algo, "CartPole-v1")])
        zoo.update(SB3_FAULT_SETTINGS.get(job.fault, {}))
    n_envs, normalize = zoo.pop("n_envs", 1), zoo.pop("normalize", False)
    kwargs = {}
    for k in ("net_arch", "log_std_init"):
        if k in zoo:
            kwargs.setdefault("policy_kwargs", {})[k] = zoo.pop(k)
    if "noise_std" in zoo:
        n = gym.make(job.env).action_space.shape[0]
        std = zoo.pop("noise_std")
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), std * np.ones(n))
    for k in ("learning_rate", "clip_range"):
        if isinstance(zoo.get(k), str) and zoo[k].startswith("lin_"):
            start = float(zoo[k][4:])
            zoo[k] = lambda progress, start=start: progress * start
    wrapper = ENV_FAULTS.get(job.fault)

    def make():
        e = gym.make(job.env)
        if wrapper:
            e = getattr(faults, wrapper[0])(e, *wrapper[1])
        return e

    venv = make_vec_env(make, n_envs=n_envs, seed=job.seed)
    if normalize:
        venv = VecNormalize(venv)
    cls = {"ppo": PPO, "a2c": A2C, "dqn": DQN, "sac": SAC, "td3": TD3}[job.algo]
    model = cls("MlpPolicy", venv, seed=job.seed, tensorboard_log=logdir, verbose=0,
                **zoo, **kwargs)  # fmt: skip
    log_interval = {"dqn": 4, "sac": 4, "td3": 4}.get(job.algo, 1)
    try:
        model.learn(job.steps, tb_log_name=job.algo.upper(), log_interval=log_interval)
        if not job.fault:  # the final policy's greedy return, as backflip's final evaluation
            from stable_baselines3.common.evaluation import evaluate_policy

            mean, _ = evaluate_policy(model, venv, n_eval_episodes=10, deterministic=True)
            (Path(logdir).parent / "final.json").write_text(json.dumps({"greedy": mean}))
    except (ValueError, RuntimeError) as e:
        if not (job.fault or "").startswith("NaN"):
            raise
        print(f"SB3 stopped with NaN rewards: {type(e).__name__}: {e}")
    finally:
        model.logger.close()
        venv.close()


def _cleanrl_launch(script: str, env_id: str, fault: str, *args: str) -> None:
    """Run one of CleanRL's scripts unchanged (in its own interpreter, `--cleanrl-python`), on
    `env_id` with a fault wrapper from backflip/envs/faults.py when `fault` names one: the env is
    registered under a new id, which the script then makes as it makes any id."""
    import importlib.util
    import runpy

    import gymnasium as gym

    if fault in ENV_FAULTS:
        path = ROOT / "backflip" / "envs" / "faults.py"
        spec = importlib.util.spec_from_file_location("backflip_faults", path)
        faults = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(faults)
        name, wargs = ENV_FAULTS[fault]
        base = env_id

        def make(**kw):
            return getattr(faults, name)(gym.make(base, **kw), *wargs)

        env_id = "Calib" + base.replace("-v", "Faulty-v")
        gym.register(env_id, entry_point=make)
    sys.argv = [script, "--env-id", env_id, *args]
    runpy.run_path(script, run_name="__main__")


# --- diagnosing and tables ----------------------------------------------------------------------


def diagnose_job(job: Job, cache: Path, done: dict) -> dict | None:
    from backflip.doctor import examine
    from backflip.doctor.series import progress
    from backflip.doctor.sources import event_dirs, resolve_target, tail_score

    folder = cache / job.key
    if job.lib == "backflip":
        home = folder / "home"
        runs = sorted(p.parent for p in home.glob("*/run.json"))  # ids begin with the time
        if not runs:
            return None
        target = resolve_target(str(runs[-1]), home)
        final = target.finals[0]
    else:
        tb = folder / ("tb" if job.lib == "sb3" else "runs")
        if not tb.exists():
            return None
        # a run stopped half-way (a killed calibration) left its log beside the finished one:
        # the finished run is the newest (SB3 numbers a new PPO_2, CleanRL's names end in time)
        logs = event_dirs(tb)
        if len(logs) > 1:
            tb = max(logs, key=lambda d: max(f.stat().st_mtime for f in d.glob("events.out.*")))
        target = resolve_target(str(tb), folder)
        final = tail_score(target.runs[0]) if target.runs else None
        if job.lib == "sb3" and target.runs:
            # SB3 logs only a rolling mean over 100 episodes: its last value is the latest
            # estimate (a short run's includes its random start); a greedy evaluation if made
            if (folder / "final.json").exists():
                final = json.loads((folder / "final.json").read_text())["greedy"]
            elif (s := target.runs[0].get("rollout/ep_return_mean")) is not None:
                final = float(s[1][-1])
    findings = [f.to_dict() for f in examine(target)]
    learned = final is not None and final >= LEARNED.get(job.env, float("inf"))
    p = progress(target.runs[0]) if target.runs else None
    return {
        **asdict(job),
        "key": job.key,
        "final": final,
        "learned": bool(learned),
        "improved": bool(p is not None and p.improved),
        "seconds": done.get("seconds"),
        "returncode": done.get("returncode"),
        "findings": [
            {k: f[k] for k in ("rule", "severity", "metric", "step", "message")} for f in findings
        ],
    }


LIB_NAMES = {"backflip": "backflip", "sb3": "SB3", "cleanrl": "CleanRL"}
ALGO_NAMES = {
    "sac_continuous_action": "sac",
    "td3_continuous_action": "td3",
    "ppo_continuous_action": "ppo",
}


def _algo(r):
    return ALGO_NAMES.get(r["algo"], r["algo"])


def _fmt(x):
    return "—" if x is None else f"{x:.4g}"


def _sev_list(findings, sev):
    c = collections.Counter(f["rule"] for f in findings if f["severity"] == sev)
    return ", ".join(f"`{r}`" + (f" ×{n}" if n > 1 else "") for r, n in sorted(c.items()))


def tables(results: list[dict]) -> str:
    lines = []
    healthy = [r for r in results if r["fault"] is None and r["learned"]]
    failed = [r for r in results if r["fault"] is None and not r["learned"]]
    faults = [r for r in results if r["fault"] is not None]
    lines += [
        "**Healthy runs** (one row per seed; findings by severity, with the rules that gave them):",
        "",
        "| library | algorithm | env | steps | seed | final return | error | warning | info |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in healthy:
        lines.append(
            f"| {LIB_NAMES[r['lib']]} | {_algo(r)} | {r['env']} | {r['steps'] or 'preset'} | "
            f"{r.get('seed', 0)} | {_fmt(r['final'])} | {_sev_list(r['findings'], 'error') or 0} | "
            f"{_sev_list(r['findings'], 'warning') or 0} | "
            f"{_sev_list(r['findings'], 'info') or 0} |"
        )
    errors = sum(f["severity"] == "error" for r in healthy for f in r["findings"])
    warn = collections.Counter(
        f["rule"] for r in healthy for f in r["findings"] if f["severity"] == "warning"
    )
    lines += [
        "",
        f"Errors on {len(healthy)} healthy runs: **{errors}**. Warnings per rule: "
        + (", ".join(f"`{k}` {v}" for k, v in sorted(warn.items())) or "none")
        + ".",
        "",
    ]
    if failed:
        lines += [
            "**Runs below the bar** (healthy settings, short budgets; one whose return did not "
            "improve must draw a warning or an error, one whose return improved needs none):",
            "",
            "| library | algorithm | env | steps | seed | final return (learned at) "
            "| return improved | error | warning |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in failed:
            lines.append(
                f"| {LIB_NAMES[r['lib']]} | {_algo(r)} | {r['env']} | {r['steps'] or 'preset'} "
                f"| {r.get('seed', 0)} | {_fmt(r['final'])} ({_fmt(LEARNED.get(r['env']))}) | "
                f"{'yes' if r.get('improved') else 'no'} | "
                f"{_sev_list(r['findings'], 'error') or 0} | "
                f"{_sev_list(r['findings'], 'warning') or 0} |"
            )
        lines.append("")
    lines += [
        "**Faults** (CartPole-v1 unless noted; found = the expected rule at warning or error):",
        "",
        "| library | algorithm | fault | expected rule | found as | other warnings and errors |",
        "|---|---|---|---|---|---|",
    ]
    found = 0
    for r in faults:
        sev = {f["rule"]: f["severity"] for f in r["findings"]}
        got = sev.get(r["expect"])
        ok = got in ("warning", "error")
        found += ok
        others = ", ".join(
            f"`{f['rule']}` ({f['severity']})"
            for f in r["findings"]
            if f["rule"] != r["expect"] and f["severity"] != "info"
        )
        where = "" if r["env"] == "CartPole-v1" else f" ({r['env']})"
        lines.append(
            f"| {LIB_NAMES[r['lib']]} | {_algo(r)} | {r['fault']}{where} | `{r['expect']}` | "
            f"{got if ok else 'MISSED' + (f' ({got})' if got else '')} | {others} |"
        )
    stuck = [r for r in failed if not r.get("improved")]  # a run that improved needs no flag
    detected = sum(any(f["severity"] in ("warning", "error") for f in r["findings"]) for r in stuck)
    lines += [
        "",
        f"Faults found: **{found} of {len(faults)}**"
        + (
            f"; runs below the bar whose return did not improve flagged: "
            f"**{detected} of {len(stuck)}**"
            if failed
            else ""
        )
        + ".",
    ]
    return "\n".join(lines)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--_sb3":
        return _sb3_child(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 1 and sys.argv[1] == "--_cleanrl":
        return _cleanrl_launch(*sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache", required=True, help="folder of finished runs (resumable)")
    p.add_argument("--cleanrl", help="a checkout of CleanRL (its cleanrl/ and cleanrl_utils/)")
    p.add_argument("--cleanrl-python", default=sys.executable)
    p.add_argument("--jobs", type=int, default=2, help="runs at once (one process each)")
    p.add_argument("--libs", default="backflip,sb3,cleanrl")
    p.add_argument("--only", choices=("healthy", "faults"))
    p.add_argument("--match", help="only jobs whose key contains one of these (comma-separated)")
    p.add_argument("--seeds", default="0", help="seeds of the healthy runs (comma-separated)")
    p.add_argument("--no-train", action="store_true", help="diagnose the cached runs only")
    p.add_argument("--markdown", help="write the tables here")
    args = p.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    seeds = tuple(int(x) for x in args.seeds.split(","))
    todo = jobs(set(args.libs.split(",")), args.only, seeds)
    if args.match:
        todo = [j for j in todo if any(m in j.key for m in args.match.split(","))]
    cleanrl = Path(args.cleanrl).resolve() if args.cleanrl else None
    print(f"{len(todo)} runs, cache {cache}, load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.time()
    done = {}
    if args.no_train:
        for j in todo:
            if (cache / j.key / "done.json").exists():
                done[j.key] = json.loads((cache / j.key / "done.json").read_text())
        # a run without done.json is left out of the tables: say which, and why, so that a run
        # stopped half-way (a killed calibration) is not mistaken for one the set does not hold
        unfinished = [j.key for j in todo if j.key not in done and (cache / j.key).exists()]
        never = [j.key for j in todo if j.key not in done and not (cache / j.key).exists()]
        if unfinished:
            print(f"started, not finished (left out): {', '.join(unfinished)}")
        if never:
            print(f"never run (left out): {', '.join(never)}")
    else:

        def one(j):
            d = run_job(j, cache, cleanrl, args.cleanrl_python)
            print(f"  {j.key}: exit {d['returncode']}, {d['seconds']:.0f} s", flush=True)
            return j.key, d

        with ThreadPoolExecutor(args.jobs) as pool:
            done = dict(pool.map(one, todo))
    results = []
    for j in todo:
        if j.key not in done:
            continue
        try:
            r = diagnose_job(j, cache, done[j.key])
        except Exception as e:  # noqa: BLE001 — an older doctor (PYTHONPATH=a checkout) may crash
            crash = {"rule": "doctor-crash", "severity": "error", "metric": None, "step": None,
                     "message": f"{type(e).__name__}: {str(e)[:120]}"}  # fmt: skip
            r = {**asdict(j), "key": j.key, "final": None, "learned": j.fault is None,
                 "improved": False, "findings": [crash]}  # fmt: skip
        if r is not None:
            results.append(r)
    (cache / "results.json").write_text(json.dumps(results, indent=1, default=str))
    text = tables(results)
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M')}, {(time.time() - t0) / 60:.1f} min, load "
        f"average {os.getloadavg()[0]:.1f}\n\n{text}"
    )
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
