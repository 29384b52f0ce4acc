"""A scripted person labeling a human-labeled MovingDot run through its database, without a browser.

The person is the one of `tests/ui/test_label_browser.py`: they prefer the clip whose dot *ends*
nearer the centre (the last frame shown), wrong `--error` of the time (seeded). They answer the
oldest pending query, as the labeling page shows it, through `PreferenceDB.answer` (what the
page's answer route calls), `--latency` seconds after it appears. The run is the real CLI
(`backflip prefs train ppo --labeler human ...`) in its own process, so it pauses for the person
exactly as it does for one at the page. A pace other than steady: `--burst N --away S` (away S
seconds after every N answers), `--end-after N` (the page's "train on with the labels I gave"
after N answers).

Prints the greedy true return, its normalized score against PPO on the true reward at the same
steps and seed (run alongside with `--reference`), the labels given, the seconds the seed waited
and the wall time.

    python benchmarks/person_loop.py --seed 0 --latency 0.3 [--reference] [--set prefs.max_debt=10]
        [--burst 20 --away 60] [--end-after 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from backflip.envs.moving_dot import CENTRE, HEIGHT, WIDTH
from backflip.prefs.db import PreferenceDB
from backflip.prefs.presets import PRESETS
from backflip.telemetry import read_metrics

ENV = "MovingDotLowDim-v0"


def random_return(env_id: str, episodes: int) -> float:
    """Mean return of a uniformly random policy over `episodes` evaluation starts (the runs'
    own number of evaluation episodes, so all three returns average the same starts)."""
    from backflip.envs import make_vec
    from backflip.seedrun import evaluate

    envs = make_vec(env_id, episodes, evaluation=True)
    envs.action_space.seed(0)
    rets, _ = evaluate(lambda o: envs.action_space.sample(), envs, episodes, seed=500)
    return float(rets.mean())


def end_distance(db: PreferenceDB, segment: int) -> float:
    x, y = db.segment(segment).obs[-1]
    return float(np.hypot(x * WIDTH - CENTRE[0], y * HEIGHT - CENTRE[1]))


def start(home: Path, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "BACKFLIP_HOME": str(home), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "backflip", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def record(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(err[-3000:])
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--labels", type=int, default=300)
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--latency", type=float, default=0.3, help="seconds from query to answer")
    ap.add_argument("--error", type=float, default=0.1, help="share of deliberately wrong answers")
    ap.add_argument("--burst", type=int, default=0, help="answers between breaks (0: none)")
    ap.add_argument("--away", type=float, default=0.0, help="seconds of each break")
    ap.add_argument("--end-after", type=int, default=0, help="end labeling after N answers")
    ap.add_argument("--set", action="append", default=[], help="extra prefs.* or policy settings")
    ap.add_argument("--reference", action="store_true", help="also run PPO on the true reward")
    ap.add_argument("--home", type=Path, default=None, help="archive (default: a temp dir)")
    args = ap.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="person-loop-"))
    sets = ["--set", "prefs.reward_input=progress"]
    for s in args.set:
        sets += ["--set", s]
    common = ["--steps", str(args.steps), "--seed-list", str(args.seed), "--no-progress", "--json"]
    person = ["prefs", "train", "ppo", "--env", ENV, "--labeler", "human"]
    before = set(home.glob("*/seeds/*/prefs.sqlite"))
    run = start(home, [*person, "--labels", str(args.labels), *sets, *common])
    ref = None
    if args.reference:  # the preset's policy settings, and the same --set of policy keys
        policy = [
            x for k, v in PRESETS[ENV]["policy"]["ppo"].items() for x in ("--set", f"{k}={v}")
        ]
        policy += [x for s in args.set if not s.startswith("prefs.") for x in ("--set", s)]
        ref = start(home, ["train", "ppo", "--env", ENV, *policy, *common])
    t0 = time.monotonic()

    def new_dbs() -> list[Path]:  # this run's database, not one of the archive's earlier runs
        return [p for p in home.glob("*/seeds/*/prefs.sqlite") if p not in before]

    while not new_dbs():
        if run.poll() is not None:
            raise SystemExit(run.stderr.read()[-3000:])
        time.sleep(0.1)
    folder = new_dbs()[0].parent
    db = PreferenceDB(folder / "prefs.sqlite")
    rng = np.random.default_rng(args.seed)
    seen: dict[int, float] = {}
    answers = mistakes = 0
    while run.poll() is None:
        pending = db.pending(1)
        if not pending:
            time.sleep(0.02)
            continue
        if args.end_after and answers >= args.end_after:  # the page's "train on with ..."
            db.set_meta(labels_ended_at=time.time(), labels_ended_by="scripted")
            break
        qid, left, right = pending[0]
        now = time.monotonic()
        seen.setdefault(qid, now)
        if now - seen[qid] < args.latency:
            time.sleep(args.latency - (now - seen[qid]))
            continue
        dl, dr = end_distance(db, left), end_distance(db, right)
        choice = "equal" if dl == dr else "left" if dl < dr else "right"
        if choice != "equal" and rng.random() < args.error:
            choice = "right" if choice == "left" else "left"
            mistakes += 1
        try:
            db.answer(qid, choice, "scripted", shown_at=time.time() - args.latency)
            answers += 1
            if args.burst and answers % args.burst == 0:
                time.sleep(args.away)
        except KeyError:  # labeling ended or the query went away
            pass
    wall = time.monotonic() - t0
    rec = record(run)
    m = read_metrics(folder / "metrics.csv")
    out = {
        "seed": args.seed,
        "latency_s": args.latency,
        "sets": args.set,
        "answers": answers,
        "mistakes": mistakes,
        "labels": rec["seeds"][0].get("labels"),
        "wait_s": m["prefs/wait_s"][1][-1] if "prefs/wait_s" in m else None,
        "wall_s": round(wall, 1),
        "greedy_true_return": rec["seeds"][0]["final_eval_return"],
        "home": str(home),
        "id": rec["id"],
    }
    if ref is not None:
        theirs = record(ref)["seeds"][0]["final_eval_return"]
        random = random_return(ENV, rec["config"]["run"]["eval_episodes"])
        out["ppo_true_reward"], out["random_policy"] = theirs, random
        out["normalized"] = (out["greedy_true_return"] - random) / (theirs - random)
    db.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
