"""Same seed, same numbers across a refactor: a fixed case set run by the code at two commits,
each case's metrics (timing and system rows aside), episodes, final greedy evaluation and final
weights compared exactly.

Each commit is checked out in a temporary git worktree and run through its own CLI (`python -m
backflip train ...` with that tree first on PYTHONPATH, one seed, no warm server), into its own
archive; a resumed case is interrupted (SIGINT after its first periodic checkpoint) and resumed
before it is compared. A case that differs prints which part differs first; a difference the
refactor meant (a preference run's learned reward after a change to it) is explained in the
record, not hidden.

    python benchmarks/same_numbers.py --before 136a5cc [--after HEAD] [--cases ppo,sac,...]
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["--seeds", "1", "--seed-start", "7", "--no-progress", "--set", "eval_episodes=3"]
# name: argv after `backflip`; each small enough for seconds on a 2-core machine
CASES: dict[str, list[str]] = {
    "ppo": ["train", "ppo", "--env", "CartPole-v1", "--steps", "8192"],
    "a2c": ["train", "a2c", "--env", "CartPole-v1", "--steps", "8000"],
    "vpg": ["train", "vpg", "--env", "CartPole-v1", "--steps", "8000"],
    "ppo-pendulum": ["train", "ppo", "--env", "Pendulum-v1", "--steps", "8192"],
    "dqn": ["train", "dqn", "--env", "CartPole-v1", "--steps", "3000"],
    "ddpg": ["train", "ddpg", "--env", "Pendulum-v1", "--steps", "1500"],
    "td3": ["train", "td3", "--env", "Pendulum-v1", "--steps", "1500"],
    "sac": ["train", "sac", "--env", "Pendulum-v1", "--steps", "1500"],
    "cem": ["train", "cem", "--env", "CartPole-v1", "--steps", "5000"],
    "ppo-resumed": [
        "train", "ppo", "--env", "CartPole-v1", "--steps", "40960", "--set", "epochs=2",
        "--set", "checkpoint_every=4096",
    ],
    "prefs-ppo-pendulum": [
        "prefs", "train", "ppo", "--env", "Pendulum-v1", "--steps", "6000", "--labels", "60",
    ],
    # rounds beside the policy: in a thread before the forked rounds, in a forked process after
    "prefs-ppo-pendulum-pipelined": [
        "prefs", "train", "ppo", "--env", "Pendulum-v1", "--steps", "6000", "--labels", "60",
        "--set", "prefs.mode=pipelined",
    ],
}  # fmt: skip
# timing, the machine's state, and the preference database's bytes on disk (its write-ahead log
# grows with the number of commits, not with what is stored)
IGNORED = ("time/", "sys/", "prefs/db_mb")
WALL = ("_per_s", "_s", "/sps", "seconds_since_label")  # wall-time rates and durations


def worktree(ref: str, where: Path) -> Path:
    path = where / ref.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), ref],
        check=True,
        capture_output=True,
    )
    return path


def run_case(tree: Path, home: Path, argv: list[str], resumed: bool) -> Path:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "BACKFLIP_HOME": str(home),
        "BACKFLIP_WARM": "0",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "backflip", *argv, *COMMON]
    if not resumed:
        subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True)
    else:
        proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and not list(home.glob("*/seeds/*/checkpoints/step_*.pt")):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=300)
        (run,) = [p for p in home.iterdir() if (p / "run.json").exists()]
        subprocess.run(
            [sys.executable, "-m", "backflip", "resume", run.name, "--no-progress"],
            env=env, cwd=tree, check=True, capture_output=True,
        )  # fmt: skip
    (run,) = [p for p in home.iterdir() if (p / "run.json").exists()]
    (seed,) = [p for p in (run / "seeds").iterdir()]
    return seed


def metrics(path: Path) -> list[tuple]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))[1:]
    return [
        (r[0], r[2], r[3])
        for r in rows
        if len(r) == 4 and not r[2].startswith(IGNORED) and not r[2].endswith(WALL)
    ]


def compare(a: Path, b: Path) -> str | None:
    """None when the two seeds' numbers are identical, else what differs first."""
    import json

    import torch

    ma, mb = metrics(a / "metrics.csv"), metrics(b / "metrics.csv")
    names_a, names_b = {m[1] for m in ma}, {m[1] for m in mb}
    added = ""
    if names_a != names_b:  # metrics one side logs and the other does not: the common ones
        added = f" (metrics only before: {sorted(names_a - names_b)}, only after: "
        added += f"{sorted(names_b - names_a)}; the common ones compared)"
        ma = [m for m in ma if m[1] in names_b]
        mb = [m for m in mb if m[1] in names_a]
    if ma != mb:  # which series differ: a storage figure alone, or the learning itself
        series: dict[str, list] = {}
        for side in (ma, mb):
            for step, name, value in side:
                series.setdefault(name, [[], []])[side is mb].append((step, value))
        differ = sorted(n for n, (x, y) in series.items() if x != y)
        return f"metrics differ in {len(differ)} of {len(series)} series: {differ[:8]}{added}"
    if (a / "episodes.csv").read_text() != (b / "episodes.csv").read_text():
        return "episodes differ"
    sa, sb = (json.loads((p / "status.json").read_text()) for p in (a, b))
    if sa.get("final_eval_returns") != sb.get("final_eval_returns"):
        return f"final evaluation differs: {sa.get('final_eval_returns')} vs {sb.get('final_eval_returns')}"
    wa = torch.load(a / "checkpoints" / "final.pt", weights_only=False)
    wb = torch.load(b / "checkpoints" / "final.pt", weights_only=False)

    def tensors(obj, prefix=""):
        if isinstance(obj, torch.Tensor):
            yield prefix, obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                yield from tensors(v, f"{prefix}/{k}")

    ta, tb = dict(tensors(wa.get("state", wa))), dict(tensors(wb.get("state", wb)))
    for k in sorted(set(ta) & set(tb)):
        if ta[k].shape != tb[k].shape or not torch.equal(ta[k], tb[k]):
            return f"weights differ: {k}"
    if set(ta) != set(tb):
        return f"checkpoint keys differ: {sorted(set(ta) ^ set(tb))[:4]}{added}"
    return f"identical{added}" if added else None


def _sps(seed: Path) -> float | None:
    import json

    return json.loads((seed / "status.json").read_text()).get("sps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="same-numbers-"))
    trees = {side: worktree(ref, where / side) for side, ref in (("before", args.before),
                                                                 ("after", args.after))}  # fmt: skip
    same = 0
    names = list(dict.fromkeys(args.cases.split(",")))  # a case once: each has its own archive
    try:
        for name in names:
            t0 = time.time()
            seeds = {}
            for side, tree in trees.items():
                home = where / "homes" / side / name
                home.mkdir(parents=True)
                seeds[side] = run_case(tree, home, CASES[name], resumed=name.endswith("resumed"))
            diff = compare(seeds["before"], seeds["after"])
            same += diff is None or diff.startswith("identical")
            sps = {side: _sps(seed) for side, seed in seeds.items()}
            speed = ""
            if sps["before"] and sps["after"]:  # training steps/s, run after run on one machine
                speed = f"; steps/s {sps['before']:,.0f} -> {sps['after']:,.0f}"
                speed += f" ({sps['after'] / sps['before']:.2f}x)"
            print(f"{name:20s} {'identical' if diff is None else diff}  ({time.time() - t0:.0f} s"
                  f"{speed})", flush=True)  # fmt: skip
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)  # fmt: skip
    print(f"{same} of {len(names)} cases identical: {args.before} -> {args.after}")


if __name__ == "__main__":
    main()
