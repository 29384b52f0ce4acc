"""The doctor on human-paced preference runs: scripted people at several paces, 0 false errors.

A person's run waits for them (lockstep) or trains on while labels are owed (`prefs.max_debt`),
and a person may take breaks or end labeling early: none of that is a starved queue. This runs
real human-labeled MovingDot runs answered by `benchmarks/person_loop.py`'s scripted person at
each pace below, and the same run with the synthetic labeler, healthy and stalled after 12
labels (`prefs.stall_labels_after`, which the doctor must still call `prefs-starved`), then
`backflip doctor` on each. Prints one row per run (answers, seconds waited, wall time, greedy
true return, the doctor's errors and warnings) and writes them to `--out`.

    python benchmarks/person_paces.py [--labels 100] [--steps 100000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = "MovingDotLowDim-v0"

# name -> person_loop.py arguments; the expected doctor verdict on every one is "no error"
PACES = {
    "steady 0.3 s": ["--latency", "0.3"],
    "steady 3 s": ["--latency", "3"],
    "bursts: 25 answers, 60 s away": ["--latency", "0.5", "--burst", "25", "--away", "60"],
    "ends labeling after 40": ["--latency", "0.5", "--end-after", "40"],
    "trains on, debt ≤ 20, 2 s": ["--latency", "2", "--set", "prefs.max_debt=20"],
    "trains on, debt ≤ 20, 150 s away": [
        *("--latency", "0.5", "--burst", "40", "--away", "150"),
        *("--set", "prefs.max_debt=20"),
    ],
}
# name -> extra `backflip prefs train` settings for the synthetic labeler, and the rule expected
SYNTHETIC = {
    "synthetic": ([], None),
    "synthetic, stalls after 12": (["--set", "prefs.stall_labels_after=12"], "prefs-starved"),
}


def backflip(home: Path, *args: str) -> str:
    env = {**os.environ, "BACKFLIP_HOME": str(home), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "backflip", *args], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"backflip {' '.join(args)}: {out.stderr[-3000:]}")
    return out.stdout


def person(home: Path, name: str, args: list[str], labels: int, steps: int) -> dict:
    """One scripted person's run, in an archive of its own (the person finds its database there)."""
    t0 = time.monotonic()
    home = home / f"person-{list(PACES).index(name)}"
    cmd = [sys.executable, str(HERE / "person_loop.py"), "--home", str(home)]
    cmd += ["--labels", str(labels), "--steps", str(steps), *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{name}: {out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return {"pace": name, "labeler": "human", "expect": None, **row, "wall_s": wall(t0)}


def synthetic(home: Path, name: str, sets: list[str], labels: int, steps: int) -> dict:
    t0 = time.monotonic()
    rec = json.loads(
        backflip(
            home,
            *("prefs", "train", "ppo", "--env", ENV, "--labels", str(labels)),
            *("--steps", str(steps), "--seed-list", "0", "--no-progress", "--json"),
            *("--set", "prefs.reward_input=progress", *sets),
        )
    )
    seed = rec["seeds"][0]
    return {
        "pace": name,
        "labeler": "synthetic",
        "expect": SYNTHETIC[name][1],
        "id": rec["id"],
        "home": str(home),
        "labels": seed.get("labels"),
        "greedy_true_return": seed["final_eval_return"],
        "wall_s": wall(t0),
    }


def wall(t0: float) -> float:
    return round(time.monotonic() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labels", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once")
    ap.add_argument("--out", type=Path, default=HERE / "person_paces_results.json")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="person-paces-"))
    jobs = [(person, n, a) for n, a in PACES.items()]
    jobs += [(synthetic, n, s) for n, (s, _) in SYNTHETIC.items()]
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(f, home, n, a, args.labels, args.steps) for f, n, a in jobs]
        rows = []
        for i, fut in enumerate(futures, 1):
            rows.append(fut.result())
            done = time.monotonic() - t0
            eta = done / i * (len(futures) - i)
            print(f"[{i}/{len(futures)}] {rows[-1]['pace']} ({done:.0f} s, ETA {eta:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    for row in rows:
        found = json.loads(backflip(Path(row["home"]), "doctor", row["id"], "--json"))["findings"]
        row["errors"] = sorted({f["rule"] for f in found if f["severity"] == "error"})
        row["warnings"] = sorted({f["rule"] for f in found if f["severity"] == "warning"})
        expected = row["expect"]
        row["verdict"] = (
            ("caught" if expected in row["errors"] else "MISSED")
            if expected
            else ("quiet" if not row["errors"] else "FALSE ERROR")
        )
    print(f"{'run':<34} {'labels':>6} {'wait s':>7} {'wall s':>7} {'return':>7}  verdict, findings")
    for r in rows:
        wait = round(r["wait_s"], 1) if r.get("wait_s") is not None else None
        print(
            f"{r['pace']:<34} {r.get('labels') or 0:>6} {wait if wait is not None else '-':>7} "
            f"{r['wall_s']:>7} {r['greedy_true_return']:>7.1f}  {r['verdict']}: "
            f"errors {r['errors'] or '-'}; warnings {r['warnings'] or '-'}"
        )
    false = sum(r["verdict"] == "FALSE ERROR" for r in rows)
    missed = sum(r["verdict"] == "MISSED" for r in rows)
    print(f"false errors on healthy runs: {false}; faults missed: {missed}; archive {home}")
    args.out.write_text(json.dumps({"labels": args.labels, "steps": args.steps, "runs": rows},
                                   indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
