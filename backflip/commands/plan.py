"""backflip plan create FILE | plan run FILE | plan show NAME|FILE"""

from __future__ import annotations

from backflip.commands import (
    add_backend,
    add_format,
    add_home,
    add_workers,
    backend_address,
    backend_of,
    print_json,
)
from backflip.commands.train import check_backend

# the library is imported inside functions: `backflip --help` imports every command module


def add_plot_args(p) -> None:
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="rliable's figure of the configs on normalized scores (default: "
        "plans/<name>.<format> in the archive)",
    )
    p.add_argument("--no-plot", action="store_true")
    add_format(p)


def draw(home, reg, args) -> str | None:
    """The plan's figure, or why there is none (an env without reference scores), as a line."""
    from backflip.errors import UserError
    from backflip.experiments import plan
    from backflip.plots import figure_path

    if args.no_plot or not reg.get("report"):
        return None
    path = figure_path(
        args.plot or plan.registration_path(home, reg["name"]).with_suffix(""), args.format
    )
    try:
        return f"plot: {plan.figure(home, reg, path)}"
    except UserError as e:
        if args.plot:
            raise
        return f"no plot: {e}"


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="preregistered experiments: freeze a plan, run it on fresh seeds, report all",
        description="Freeze an experiment plan (configs, seeds, budget, metric, comparisons, "
        "success criterion) with its hash, run it on seeds never used on its envs, and report "
        "every run against the criterion. Edits after freezing or running are detected.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    c = verbs.add_parser("create", help="validate and freeze a plan file; pick fresh seeds")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--json", action="store_true")
    add_home(c)
    c.set_defaults(func=run_create)
    r = verbs.add_parser("run", help="run a frozen plan and report every run")
    r.add_argument("file", metavar="FILE")
    add_workers(r)
    add_backend(r)
    r.add_argument("--no-progress", action="store_true")
    add_plot_args(r)
    r.add_argument("--json", action="store_true")
    add_home(r)
    r.set_defaults(func=run_run)
    s = verbs.add_parser("show", help="a plan's report (and whether its file was edited)")
    s.add_argument("plan", metavar="NAME|FILE")
    add_plot_args(s)
    s.add_argument("--json", action="store_true")
    add_home(s)
    s.set_defaults(func=run_show)


def run_create(args) -> int:
    from backflip.experiments import plan
    from backflip.runs.archive import home_dir

    reg, text = plan.create(home_dir(args.home, create=True), args.file)
    print_json(reg) if args.json else print(text)
    return 0


def run_run(args) -> int:
    from backflip.experiments import plan
    from backflip.plots import figure_path
    from backflip.runs.archive import home_dir

    check_backend(backend_of(args), backend_address(args))
    if args.plot:
        figure_path(args.plot, args.format)  # a bad file name is refused before anything runs
    home = home_dir(args.home, create=True)
    reg, text = plan.run(
        home,
        args.file,
        args.workers,
        not args.no_progress and not args.json,
        backend_of(args),
        backend_address(args),
    )
    line = draw(home, reg, args)
    print_json(reg) if args.json else print(text + (f"\n{line}" if line else ""))
    return 0


def run_show(args) -> int:
    from backflip.experiments import plan
    from backflip.runs.archive import home_dir

    home = home_dir(args.home)
    reg, text = plan.show(home, args.plan)
    line = draw(home, reg, args)
    print_json(reg) if args.json else print(text + (f"\n{line}" if line else ""))
    return 0
