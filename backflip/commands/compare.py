"""backflip compare ID ID... [--json] [--plot FILE]"""

from __future__ import annotations

from pathlib import Path

from backflip.commands import add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare runs: IQM with CIs, probability of improvement, Welch test, verdict",
        description="Compare archived runs on their final greedy evaluation returns: each "
        "run's IQM [95%% CI], pairwise probability of improvement and Welch p-value, a one-line "
        "verdict, what makes the comparison fair (parameters, step and tuning budgets), and a "
        "PNG of learning curves and final-score distributions.",
    )
    p.add_argument("runs", nargs="+", metavar="ID", help="two or more runs; the first is A")
    p.add_argument(
        "--metric",
        default="return",
        help="curve to plot: return (training episodes) or a metrics.csv name (default return)",
    )
    p.add_argument(
        "--plot", metavar="FILE", help="PNG path (default: compare-<A>-<B>.png in the archive)"
    )
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.compare import compare_runs, format_report
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run

    home = home_dir(args.home)
    plot = None
    if args.plot:
        plot = Path(args.plot)
    elif not args.no_plot:
        names = "-".join(resolve_run(home, r).name for r in args.runs[:3])
        plot = home / "compare" / f"{names}.png"
        plot.parent.mkdir(exist_ok=True)
    report = compare_runs(home, args.runs, args.metric, plot)
    if args.json:
        print_json(report)
    else:
        print(format_report(report))
    return 0
