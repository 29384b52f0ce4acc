"""Learning from preferences: normalized true return against the same algorithm on the true reward.

For each task: R_random (uniform random actions), R_true (the algorithm, PPO by default, on the
true reward with the same policy settings and agent steps), and the preference run (synthetic
labels, the preset's label budget) on 3 seeds; each return is the mean over 20 greedy evaluation
episodes. The score is

    (R - R_random) / (R_true - R_random)        (R_true: mean over the PPO seeds)

and the target is >= 0.9 on every seed. Wall time is each seed's own (status.json), which
includes the random-policy phase, reward-model pretraining and evaluation.

    python benchmarks/prefs.py [--tasks movingdot,cartpole,pendulum] [--seeds 3] [--workers 2]
    python benchmarks/prefs.py --algo sac --tasks pendulum --seeds 6     # off-policy (PEBBLE)
    python benchmarks/prefs.py --tasks movingdot84 --workers 1            # from 84x84 frames
    python benchmarks/prefs.py --tasks movingdot84 --seeds 1 --set epochs=4 --set prefs.labels=300

`--set KEY=VALUE` (repeatable) tries settings other than the preset's: `prefs.*` keys go to the
preference run only, every other key to both runs (so the policy settings stay the same);
`--steps` overrides the budget of both.

Runs are archived under $BACKFLIP_HOME (default ./runs); results also go to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from backflip.jsonout import dumps

TASKS = {
    "movingdot": "MovingDotLowDim-v0",
    "cartpole": "CartPoleFixedHorizon-v1",
    "pendulum": "Pendulum-v1",
    "movingdot84": "MovingDot84-v0",
}


def preset_for(env_id: str, algo: str) -> tuple[int, int, dict]:
    """(agent steps, labels, policy settings) of the preference preset for `algo` on `env_id`
    (`backflip/prefs/presets.py`; an algorithm's entry may override the budget and labels)."""
    from backflip.prefs.presets import PRESETS

    preset = PRESETS[env_id]
    policy = dict(preset["policy"].get(algo, {}))
    steps = policy.pop("steps", None) or preset["steps"]
    labels = {**preset["prefs"], **policy.pop("prefs", {})}["labels"]
    return steps, labels, policy


def random_return(env_id: str, episodes: int = 20) -> float:
    from backflip.envs import make_vec
    from backflip.seedrun import evaluate

    envs = make_vec(env_id, episodes, evaluation=True)
    envs.action_space.seed(0)
    rets, _ = evaluate(lambda o: envs.action_space.sample(), envs, episodes, seed=500)
    return float(rets.mean())


def launch(args_list: list[str], home: Path) -> dict:
    """Run the real CLI in-process, return the run record (from its --json output)."""
    import contextlib
    import io

    from backflip.cli import main
    from backflip.runs.archive import load_run

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main([*args_list, "--home", str(home), "--no-progress", "--json"])
    text = out.getvalue()
    record = json.loads(text)  # --json: stdout holds only the record ("run ..." is on stderr)
    return load_run(Path(record["dir"]))


def per_seed(record: dict) -> tuple[list[float], list[float]]:
    rets = [s.get("final_eval_return", float("nan")) for s in record["seeds"]]
    walls = [s.get("wall_s", float("nan")) for s in record["seeds"]]
    return rets, walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--algo", default="ppo", help="the policy's algorithm (ppo, sac, ...)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="agent steps (default: the preset's)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for both runs (prefs.KEY: the preference run only)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--mode", default=None, help="prefs.mode for the preference runs (default: the CLI's)"
    )
    ap.add_argument("--home", default="runs")
    ap.add_argument("--out", default="benchmarks/prefs_results.json")
    args = ap.parse_args()
    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    results = {}
    for task in args.tasks.split(","):
        env_id = TASKS[task]
        steps, labels, policy = preset_for(env_id, args.algo)
        steps = args.steps or steps
        labels = next(
            (int(kv.split("=", 1)[1]) for kv in args.set if kv.startswith("prefs.labels=")), labels
        )
        common = ["--seeds", str(args.seeds), "--seed-start", str(args.seed_start)]
        common += ["--workers", str(args.workers), "--steps", str(steps)]
        sets = [x for k, v in policy.items() for x in ("--set", f"{k}={v}")]
        sets += ["--set", "eval_episodes=20"]
        both = [x for kv in args.set if not kv.startswith("prefs.") for x in ("--set", kv)]
        only_prefs = [x for kv in args.set if kv.startswith("prefs.") for x in ("--set", kv)]
        r_random = random_return(env_id)
        t0 = time.time()
        true_run = launch(["train", args.algo, "--env", env_id, *common, *sets, *both], home)
        true_rets, true_walls = per_seed(true_run)
        pref_run = launch(
            [
                "prefs", "train", args.algo, "--env", env_id, "--labels", str(labels),
                *common, "--set", "eval_episodes=20", *both, *only_prefs,
                *(["--set", f"prefs.mode={args.mode}"] if args.mode else []),
            ],
            home,
        )  # fmt: skip
        pref_rets, pref_walls = per_seed(pref_run)
        r_true = float(np.mean(true_rets))
        scores = [(r - r_random) / (r_true - r_random) for r in pref_rets]
        results[task] = {
            "env": env_id,
            "algo": args.algo,
            "steps": steps,
            "labels": labels,
            "settings": args.set,
            "R_random": r_random,
            "R_true_per_seed": true_rets,
            "R_true": r_true,
            "true_reward_wall_s": true_walls,
            "R_prefs_per_seed": pref_rets,
            "score_per_seed": scores,
            "prefs_wall_s": pref_walls,
            "prefs_run": pref_run["id"],
            "true_run": true_run["id"],
            "total_s": time.time() - t0,
        }
        ok = f"{sum(x >= 0.9 for x in scores)} of {len(scores)} seeds >= 0.9"
        print(
            f"{args.algo} {task:10s} {env_id:24s} steps {steps:,} labels {labels}: "
            f"R_random {r_random:.1f}, "
            f"R_true {r_true:.1f} {np.round(true_rets, 1).tolist()}, "
            f"prefs {np.round(pref_rets, 1).tolist()} -> scores {np.round(scores, 2).tolist()} "
            f"[{ok}], wall/seed {np.round(pref_walls, 0).tolist()} s "
            f"(on the true reward {np.round(true_walls, 0).tolist()} s)",
            flush=True,
        )
    Path(args.out).write_text(dumps(results, indent=2))


if __name__ == "__main__":
    main()
