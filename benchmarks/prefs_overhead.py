"""What learning from preferences costs over the same algorithm on the true reward: agent steps
per second of `backflip prefs train` against `backflip train`, side by side on one env, the
runs alternating so that a machine's drift falls on both (issue: "preference runs nearly free").

Each pair: the algorithm on the true reward, then from preferences (synthetic labels, the
settings derived from the env, `--labels`), one seed, one worker; the figures are each seed's
own (status.json): steps/s from the seed's start (`sps`: a preference run's random clips and
pretraining included, the final evaluation left out), and steps over its whole wall time
(evaluation included); the rate once under way (over the policy's metrics rows, the first and
last left out: what a longer budget tends to); then where an agent step's time goes, from each
seed's own timers.

    python benchmarks/prefs_overhead.py [--env HalfCheetah-v5] [--algo ppo] [--steps 50000]
                                         [--labels 300] [--repeats 2]
                                         [--prefs-set prefs.mode=pipelined]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str], home: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "backflip", *args, "--home", str(home), "--seeds", "1",
         "--workers", "1", "--no-progress", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    record = json.loads(out)
    seed = record["seeds"][0]
    return {
        "sps": seed["sps"],
        "wall_sps": seed["steps"] / seed["wall_s"],
        "wall_s": seed["wall_s"],
        "steps": seed["steps"],
        "timers": timers(Path(record["dir"])),
        "steady_sps": steady_sps(Path(record["dir"])),
    }


def steady_sps(run_dir: Path) -> float:
    """Agent steps per second of wall time over the policy's metrics rows, the first and the
    last left out (the first follows a preference run's setup: random clips, the first labels,
    pretraining; the last includes the final evaluation): the rate once the run is under way."""
    wall: dict[int, float] = {}
    with open(run_dir / "seeds" / "0" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["name"] == "time/wall_s" and int(row["step"]) > 0:
                wall[int(row["step"])] = float(row["value"])
    steps = sorted(wall)[1:-1]
    if len(steps) < 2:
        return float("nan")
    return (steps[-1] - steps[0]) / (wall[steps[-1]] - wall[steps[0]])


def timers(run_dir: Path) -> dict[str, float]:
    """The seed's own timers summed over its rows (`time/*_s`: rollout, update, and in a
    preference run the learned reward, the segments and the ticks, which run inside the
    rollout's env steps), in seconds."""
    totals: dict[str, float] = {}
    with open(run_dir / "seeds" / "0" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            name = row["name"]
            if name.startswith("time/") and name.endswith("_s") and name != "time/wall_s":
                totals[name[5:-2]] = totals.get(name[5:-2], 0.0) + float(row["value"])
    return totals


def breakdown(plain: list[dict], prefs: list[dict]) -> str:
    """Microseconds per agent step (medians over the repeats) of each part, and what the
    preference run spends beyond the plain one that no timer of its own names (its env
    wrappers and bookkeeping around the step)."""

    def per_step(runs: list[dict], name: str) -> float:
        return statistics.median(r["timers"].get(name, 0.0) / r["steps"] * 1e6 for r in runs)

    lines = []
    for name in ("rollout", "update", "prefs_reward", "prefs_segments", "prefs_train"):
        a, b = per_step(plain, name), per_step(prefs, name)
        lines.append(f"  {name:15s} {a:8.1f} {b:8.1f} us/step")
    named = sum(per_step(prefs, n) for n in ("prefs_reward", "prefs_segments", "prefs_train"))
    rest = per_step(prefs, "rollout") - per_step(plain, "rollout") - named
    lines.append(
        f"  {'unnamed':15s} {'':8s} {rest:8.1f} us/step (the rollout's extra beyond the prefs timers)"
    )
    return "  part              plain    prefs\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="HalfCheetah-v5")
    ap.add_argument("--algo", default="ppo")
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--labels", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--prefs-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="for the preference run only (e.g. prefs.mode=pipelined)",
    )
    args = ap.parse_args()
    sets = [x for kv in args.set for x in ("--set", kv)]
    prefs_sets = [x for kv in args.prefs_set for x in ("--set", kv)]
    common = ["--env", args.env, "--steps", str(args.steps), *sets]
    home = Path(tempfile.mkdtemp(prefix="prefs-overhead-"))
    plain, prefs = [], []
    t0 = time.time()
    for i in range(args.repeats):
        plain.append(run(["train", args.algo, *common], home))
        prefs.append(
            run(
                ["prefs", "train", args.algo, *common, "--labels", str(args.labels), *prefs_sets],
                home,
            )
        )
        print(
            f"pair {i + 1}: true reward {plain[-1]['sps']:,.0f} steps/s "
            f"({plain[-1]['wall_s']:.0f} s), preferences {prefs[-1]['sps']:,.0f} steps/s "
            f"({prefs[-1]['wall_s']:.0f} s); under way {plain[-1]['steady_sps']:,.0f} and "
            f"{prefs[-1]['steady_sps']:,.0f}",
            flush=True,
        )
    med = {k: statistics.median for k in ("sps", "wall_sps", "steady_sps")}
    ratio = {k: med[k]([p[k] for p in prefs]) / med[k]([p[k] for p in plain]) for k in med}
    print(breakdown(plain, prefs))
    print(
        f"{args.algo} on {args.env}, {args.steps:,} steps, {args.labels} labels, "
        f"{args.repeats} pairs in {time.time() - t0:.0f} s: preferences / true reward = "
        f"{ratio['sps']:.2f} in training steps/s, {ratio['wall_sps']:.2f} over the whole wall time, "
        f"{ratio['steady_sps']:.2f} once under way (the policy's rows, setup and final evaluation "
        "left out)"
    )


if __name__ == "__main__":
    main()
