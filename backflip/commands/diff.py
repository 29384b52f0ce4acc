"""backflip diff A B [--json] [--full] [--metric NAME]..."""

from __future__ import annotations

from backflip.commands import add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "diff",
        help="everything that differs between two runs, and where their metrics part",
        description="Compare two runs' resolved configs, code (commits, git diff, uncommitted "
        "patches), package versions, host and thread settings and seeds, and report per "
        "metric the first step at which B leaves A's seed band.",
    )
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="only these metrics (repeatable; `return` = training episodes); default: all",
    )
    p.add_argument("--full", action="store_true", help="print the whole code diff")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.diff import diff_runs, format_diff
    from backflip.runs.archive import home_dir

    report = diff_runs(home_dir(args.home), args.a, args.b, args.metric)
    if args.json:
        print_json(report)
    else:
        print(format_diff(report, full=args.full))
    return 0
