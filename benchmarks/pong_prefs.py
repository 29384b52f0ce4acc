"""Pong from synthetic preferences for a fixed wall time: where does the true return get?

Runs `backflip prefs train ppo --env PongNoFrameskip-v4` (one seed, the CPU preset, or the
paper's with `--set device=cuda`) for `--minutes`, stopped by `max_wall_s` (the seed then
evaluates and finishes as at the end of its budget), and prints, every `--every` seconds while it
runs, a line from the seed's status and metrics:

    elapsed  phase or agent steps  true return (last 20 training games)  greedy eval  val acc
    corr  seg corr  labels  won shown

The true return is the game's score (-21 to 21): the synthetic labeler's reward is Pong's, the
policy never sees it. `val acc` is the reward model's accuracy on held-out labels; `corr` the
correlation of predicted with true returns over the last 20 games (nothing to rank once every
game ends 21-0), `seg corr` over the policy's last 1,000 segments, what the model ranks;
`won shown` how many labeled segments held a point won (the model learns scoring from those
alone). At the end the same columns are printed as a table over time and written to `--out` as
JSON. The run is archived under `--home` like any other (`backflip show`, `backflip ui`).

    python benchmarks/pong_prefs.py --minutes 90
    python benchmarks/pong_prefs.py --minutes 90 --set device=cuda      # the paper's preset
    python benchmarks/pong_prefs.py --minutes 90 --plain                # no preferences

`--plain` is the yardstick: `backflip train ppo` on the game's own reward with the preference
preset's budget and policy settings (the same learning-rate schedule), its true return read
from `rollout/ep_return_mean`. If PPO on the true reward does not get off −21 in the same wall
time, neither can PPO on a learned one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = {
    "eval/return_mean": "greedy eval",
    "reward_model/val_acc": "val acc",
    "reward_model/return_corr": "corr",
    "reward_model/segment_corr": "seg corr",
    "prefs/labels": "labels",
    "prefs/labeled_gains": "won shown",
}


def latest(metrics: Path, columns: dict) -> tuple[int, dict[str, tuple[int, float]]]:
    """The last step with a row, and the latest value of each of `columns` with its step."""
    last, values = 0, {}
    if not metrics.exists():
        return last, values
    with open(metrics) as f:
        next(f, None)
        for line in f:
            parts = line.rstrip("\n").split(",")
            if len(parts) != 4:
                continue  # a row being written
            step, _wall, name, value = parts
            last = max(last, int(step))
            if name in columns:
                values[columns[name]] = (int(step), float(value))
    return last, values


def line(elapsed: float, status: dict, step: int, values: dict) -> dict:
    row = {"elapsed_min": round(elapsed / 60, 1), "steps": step}
    row.update({k: v for k, (_, v) in values.items()})
    if status.get("phase"):
        row["phase"] = f"{status['phase']} {status.get('done', 0)}/{status.get('total', 0)}"
    return row


def fmt(row: dict) -> str:
    def num(key, digits=1):
        v = row.get(key)
        return "-" if v is None else f"{v:.{digits}f}"

    where = row.get("phase") or f"{row['steps']:,} steps"
    return (
        f"{row['elapsed_min']:6.1f} min  {where:42s} true {num('true return'):>6}  "
        f"eval {num('greedy eval'):>6}  val acc {num('val acc', 3):>6}  "
        f"corr {num('corr', 2):>5}  seg corr {num('seg corr', 2):>5}  "
        f"labels {num('labels', 0):>5}  won shown {num('won shown', 0):>4}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between lines")
    ap.add_argument("--eval-every", type=int, default=200_000, help="agent steps")
    ap.add_argument("--eval-episodes", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    ap.add_argument("--plain", action="store_true", help="PPO on the true reward, same budget")
    ap.add_argument("--home", type=Path, default=Path("runs"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/pong_prefs_results.json"))
    args = ap.parse_args()
    sets = [x for kv in args.sets for x in ("--set", kv)]
    sys.path.insert(0, str(ROOT))
    from backflip.prefs.presets import preset_for
    from backflip.returns import training_return

    # the game's score: the policy's own return with --plain, the pipeline's true return (the
    # policy's is the learned reward's) from preferences
    columns = {training_return(None if args.plain else {"prefs": {}}): "true return", **COLUMNS}

    budget = preset_for("PongNoFrameskip-v4")["steps"]
    what = "PPO on the true reward" if args.plain else "Pong from synthetic preferences"
    cmd = [
        sys.executable, "-m", "backflip", *([] if args.plain else ["prefs"]), "train", "ppo",
        "--env", "PongNoFrameskip-v4", "--seed-list", str(args.seed), "--no-progress", "--json",
        "--steps", str(budget),
        "--set", f"max_wall_s={args.minutes * 60}",
        "--set", f"eval_every={args.eval_every}",
        "--set", f"eval_episodes={args.eval_episodes}",
        *sets,
        "--home", str(args.home),
        "-m", f"benchmarks/pong_prefs.py: {what}, {args.minutes} min",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.time()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {' '.join(cmd[1:])}\n"
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run_dir = None
    history = []
    while proc.poll() is None:
        try:  # a line every --every seconds, and none left to wait for once the run ends
            proc.wait(timeout=min(args.every, 5.0) if run_dir is None else args.every)
            break
        except subprocess.TimeoutExpired:
            pass
        if run_dir is None:
            runs = sorted(args.home.glob("*/run.json"), key=lambda p: p.stat().st_mtime)
            fresh = [p.parent for p in runs if p.stat().st_mtime >= t0 - 1]
            run_dir = fresh[-1] if fresh else None
            if run_dir is None:
                continue
            print(f"run {run_dir.name} in {run_dir}", flush=True)
        seed_dir = run_dir / "seeds" / str(args.seed)
        try:
            status = json.loads((seed_dir / "status.json").read_text())
        except (OSError, ValueError):
            status = {}
        step, values = latest(seed_dir / "metrics.csv", columns)
        history.append(line(time.time() - t0, status, step, values))
        print(fmt(history[-1]), flush=True)
    out, err = proc.communicate()
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
        raise SystemExit(proc.returncode)
    record = json.loads(out)
    seed = record["seeds"][0]
    step, values = latest(Path(record["dir"]) / "seeds" / str(args.seed) / "metrics.csv", columns)
    history.append(line(time.time() - t0, {}, step, values))
    print(
        f"\nfinished: {seed.get('steps', 0):,} agent steps in {seed.get('wall_s', 0) / 60:.1f} min"
        f", final greedy eval {seed.get('final_eval_return')} "
        f"({seed.get('final_eval_returns')}); labels {seed.get('labels', '-')}; run {record['id']}"
    )
    print("\nover time:")
    rows = history[:: max(1, len(history) // 20)] + history[-1:]
    for i, row in enumerate(rows):
        if i == 0 or row != rows[i - 1]:  # the last poll and the end can be the same line
            print(fmt(row))
    args.out.write_text(
        json.dumps({"run": record["id"], "seed": seed, "history": history}, indent=2)
    )


if __name__ == "__main__":
    main()
