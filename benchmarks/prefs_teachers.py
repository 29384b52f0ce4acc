"""B-Pref teachers × query selection: normalized true return of preference runs.

On MovingDot (low-dim), fixed-horizon CartPole and Pendulum, one preference run per teacher and
query selection, each with the task's preset otherwise (labels, schedule, reward model, policy,
agent steps) and `prefs.mode=sync` (deterministic: the same command gives the same table). The
teachers are B-Pref's (Lee et al. 2021; `backflip/prefs/labelers.py`): oracle, stoc (β = 1),
mistake (ε = 0.1), skip (ε_skip = 0.1), equal (ε_equal = 0.1), myopic (γ = 0.9), given as
`--labeler bpref-NAME`. Each seed's score is

    (R − R_random) / (R_true − R_random)

R = the mean true return of 20 greedy evaluation episodes, R_true = the mean over PPO on the
true reward at the same agent steps with the same policy settings and seeds, R_random =
uniformly random actions (`benchmarks/prefs.py`). Each cell is the IQM of the seeds' scores with
its 95% stratified-bootstrap interval (`backflip.stats.aggregate`); the last table pools the
tasks (seeds resampled within each task).

    # the full table: 3 tasks × 6 teachers × 3 selections × 5 seeds (+ PPO on the true reward)
    python benchmarks/prefs_teachers.py --seeds 5 --workers 2
    # a smoke run: one task, 2 seeds, one worker, a tenth of the budget
    python benchmarks/prefs_teachers.py --tasks pendulum --seeds 2 --workers 1 --steps 10000

All the runs of a task share one pool of `--workers` seed processes. Runs are archived under
--home (tagged prefs-teachers); the results go to --out as JSON after each task, and a task
already there (with the same seeds, steps and labels) is not run again unless --redo; with
--redo and --teachers/--selections, the runs of those cells replace theirs and the other cells
stay. Each run also records how its queries were answered (skipped, equal, labeled). The tables
are printed as Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prefs import random_return  # benchmarks/prefs.py: R_random over 20 episodes

TASKS = {
    "movingdot": "MovingDotLowDim-v0",
    "cartpole": "CartPoleFixedHorizon-v1",
    "pendulum": "Pendulum-v1",
}
TEACHERS = ("oracle", "stoc", "mistake", "skip", "equal", "myopic")
SELECTIONS = ("random", "disagreement", "entropy")


def configs(env_id: str, args, home: Path) -> list[tuple[str, list[str], object, dict]]:
    """(name, argv, TrainConfig, launch notes) of every run of one task: PPO on the true
    reward first, then each teacher × selection, built by the CLI's own argument handling."""
    from backflip.cli import build_parser
    from backflip.commands.prefs import build
    from backflip.config import resolve
    from backflip.prefs.presets import PRESETS

    preset = PRESETS[env_id]
    steps = args.steps or preset["steps"]
    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    common = ["--seed-start", str(args.seed_start), "--seeds", str(args.seeds)]
    common += ["--steps", str(steps), "--set", "eval_episodes=20"]
    policy = preset["policy"].get("ppo", {})
    true_argv = ["train", "ppo", "--env", env_id, *common]
    true_argv += [x for k, v in policy.items() for x in ("--set", f"{k}={v}")]
    true_cfg = resolve("ppo", env_id, seeds, steps, dict(policy), {"eval_episodes": "20"})
    out = [("ppo-true-reward", true_argv, true_cfg, [])]
    for teacher in args.teachers.split(","):
        for selection in args.selections.split(","):
            argv = ["prefs", "train", "ppo", "--env", env_id, "--labeler", f"bpref-{teacher}"]
            argv += [*common, "--set", f"prefs.selection={selection}", "--set", "prefs.mode=sync"]
            if args.labels:
                argv += ["--labels", str(args.labels)]
            notes: list[str] = []
            cfg = build(build_parser().parse_args(argv), home, notes)
            out.append((f"{teacher}/{selection}", argv, cfg, notes))
    return out


def run_task(task: str, args, home: Path) -> dict:
    from backflip.launch import launch_runs
    from backflip.runs.archive import load_run

    env_id = TASKS[task]
    runs = configs(env_id, args, home)
    t0 = time.time()
    records = launch_runs(
        [cfg for _, _, cfg, _ in runs],
        home,
        ["python", "benchmarks/prefs_teachers.py", *sys.argv[1:]],
        messages=[f"prefs-teachers {task}: {name}" for name, *_ in runs],
        workers=args.workers,
        progress=not args.no_progress,
        tags=[["prefs-teachers", task, *name.split("/")] for name, *_ in runs],
        labels=[f"{task} {name}" for name, *_ in runs],
        notes=[said for *_, said in runs],
    )
    by_name = {}
    for (name, argv, _, _), record in zip(runs, records, strict=True):
        record = load_run(Path(record["dir"]))
        by_name[name] = {
            "run": record["id"],
            "argv": argv,
            "status": record["status"],
            "returns": [s.get("final_eval_return") for s in record["seeds"]],
            "wall_s": [s.get("wall_s") for s in record["seeds"]],
            "answers": answers(Path(record["dir"])),
        }
    r_random = random_return(env_id)
    true = [r for r in by_name["ppo-true-reward"]["returns"] if r is not None]
    r_true = float(np.mean(true)) if true else None
    score(by_name, r_random, r_true)
    first = runs[1][2] if len(runs) > 1 else runs[0][2]
    return {
        "env": env_id,
        "options": options(args),
        "steps": first.steps,
        "seeds": list(first.seeds),
        "labels": runs[1][2].prefs.labels if len(runs) > 1 else None,
        "R_random": r_random,
        "R_true": r_true,
        "runs": by_name,
        "total_s": time.time() - t0,
    }


def score(runs: dict, r_random: float, r_true: float | None) -> None:
    """Each run's per-seed normalized returns, (R − R_random) / (R_true − R_random)."""
    for entry in runs.values():
        entry["scores"] = [
            None if r is None or r_true is None else (r - r_random) / (r_true - r_random)
            for r in entry["returns"]
        ]


def answers(run_dir: Path) -> dict:
    """How the run's queries were answered, over its seeds: skipped, equal (label 0.5), other."""
    from backflip.prefs.db import PreferenceDB

    total = {"skipped": 0, "equal": 0, "labeled": 0}
    for path in sorted(run_dir.glob("seeds/*/prefs.sqlite")):
        db = PreferenceDB(path)
        try:
            counts = db.counts()
        finally:
            db.close()
        total["skipped"] += counts["skipped"]
        total["equal"] += counts["equal"]
        total["labeled"] += counts["labeled"] - counts["equal"]
    return total


def merged(old: dict | None, new: dict, args) -> dict:
    """A task's results after running some of its teachers again with the same options: the new
    runs replace their cells, the others stay."""
    if old is None or old.get("options") != options(args):
        return new
    both = {**new, "runs": {**old["runs"], **new["runs"]}}
    score(both["runs"], both["R_random"], both["R_true"])
    return both


def options(args) -> dict:
    """What makes two invocations' results of a task the same measurement."""
    return {
        "seeds": list(range(args.seed_start, args.seed_start + args.seeds)),
        "steps": args.steps,
        "labels": args.labels,
    }


def cell(scores: list) -> str:
    from backflip.stats import aggregate

    x = [s for s in scores if s is not None]
    if not x:
        return "–"
    value, low, high = aggregate(x)["iqm"]
    if not np.isfinite(low):
        return f"{value:.2f}"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def tables(results: dict, teachers: list[str], selections: list[str]) -> str:
    """Markdown: per task, teacher rows × selection columns of IQM [95% CI]; then all tasks."""
    from backflip.stats import aggregate

    lines = []
    header = "| teacher | " + " | ".join(selections) + " |"
    rule = "|---|" + "---|" * len(selections)
    for res in results.values():
        lines += [
            f"**{res['env']}** ({res['steps']:,} agent steps, {res['labels']} labels, seeds "
            f"{res['seeds'][0]}–{res['seeds'][-1]}; R_random {res['R_random']:.1f}, "
            f"R_true {res['R_true'] if res['R_true'] is None else round(res['R_true'], 1)})",
            "",
            header,
            rule,
        ]
        for t in teachers:
            row = [cell(res["runs"].get(f"{t}/{s}", {}).get("scores", [])) for s in selections]
            lines.append(f"| {t} | " + " | ".join(row) + " |")
        said = []
        for t in teachers:
            counts = [res["runs"].get(f"{t}/{s}", {}).get("answers") for s in selections]
            counts = [c for c in counts if c]
            n = sum(sum(c.values()) for c in counts)
            if n:
                skipped, equal = (sum(c[k] for c in counts) for k in ("skipped", "equal"))
                said.append(f"{t} {skipped / n:.1%} skipped, {equal / n:.1%} equal")
        if said:
            lines += ["", f"Answers, over the {len(selections)} selections: " + "; ".join(said)]
        lines.append("")
    if len(results) > 1:
        lines += [f"**All {len(results)} tasks** (stratified bootstrap over seeds within tasks)"]
        lines += ["", header, rule]
        for t in teachers:
            row = []
            for s in selections:
                cols = [
                    res["runs"].get(f"{t}/{s}", {}).get("scores", []) for res in results.values()
                ]
                if any(len(c) == 0 or None in c for c in cols) or len({len(c) for c in cols}) > 1:
                    row.append("–")
                    continue
                value, low, high = aggregate(np.array(cols, dtype=float).T)["iqm"]
                row.append(f"{value:.2f} [{low:.2f}, {high:.2f}]")
            lines.append(f"| {t} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--teachers", default=",".join(TEACHERS))
    ap.add_argument("--selections", default=",".join(SELECTIONS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, help="agent steps per run (default: each task's preset)")
    ap.add_argument("--labels", type=int, help="labels per run (default: each task's preset)")
    ap.add_argument("--home", default="runs")
    ap.add_argument("--out", default="benchmarks/prefs_teachers_results.json")
    ap.add_argument("--redo", action="store_true", help="run tasks already in --out again")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    from backflip import jsonout

    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    for task in args.tasks.split(","):
        if task not in TASKS:
            ap.error(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
        old = results.get(task)
        same = old is not None and old.get("options") == options(args)
        if (
            same
            and not args.redo
            and all(
                f"{t}/{s}" in old["runs"]
                for t in args.teachers.split(",")
                for s in args.selections.split(",")
            )
        ):
            print(f"{task}: in {out} already (--redo to run it again)", flush=True)
            continue
        results[task] = merged(old, run_task(task, args, home), args)
        out.write_text(jsonout.dumps(results, indent=2) + "\n")
        print(f"{task}: {results[task]['total_s']:.0f} s", flush=True)
    shown = {t: results[t] for t in args.tasks.split(",") if t in results}
    print(tables(shown, args.teachers.split(","), args.selections.split(",")))


if __name__ == "__main__":
    main()
