"""backflip prefs check-reward RUN [--policy RUN2]: a saved reward model judged on a policy's play."""

from __future__ import annotations

from pathlib import Path

from backflip.commands import add_home, positive, print_json, probability
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(stages) -> None:
    c = stages.add_parser(
        "check-reward",
        help="compare a run's saved reward model with the true reward on a policy's play",
        description="Plays a saved policy (RUN's own, or --policy another run's, e.g. PPO on "
        "the true reward) on RUN's env, cuts its episodes into segments as the pipeline does, "
        "and compares r̂ summed over each segment with its true return: their correlation, and "
        "the r̂ sums of the segments that gained, lost or kept the true reward. What the model "
        "was never shown (a point won in Pong) shows up as a gain it does not reward "
        "(docs/preferences.md, 'Checking a reward model').",
    )
    c.add_argument(
        "run", metavar="RUN", help="the preference run (id, unique prefix, `last`, path)"
    )
    c.add_argument("--seed", type=int, metavar="S", help="its seed (default: the first)")
    c.add_argument(
        "--policy", metavar="RUN2", help="the run whose policy plays (default: RUN's own)"
    )
    c.add_argument(
        "--policy-seed", type=int, metavar="S", help="default: the same seed, or its first"
    )
    c.add_argument(
        "--checkpoint", metavar="C", help="final (default), a step number, a file name or a path"
    )
    c.add_argument("--steps", type=positive, default=10_000, metavar="N", help="default 10000")
    c.add_argument(
        "--epsilon",
        type=probability,
        default=0.0,
        metavar="E",
        help="probability of a random action (default 0: greedy, as evaluation)",
    )
    c.add_argument("--json", action="store_true")
    add_home(c)
    c.set_defaults(func=run)


def run(args) -> int:
    from backflip.prefs.check import check_reward, format_check
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run

    home = home_dir(args.home)
    run_dir = resolve_run(home, args.run)
    policy_dir = resolve_run(home, args.policy) if args.policy else None
    result = check_reward(
        Path(run_dir),
        args.seed,
        policy_dir,
        args.policy_seed,
        args.checkpoint,
        args.steps,
        args.epsilon,
    )
    if not result["segments"]:
        raise UserError(
            f"{args.steps} steps gave no whole segment of {result['segment_length']} steps: "
            "ask for more --steps"
        )
    if args.json:
        print_json(result)
    else:
        print(format_check(result))
    return 0
