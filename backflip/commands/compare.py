"""backflip compare SIDE SIDE... [--score auto|eval|train] [--json] [--plot FILE] [--format F]"""

from __future__ import annotations

from backflip.commands import add_format, add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare runs: IQM with CIs, probability of improvement, Welch test, verdict",
        description="Compare archived runs on their final greedy evaluation returns: each "
        "run's IQM [95%% CI], pairwise probability of improvement and Welch p-value, a one-line "
        "verdict, what makes the comparison fair (parameters, step and tuning budgets), and a "
        "figure of learning curves, final scores and score distributions. A side may also be a "
        "Stable-Baselines3 or CleanRL TensorBoard logdir (PATH or PATH@ENV; every side is then "
        "scored by its training episodes), or runs on several envs joined with + (scored across "
        "tasks on normalized scores).",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="SIDE",
        help="two or more: a run id, a TensorBoard logdir (PATH[@ENV]), or ID+ID... across "
        "envs; the first is A",
    )
    p.add_argument(
        "--score",
        choices=["auto", "eval", "train"],
        default="auto",
        help="eval: final greedy evaluation returns; train: mean of the last 100 training "
        "episodes; auto (default): eval unless a side is another library's logs",
    )
    p.add_argument(
        "--metric",
        default="return",
        help="curve to plot: return (training episodes) or a metrics.csv name (default return)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="figure path (default: compare/<A>-<B>.<format> in the archive)",
    )
    p.add_argument("--no-plot", action="store_true")
    add_format(p)
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.compare import compare_runs, format_report, plot_name
    from backflip.plots import figure_path
    from backflip.runs.archive import home_dir

    home = home_dir(args.home)
    plot = None
    if args.plot:
        plot = figure_path(args.plot, args.format)
    elif not args.no_plot:
        plot = figure_path(home / "compare" / plot_name(home, args.runs), args.format)
        plot.parent.mkdir(exist_ok=True)
    report = compare_runs(home, args.runs, args.metric, plot, score=args.score)
    if args.json:
        print_json(report)
    else:
        print(format_report(report))
    return 0
