"""Atari PPO steps/s on this machine: plain, and with preferences, in one run of this script.

Runs, one after the other, each a real CLI run of one seed (one process, one torch thread):

- `baseline` (with `--baseline-code DIR`): `backflip train ppo --env ENV` from another checkout
  of backflip (e.g. the commit before this work), with that code's own defaults;
- `plain`: `backflip train ppo --env ENV` with this code (the PPO preset for ENV);
- `prefs`: `backflip prefs train ppo --env ENV` with this code and the preference preset
  (`--preset cpu`; its policy settings are the plain run's), synthetic labels.

`plain` and `prefs` run the preference preset's budget (so the learning-rate schedule and the
label schedule are the real ones) and stop after `--seconds` of training (`max_wall_s`; a
preference run gets its setup time on top: gathering, the initial labels and pretraining). The
steady rate is measured over the metrics rows of the policy phase after the first: agent steps
per second of wall time, and per second of the seed process's CPU time (`time/sps_cpu`), which
moves far less than wall time when other work shares the machine (`uptime` is printed). Where
the time went comes from the `time/*_s` metrics (docs/metrics.md).

    python benchmarks/atari_speed.py [--seconds 300] [--baseline-code /tmp/backflip-base]
    python benchmarks/atari_speed.py --env MovingDot84-v0 --prefs-set prefs.frame_stride=1

`--prefs-set KEY=VALUE` (repeatable) passes `--set KEY=VALUE` to the preference run only: the
same code with one preset setting changed (e.g. the preset before a change), against one plain run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(args: list[str], home: Path, code: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "BACKFLIP_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *args, "--no-progress", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=code,
    )
    if proc.returncode != 0:
        raise SystemExit(f"backflip {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def rows(run_dir: Path) -> list[tuple[int, dict[str, float]]]:
    """metrics.csv (long format) as [(step, {name: value})], one entry per row."""
    out: dict[tuple[int, str], dict[str, float]] = {}
    with open(run_dir / "seeds" / "0" / "metrics.csv") as f:
        next(f)
        for line in f:
            step, wall, name, value = line.rstrip("\n").split(",")
            out.setdefault((int(step), wall), {})[name] = float(value)
    return [(step, row) for (step, _), row in out.items()]


def summarize(name: str, record: dict) -> dict:
    run_dir = Path(record["dir"])
    table = rows(run_dir)
    policy = [(s, r) for s, r in table if s > 0 and r.get("time/sps", 0) > 0]
    pairs = list(itertools.pairwise(policy))  # the first policy row holds the envs' start
    steady = [r1 for _, (_, r1) in pairs]
    steps = sum(s1 - s0 for (s0, _), (s1, _) in pairs)
    wall = sum((s1 - s0) / r1["time/sps"] for (s0, _), (s1, r1) in pairs)
    cpu = sum((s1 - s0) / r1["time/sps_cpu"] for (s0, _), (s1, r1) in pairs)
    parts = {}
    for key in (
        "rollout",
        "update",
        "diagnostics",
        "prefs_reward",
        "prefs_segments",
        "prefs_train",
        "eval",
        "log",
    ):
        parts[key] = sum(r.get(f"time/{key}_s", 0.0) for r in steady)
    status = record["seeds"][0]
    setup = max((r.get("time/wall_s", 0.0) for s, r in table if s == 0), default=0.0)
    # reward-model updates before the policy starts (pretraining), for its rate
    pretrain = max((r.get("reward_model/updates", 0.0) for s, r in table if s == 0), default=0.0)
    return {
        "name": name,
        "run": record["id"],
        "steps": status.get("steps"),
        "overall_sps": status.get("sps"),
        "steady_steps": steps,
        "steady_sps": steps / wall if wall else float("nan"),
        "steady_sps_cpu": steps / cpu if cpu else float("nan"),
        "setup_s": setup,
        "pretrain_updates": pretrain,
        "parts_s": parts,
        "wall_s": status.get("wall_s"),
    }


def show(s: dict) -> None:
    p, n = s["parts_s"], max(1, s["steady_steps"])
    nested = p["prefs_reward"] + p["prefs_segments"] + p["prefs_train"]  # inside the rollout
    parts = {
        "env + policy forward": p["rollout"] - nested,
        "PPO update": p["update"],
        "diagnostics": p["diagnostics"],
        "learned reward": p["prefs_reward"],
        "segments": p["prefs_segments"],
        "labels + reward-model training": p["prefs_train"],
    }
    where = ", ".join(f"{k} {v / n * 1e3:.2f}" for k, v in parts.items() if v > 0)
    pretrain = f", {s['pretrain_updates']:.0f} pretraining updates" if s["pretrain_updates"] else ""
    print(
        f"{s['name']:9s} {s['steady_sps']:7.1f} steps/s wall, {s['steady_sps_cpu']:7.1f} per CPU "
        f"second (steady, {s['steady_steps']:,} steps; overall {s['overall_sps']:.1f}; setup "
        f"{s['setup_s']:.0f} s{pretrain}) [{s['run']}]\n          wall ms per agent step: {where}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--seconds", type=float, default=300.0, help="training time of each run")
    ap.add_argument("--setup-seconds", type=float, default=900.0, help="a preference run's cap")
    ap.add_argument("--baseline-code", type=Path, help="a checkout of backflip to compare with")
    ap.add_argument("--baseline-steps", type=int, default=4096)
    ap.add_argument("--prefs-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--home", type=Path, default=Path("/tmp/atari-speed-runs"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/atari_speed_results.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from backflip.prefs.presets import preset_for

    budget = preset_for(args.env)["steps"]
    common = ["--env", args.env, "--seeds", "1", "--set", "eval_episodes=1"]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results = []
    if args.baseline_code:
        rec = cli(
            ["train", "ppo", *common, "--steps", str(args.baseline_steps)],
            args.home,
            args.baseline_code,
        )
        results.append(summarize("baseline", rec))
        show(results[-1])
    timed = ["--steps", str(budget), "--set", f"max_wall_s={args.seconds}"]
    rec = cli(["train", "ppo", *common, *timed], args.home, ROOT)
    results.append(summarize("plain", rec))
    show(results[-1])
    prefs_timed = [
        "--steps",
        str(budget),
        "--set",
        f"max_wall_s={args.seconds + args.setup_seconds}",
        *(x for kv in args.prefs_set for x in ("--set", kv)),
    ]
    rec = cli(["prefs", "train", "ppo", *common, *prefs_timed], args.home, ROOT)
    results.append(summarize("prefs", rec))
    show(results[-1])
    by = {r["name"]: r for r in results}
    line = (
        f"prefs/plain: {by['prefs']['steady_sps'] / by['plain']['steady_sps']:.2f} wall, "
        f"{by['prefs']['steady_sps_cpu'] / by['plain']['steady_sps_cpu']:.2f} CPU"
    )
    if "baseline" in by:
        line += (
            f"; plain/baseline: {by['plain']['steady_sps'] / by['baseline']['steady_sps']:.2f} "
            f"wall, {by['plain']['steady_sps_cpu'] / by['baseline']['steady_sps_cpu']:.2f} CPU"
        )
    print(line + f"; load average at end {os.getloadavg()[0]:.2f}")
    args.out.write_text(json.dumps({"results": results, "summary": line}, indent=2))


if __name__ == "__main__":
    main()
