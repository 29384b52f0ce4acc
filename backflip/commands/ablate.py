"""backflip ablate ALGO --env E --switch NAME [--switch ...] --seeds N"""

from __future__ import annotations

from backflip.commands.sweep import add_study_args, launch_study
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "ablate",
        help="turn design choices off one at a time and judge each claim with CIs",
        description="Run the default configuration and, for each named design choice, a run "
        "with it turned off (same seeds); report for each whether it helps, hurts, or the "
        "evidence is insufficient. Switch names: `backflip ablate ALGO --list`.",
    )
    add_study_args(p)
    p.add_argument(
        "--switch",
        action="append",
        default=[],
        metavar="NAME",
        help="a design choice to turn off (repeatable; `all`: every one that is on)",
    )
    p.add_argument("--list", action="store_true", help="list the algorithm's switches")
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.sweep import ablation_variants

    if args.list:
        from backflip.algos import get_algo

        spec = get_algo(args.algo)
        for name, off in getattr(spec.settings, "ABLATIONS", {}).items():
            print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in off.items()))
        return 0
    if not args.switch:
        raise UserError("name at least one --switch (or --list to see them)")

    def make(spec, base, file_values, sets, seeds):
        return ablation_variants(spec, base.flat(), args.switch), []

    return launch_study(args, "ablate", make)
