"""backflip tune ALGO --env ENV --trials N [--study NAME] [--seeds K] [--space FILE] ..."""

from __future__ import annotations

import sys

from backflip.commands import (
    add_backend,
    add_home,
    add_sets,
    backend_address,
    backend_of,
    print_json,
    workers,
)
from backflip.commands.train import _steps, add_seed_args, check_backend, seeds_from
from backflip.config import parse_sets

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="hyperparameter study on Optuna that respects seeds; ends in a preregistered plan",
        description="Search ALGO's hyperparameters on ENV with Optuna. Every trial is an "
        "archived run of several seeds, scored by the low end of the 95%% CI of its final "
        "evaluations' IQM, pruned on its evaluations only when its whole interval loses. The "
        "study lives in the archive (Optuna journal file): run the same command in more "
        "processes or machines to add workers. When the study is complete, its best "
        "configuration is frozen as a plan against the defaults on fresh seeds.",
    )
    p.add_argument("algo", help="algorithm (ppo, ...)")
    p.add_argument("--env", required=True, metavar="ENV_ID")
    p.add_argument(
        "--trials", type=int, required=True, metavar="N", help="the study's total number of trials"
    )
    p.add_argument(
        "--study", metavar="NAME", help="study name (default ALGO-ENV); the same name joins it"
    )
    add_seed_args(p)
    p.add_argument("--steps", type=_steps, metavar="N", help="env steps per seed")
    add_sets(p, "a setting fixed for every trial (repeatable)")
    p.add_argument(
        "--space",
        metavar="FILE",
        help="search space (YAML or TOML): key: {low, high, log, step} or {choices: [...]}",
    )
    p.add_argument(
        "--evals",
        type=int,
        default=4,
        metavar="E",
        help="evaluations along each trial's budget, reported to the pruner (default 4; 0: none)",
    )
    p.add_argument("--no-prune", action="store_true", help="run every trial to its end")
    p.add_argument(
        "--plan-seeds",
        type=int,
        default=10,
        metavar="N",
        help="fresh seeds per side in the plan that preregisters the best configuration (10)",
    )
    p.add_argument(
        "--workers",
        type=workers,
        metavar="K",
        help="seed processes at once (default: the trial's seeds, so they reach each "
        "evaluation together)",
    )
    add_backend(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.tune import format_summary, run_worker
    from backflip.runs.archive import home_dir

    address = backend_address(args)
    check_backend(backend_of(args), address)
    quiet = args.json
    summary = run_worker(
        home_dir(args.home, create=True),
        args.algo,
        args.env,
        args.trials,
        seeds_from(args),
        args.steps,
        parse_sets(args.sets),
        name=args.study,
        space_path=args.space,
        evals=args.evals,
        prune=not args.no_prune,
        plan_seeds=args.plan_seeds,
        workers=args.workers,
        backend=backend_of(args),
        address=address,
        progress=not args.no_progress and not quiet,
        argv=sys.argv,
        say=(lambda text: print(text, file=sys.stderr, flush=True))
        if quiet
        else (lambda text: print(text, flush=True)),
    )
    if quiet:
        print_json(summary)
    else:
        print(format_summary(summary))
    return 130 if summary["stopped"] else 0
