"""An Atari game (Pong, Enduro) from preferences for a fixed wall time: where does the true
return get?

Runs `backflip prefs train ppo --env GAME` (one seed, the CPU preset, or the paper's with
`--set device=cuda`) for `--minutes`, stopped by `max_wall_s` (the seed then evaluates and
finishes as at the end of its budget), and prints, every `--every` seconds while it runs, a line
from the seed's status and metrics:

    elapsed  phase or agent steps  true return (last 20 training games)  greedy eval  val acc
    corr  seg corr  labels  gains shown

The true return is the game's score (Pong: -21 to 21; Enduro: cars passed, less cars that pass
you): the synthetic labeler's reward is the game's, the policy never sees it. `val acc` is the
reward model's accuracy on held-out labels; `corr` the correlation of predicted with true returns
over the last 20 games (nothing to rank once every game ends 21-0), `seg corr` over the policy's
last 1,000 segments, what the model ranks; `gains shown` how many labeled segments held a
positive reward (a point won, a car passed: the model learns scoring from those alone). At the
end the same columns are printed as a table over time and written to `--out` as JSON. The run is
archived under `--home` like any other (`backflip show`, `backflip ui`).

    python benchmarks/atari_prefs.py --minutes 90                       # Pong, the oracle
    python benchmarks/atari_prefs.py --env enduro --minutes 60
    python benchmarks/atari_prefs.py --minutes 90 --set device=cuda     # the paper's preset
    python benchmarks/atari_prefs.py --minutes 90 --plain               # no preferences
    python benchmarks/atari_prefs.py --seed 2 --minutes 180 --stop-steps 1000000  # equal steps
    python benchmarks/atari_prefs.py --env enduro --minutes 60 --person-labels 300

`--plain` is the yardstick: `backflip train ppo` on the game's own reward with the preference
preset's budget and policy settings (the same learning-rate schedule), its true return read
from `rollout/ep_return_mean`. If PPO on the true reward does not get off its floor in the same
wall time, neither can PPO on a learned one.

`--person-labels N` is the workflow of docs/preferences.md ("A person, then a copy of them") with
a scripted person in the person's place: a short `--labeler human` run (`--person-steps`) whose
queries the person answers through the run's database, as the labeling page does, preferring the
clip with the higher true return and wrong `--person-error` of the time (Ibarz et al. 2018's
people made 5-10% mistakes), "equal" on ties, until N answers, when they end labeling ("train on
with the labels I gave"); then the timed run with `--labeler fitted:RUN`, a simulated copy of
them fitted by `backflip prefs fit-teacher` (whose output is printed). The clock (`--minutes`)
is the long run's.
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
    "prefs/labeled_gains": "gains shown",
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
        f"labels {num('labels', 0):>5}  gains shown {num('gains shown', 0):>4}"
    )


GAMES = {"pong": "PongNoFrameskip-v4", "enduro": "EnduroNoFrameskip-v4"}


def scripted_person(args, env_id: str, env: dict) -> str:
    """A short `--labeler human` run answered by a scripted person (see the module's docstring);
    returns its run id for `--labeler fitted:RUN`."""
    import numpy as np

    from backflip.prefs.db import PreferenceDB

    home = args.home
    before = set(home.glob("*/seeds/*/prefs.sqlite"))
    cmd = [
        sys.executable, "-m", "backflip", "prefs", "train", "ppo", "--env", env_id,
        "--labeler", "human", "--labels", str(args.person_labels),
        "--steps", str(args.person_steps), "--seed-list", str(args.seed), "--no-progress",
        "--json", "--home", str(home),
        "-m", f"benchmarks/atari_prefs.py: a scripted person, wrong {args.person_error:.0%}",
    ]  # fmt: skip
    print(f"{time.strftime('%H:%M:%S')}: the scripted person: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while not (fresh := [q for q in home.glob("*/seeds/*/prefs.sqlite") if q not in before]):
        if proc.poll() is not None:
            raise SystemExit(proc.stderr.read()[-3000:])
        time.sleep(0.2)
    db = PreferenceDB(fresh[0])
    rng = np.random.default_rng(1000 + args.seed)
    answers = mistakes = 0
    t0 = time.time()
    while proc.poll() is None and answers < args.person_labels:
        pending = db.pending(1)
        if not pending:
            time.sleep(0.05)
            continue
        qid, left, right = pending[0]
        rl, rr = db.segment(left).true_return, db.segment(right).true_return
        choice = "equal" if rl == rr else "left" if rl > rr else "right"
        if choice != "equal" and rng.random() < args.person_error:
            choice = "right" if choice == "left" else "left"
            mistakes += 1
        try:
            db.answer(qid, choice, "scripted", shown_at=time.time() - 2.0)
            answers += 1
        except KeyError:  # labeling ended or the query went away
            continue
        if answers % 50 == 0:
            print(f"  {answers} answers ({mistakes} wrong) in {time.time() - t0:.0f} s", flush=True)
    db.set_meta(labels_ended_at=time.time(), labels_ended_by="scripted")
    db.close()
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    run = json.loads(out)["id"]
    print(f"  {answers} answers, {mistakes} wrong on purpose; run {run}", flush=True)
    fit = subprocess.run(
        [sys.executable, "-m", "backflip", "prefs", "fit-teacher", run, "--home", str(home)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    print(fit.stdout, fit.stderr, flush=True)
    if fit.returncode != 0:  # e.g. every answer a tie: nothing to fit a copy to
        raise SystemExit(f"no simulated copy of the scripted person (run {run}): see above")
    return run


def find_run(home: Path, t0: float, message: str) -> Path | None:
    """The run this script launched: made since `t0` with its message (another benchmark may be
    launching beside it in the same home)."""
    for path in home.glob("*/run.json"):
        try:
            if (
                path.stat().st_mtime >= t0 - 1
                and json.loads(path.read_text())["message"] == message
            ):
                return path.parent
        except (OSError, ValueError, KeyError):
            continue  # being written
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="pong", help="pong, enduro or a full Atari env id")
    ap.add_argument("--minutes", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--stop-steps", type=int, default=0,
        help="stop at this many agent steps (`max_steps`: the budget's schedule, equal steps)",
    )  # fmt: skip
    ap.add_argument("--every", type=float, default=60.0, help="seconds between lines")
    ap.add_argument("--eval-every", type=int, default=200_000, help="agent steps")
    ap.add_argument("--eval-episodes", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    ap.add_argument("--plain", action="store_true", help="PPO on the true reward, same budget")
    ap.add_argument("--labeler", default=None, help="the preference run's (default: the oracle)")
    ap.add_argument("--person-labels", type=int, default=0, help="a scripted person first")
    ap.add_argument("--person-error", type=float, default=0.07)
    ap.add_argument("--person-steps", type=int, default=100_000)
    ap.add_argument("--home", type=Path, default=Path("runs"))
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/GAME_prefs_results")
    args = ap.parse_args()
    env_id = GAMES.get(args.env.lower(), args.env)
    game = env_id.split("NoFrameskip")[0].lower()
    out_path = args.out or Path(f"benchmarks/{game}_prefs_results.json")
    sets = [x for kv in args.sets for x in ("--set", kv)]
    sys.path.insert(0, str(ROOT))
    from backflip.prefs.presets import preset_for
    from backflip.returns import training_return

    # the game's score: the policy's own return with --plain, the pipeline's true return (the
    # policy's is the learned reward's) from preferences
    columns = {training_return(None if args.plain else {"prefs": {}}): "true return", **COLUMNS}

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    labeler = args.labeler
    if args.person_labels:
        labeler = f"fitted:{scripted_person(args, env_id, env)}"
    budget = preset_for(env_id)["steps"]
    what = (
        "PPO on the true reward" if args.plain
        else f"{game} from preferences ({labeler or 'the oracle'})"
    )  # fmt: skip
    message = f"benchmarks/atari_prefs.py: {what}, seed {args.seed}, {args.minutes} min"
    cmd = [
        sys.executable, "-m", "backflip", *([] if args.plain else ["prefs"]), "train", "ppo",
        "--env", env_id, "--seed-list", str(args.seed), "--no-progress", "--json",
        *(["--labeler", labeler] if labeler else []),
        "--steps", str(budget),
        "--set", f"max_wall_s={args.minutes * 60}",
        "--set", f"max_steps={args.stop_steps}",
        "--set", f"eval_every={args.eval_every}",
        "--set", f"eval_episodes={args.eval_episodes}",
        *sets,
        "--home", str(args.home),
        "-m", message,
    ]  # fmt: skip
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
            run_dir = find_run(args.home, t0, message)
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
    out_path.write_text(
        json.dumps(
            {
                "run": record["id"],
                "env": env_id,
                "labeler": labeler or "oracle",
                "plain": args.plain,
                "seed": seed,
                "history": history,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
