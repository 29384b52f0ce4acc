"""backflip plan create FILE | plan run FILE | plan show NAME|FILE"""

from __future__ import annotations

from backflip.commands import add_backend, add_home, add_workers, print_json
from backflip.commands.train import check_backend

# the library is imported inside functions: `backflip --help` imports every command module


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
    r.add_argument("--json", action="store_true")
    add_home(r)
    r.set_defaults(func=run_run)
    s = verbs.add_parser("show", help="a plan's report (and whether its file was edited)")
    s.add_argument("plan", metavar="NAME|FILE")
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
    from backflip.runs.archive import home_dir

    check_backend(args.backend, args.address)
    reg, text = plan.run(
        home_dir(args.home, create=True),
        args.file,
        args.workers,
        not args.no_progress and not args.json,
        args.backend,
        args.address,
    )
    print_json(reg) if args.json else print(text)
    return 0


def run_show(args) -> int:
    from backflip.experiments import plan
    from backflip.runs.archive import home_dir

    reg, text = plan.show(home_dir(args.home), args.plan)
    print_json(reg) if args.json else print(text)
    return 0
