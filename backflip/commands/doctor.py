"""backflip doctor TARGET [--json]"""

from __future__ import annotations

from backflip.commands import add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="diagnose a run (or SB3/CleanRL TensorBoard logs): what looks wrong and why",
        description="Check a run's metrics against the diagnostics catalog (docs/doctor.md). "
        "TARGET is a run id (or `last`), a run directory, a seed directory, a TensorBoard logdir "
        "written by Stable-Baselines3 or CleanRL, or a folder of several runs of one "
        "configuration (then seed-level findings too). Exit status 0 even with findings; 2 "
        "when the target can't be read.",
    )
    p.add_argument("target", metavar="TARGET", help="run id, directory or TensorBoard logdir")
    p.add_argument("--json", action="store_true", help='{"target": ..., "findings": [...]}')
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.doctor import RULES, diagnose_target
    from backflip.doctor.report import full_report
    from backflip.runs.archive import home_dir

    target, findings = diagnose_target(args.target, home_dir(args.home))
    found = [f.to_dict() for f in findings]
    if args.json:
        print_json({"target": args.target, "findings": found})
    else:
        print(full_report(target, found, len(RULES)))
    return 0
