"""Calibrate the doctor: false alarms on healthy runs, detections on deliberately broken ones.

    python benchmarks/doctor_calibration.py --healthy --broken [--sb3] [--prefs] [--seeds 3]
        [--workers 2] [--home DIR]

--healthy  every registered algorithm with its defaults on CartPole-v1 (discrete) and Pendulum-v1
           (Box), `--seeds` seeds each, through `backflip train`; counts findings per rule and
           severity (every finding on a healthy run is a false alarm, except the info-level
           `seed-success` and `ep-len-constant` which report facts).
--broken   `backflip train ppo` with each injected fault; reports whether the expected rule fired.
--sb3      the same faults in Stable-Baselines3 PPO/A2C/DQN (TensorBoard logs), plus healthy SB3
           runs with rl-zoo settings; needs the `test` extra (stable-baselines3).
--prefs    healthy preference runs (`backflip prefs train ppo`, synthetic labels, each env's
           preset: MovingDotLowDim-v0, CartPoleFixedHorizon-v1, Pendulum-v1), `--seeds` seeds
           each; the doctor reads their true return (docs/doctor.md), so a finding about the
           return on them is a false alarm like any other.
Prints tables (and writes --out JSON). Figures depend on machine load: the throughput rule reads
steps per CPU-second, which other processes on a shared machine still perturb.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FACTS = {"seed-success", "ep-len-constant"}  # info findings that state facts, not alarms

# name, env, steps, settings, expected rule (any severity >= warning unless noted)
BROKEN = [
    ("negative entropy coefficient", "CartPole-v1", 30_000, ["ent_coef=-1"], "entropy-collapse"),
    ("learning rate 1e-8", "CartPole-v1", 30_000, ["lr=1e-8"], "entropy-flat"),
    ("learning rate 1e-8 (Box)", "Pendulum-v1", 40_960, ["lr=1e-8"], "entropy-flat"),
    (
        "lr 0.01, clipping off",
        "CartPole-v1",
        30_000,
        ["lr=0.01", "clip=1e6", "max_grad_norm=0"],
        "kl-large",
    ),
    ("value coefficient 0", "CartPole-v1", 30_000, ["vf_coef=0"], "explained-variance"),
    ("rewards ×1000", "CartPole-v1", 30_000, ["env.reward_scale=1000"], "reward-scale"),
    (
        "observations ×1000+500",
        "CartPole-v1",
        30_000,
        ["env.obs_scale=1000", "env.obs_shift=500"],
        "obs-scale",
    ),
    (
        "NaN rewards from env step 1000",
        "CartPole-v1",
        30_000,
        ["env.nan_reward_at=1000"],
        "nonfinite",
    ),
    ("growing per-step work", "CartPole-v1", 20_000, ["env.slowdown=300"], "throughput-decline"),
]
SB3_BROKEN = {
    "ppo": [
        ("collapse", "entropy-collapse"),
        ("nolearn", "entropy-flat"),
        ("klblow", "kl-large"),
        ("vf0", "explained-variance"),
        ("rew1000", "reward-scale"),
        ("obs1000", None),
        ("nan", "nonfinite"),
        ("slow", "throughput-decline"),
    ],
    "a2c": [
        ("collapse", "entropy-collapse"),
        ("nolearn", "entropy-flat"),
        ("vf0", "explained-variance"),
        ("rew1000", "reward-scale"),
        ("nan", "nonfinite"),
        ("slow", "throughput-decline"),
    ],
    "dqn": [
        ("nolearn", "never-better"),
        ("rew1000", "reward-scale"),
        ("nan", "nonfinite"),
        ("slow", "throughput-decline"),
        ("eps", "epsilon-stuck"),
    ],
}
SB3_STEPS = {"ppo": 30_000, "a2c": 30_000, "dqn": 20_000}
NAN_AT = {"ppo": 100}  # NaN rewards while episodes are short (see tests/test_doctor_runs.py)
SB3_HEALTHY_STEPS = {"ppo": 100_000, "a2c": 200_000, "dqn": 50_000}
PREFS_ENVS = ("MovingDotLowDim-v0", "CartPoleFixedHorizon-v1", "Pendulum-v1")  # with presets


def backflip(home: Path, *args) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "BACKFLIP_HOME": str(home),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "backflip", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def train(home: Path, algo, env, *extra, command=("train",)) -> dict:
    proc = backflip(home, *command, algo, "--env", env, "--no-progress", "--json", *extra)
    try:  # --json: stdout holds only the run's JSON record (the "run ..." line goes to stderr)
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(proc.stdout + proc.stderr) from None


def tally(findings, table, key):
    for f in findings:
        table[(f["rule"], f["severity"])][key] += 1


def healthy(home, seeds, algos, out, workers=2, prefs=False):
    from backflip.algos import ALGOS, get_algo

    table = collections.defaultdict(collections.Counter)
    runs = []
    if prefs:  # preference runs: PPO on each preset env's learned reward
        jobs = [("ppo", env, ("prefs", "train"), "prefs ") for env in PREFS_ENVS]
    else:
        jobs = [
            (algo, env, ("train",), "")
            for algo in algos or list(ALGOS)
            for env, kind in (("CartPole-v1", "discrete"), ("Pendulum-v1", "box"))
            if kind in get_algo(algo).action_spaces
        ]
    for algo, env, command, prefix in jobs:
        t0 = time.time()
        rec = train(
            home, algo, env, "--seeds", str(seeds), "--workers", str(workers), command=command
        )
        key = f"{prefix}{algo}/{env}"
        tally(rec.get("findings", []), table, key)
        runs.append(
            {
                "run": key,
                "id": rec["id"],
                "minutes": (time.time() - t0) / 60,
                "finals": rec["results"].get("per_seed"),
                "errors": sum(f["severity"] == "error" for f in rec["findings"]),
            }
        )
        print(
            f"healthy {key}: {rec['id']}, per seed {rec['results'].get('per_seed')}, "
            f"{runs[-1]['errors']} errors, {runs[-1]['minutes']:.1f} min",
            flush=True,
        )
    keys = [r["run"] for r in runs]
    print(f"\nfindings on healthy runs ({seeds} seeds each; per series unless seed-level):")
    print(f"| rule | severity | {' | '.join(keys)} |")
    print("|---|---|" + "---|" * len(keys))
    for (rule, sev), counts in sorted(table.items()):
        note = " (fact)" if rule in FACTS else ""
        print(f"| `{rule}`{note} | {sev} | " + " | ".join(str(counts[k]) for k in keys) + " |")
    out["prefs" if prefs else "healthy"] = {
        "runs": runs,
        "findings": {f"{r}/{s}": dict(c) for (r, s), c in table.items()},
    }


def broken(home, out):
    rows = []
    for name, env, steps, sets, expected in BROKEN:
        args = ["--seeds", "1", "--steps", str(steps)]
        for s in sets:
            args += ["--set", s]
        rec = train(home, "ppo", env, *args)
        found = {f["rule"]: f["severity"] for f in rec.get("findings", [])}
        rows.append(
            {
                "fault": name,
                "id": rec["id"],
                "expected": expected,
                "severity": found.get(expected),
                "all": found,
            }
        )
        print(
            f"broken {name}: {rec['id']} expected {expected}: {found.get(expected)}; all {found}",
            flush=True,
        )
    print("\n| fault (backflip ppo) | expected rule | fired as | other findings |")
    print("|---|---|---|---|")
    for r in rows:
        others = ", ".join(f"{k} ({v})" for k, v in r["all"].items() if k != r["expected"])
        print(f"| {r['fault']} | `{r['expected']}` | {r['severity'] or 'MISSED'} | {others} |")
    out["broken"] = rows


def sb3(out, seeds):
    from backflip.doctor import diagnose
    from backflip.doctor.sources import load_tensorboard
    from tests.sb3_logs import train_sb3

    rows = []
    healthy_table = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as tmp:
        for algo, faults in SB3_BROKEN.items():
            for seed in range(seeds):
                folder = train_sb3(algo, Path(tmp), SB3_HEALTHY_STEPS[algo], seed=seed)
                found = [f.to_dict() for f in diagnose(load_tensorboard(folder))]
                tally(found, healthy_table, f"sb3-{algo}")
                print(
                    f"sb3 healthy {algo} seed {seed}: {[(f['rule'], f['severity']) for f in found]}",
                    flush=True,
                )
            for fault, expected in faults:
                folder = train_sb3(
                    algo, Path(tmp), SB3_STEPS[algo], fault=fault, nan_at=NAN_AT.get(algo, 1000)
                )
                found = {f.rule: f.severity for f in diagnose(load_tensorboard(folder))}
                rows.append(
                    {
                        "algo": algo,
                        "fault": fault,
                        "expected": expected,
                        "severity": found.get(expected),
                        "all": found,
                    }
                )
                print(
                    f"sb3 {algo} {fault}: expected {expected}: {found.get(expected)}; all {found}",
                    flush=True,
                )
    keys = [f"sb3-{a}" for a in SB3_BROKEN]
    print(f"\nfindings on healthy SB3 runs ({seeds} seeds each, rl-zoo settings):")
    print(f"| rule | severity | {' | '.join(keys)} |")
    print("|---|---|" + "---|" * len(keys))
    for (rule, sev), counts in sorted(healthy_table.items()):
        print(f"| `{rule}` | {sev} | " + " | ".join(str(counts[k]) for k in keys) + " |")
    print("\n| SB3 | fault | expected rule | fired as | other findings |")
    print("|---|---|---|---|---|")
    for r in rows:
        others = ", ".join(f"{k} ({v})" for k, v in r["all"].items() if k != r["expected"])
        print(
            f"| {r['algo']} | {r['fault']} | `{r['expected']}` | "
            f"{r['severity'] or ('—' if r['expected'] is None else 'MISSED')} | {others} |"
        )
    out["sb3"] = {
        "faults": rows,
        "healthy": {f"{r}/{s}": dict(c) for (r, s), c in healthy_table.items()},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--healthy", action="store_true")
    p.add_argument("--broken", action="store_true")
    p.add_argument("--sb3", action="store_true")
    p.add_argument("--prefs", action="store_true")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2, help="seed processes at once")
    p.add_argument("--sb3-seeds", type=int, default=1)
    p.add_argument("--algos", help="comma-separated (default: every registered algorithm)")
    p.add_argument("--home", help="archive for the runs (default: a temporary directory)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_avg_start": os.getloadavg()}
    home = Path(args.home or tempfile.mkdtemp(prefix="doctor-calibration-"))
    print(f"archive: {home}; load average at start {os.getloadavg()[0]:.1f}", flush=True)
    algos = args.algos.split(",") if args.algos else None
    if args.healthy:
        healthy(home, args.seeds, algos, out, args.workers)
    if args.prefs:
        healthy(home, args.seeds, algos, out, args.workers, prefs=True)
    if args.broken:
        broken(home, out)
    if args.sb3:
        sb3(out, args.sb3_seeds)
    out["load_avg_end"] = os.getloadavg()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
