"""backflip bench [--quick] [--only ALGO[:ENV]]... [--docs FILE]"""

from __future__ import annotations

import os
from pathlib import Path

from backflip.commands import (
    add_backend,
    add_format,
    add_home,
    add_sets,
    add_workers,
    backend_address,
    backend_of,
    print_json,
)
from backflip.commands.train import check_backend
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="the benchmark battery: every algorithm on its reference envs, regressions flagged",
        description="Run every algorithm on its reference envs (5 seeds, fixed budgets), store "
        "the runs tagged `bench`, compare each with the previous battery (regression: "
        "P(old > new) > 0.75 with a CI excluding 0.5) and print a table; with --docs FILE, "
        "also put the table in FILE (its rows only: other pairs' rows stay).",
    )
    p.add_argument("--quick", action="store_true", help="a tenth of each budget (smoke battery)")
    p.add_argument(
        "--only",
        action="append",
        metavar="ALGO[:ENV]",
        help="run only these pairs (repeatable)",
    )
    p.add_argument(
        "--seeds", type=int, default=5, metavar="N", help="seeds per pair (default 5: keep it)"
    )
    add_sets(p, "change every config (a what-if battery: marked modified, never a baseline)")
    p.add_argument(
        "--docs",
        metavar="FILE",
        help="also write the table into this Markdown page (e.g. docs/benchmarks.md), between "
        "its battery markers, replacing only the rows of the pairs run (default: write nothing)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="figure of every algorithm across its envs on normalized scores (default: "
        "bench/<id>.<format> in the archive)",
    )
    p.add_argument("--no-plot", action="store_true")
    p.add_argument(
        "--baseline",
        metavar="FILE",
        help="compare with this battery instead of the archive's latest (a --write-baseline "
        "file: benchmarks/battery_full.json is the battery of docs/benchmarks.md)",
    )
    p.add_argument(
        "--write-baseline",
        metavar="FILE",
        help="also write this battery as a baseline file for later --baseline comparisons",
    )
    add_format(p)
    add_workers(p)
    add_backend(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.config import parse_sets
    from backflip.experiments.bench import (
        baseline_of,
        battery_figure,
        format_battery,
        read_baseline,
        run_battery,
        update_docs,
    )
    from backflip.plots import figure_path
    from backflip.runs.archive import home_dir, write_json
    from backflip.runs.provenance import cpu_model

    if args.seeds < 2:
        raise UserError("--seeds must be at least 2")
    check_backend(backend_of(args), backend_address(args))
    plot = figure_path(args.plot, args.format) if args.plot else None  # a bad name: before runs
    docs = check_docs(args.docs, parse_sets(args.sets)) if args.docs else None
    baseline = read_baseline(args.baseline, args.quick) if args.baseline else None
    if args.write_baseline:
        check_writable(args.write_baseline, "--write-baseline", parse_sets(args.sets))
    home = home_dir(args.home, create=True)
    battery = run_battery(
        home,
        quick=args.quick,
        only=args.only,
        seeds=args.seeds,
        overrides=parse_sets(args.sets),
        workers=args.workers,
        progress=not args.no_progress and not args.json,
        backend=backend_of(args),
        address=backend_address(args),
        baseline=baseline,
    )
    if args.write_baseline:
        write_json(Path(args.write_baseline), baseline_of(battery))
    if not args.no_plot and any(a["summary"].get("n") for a in battery["across_envs"]["algos"]):
        plot = plot or figure_path(home / "bench" / battery["id"], args.format)
        battery["plot"] = str(battery_figure(battery, plot))
    note = None
    if docs is not None:
        update_docs(docs, battery, f"{cpu_model()}, {os.cpu_count()} CPUs")
        note = f"updated {docs}: the rows of {len(battery['entries'])} pair(s)"
    if args.json:
        print_json(battery)
    else:
        print(format_battery(battery))
        if note:
            print(note)
        if battery.get("plot"):
            print(f"plot: {battery['plot']}")
    return 1 if battery["regressions"] else 0


def check_docs(path: str, overrides: dict) -> Path:
    """`--docs FILE`, checked before the battery runs: a what-if battery (`--set`) is never a
    benchmark figure, and the page must be a file that can be written."""
    return check_writable(
        path, "--docs", overrides, "a modified battery is never written to the docs"
    )


def check_writable(
    path: str,
    option: str,
    overrides: dict,
    modified: str = "a modified battery is never a baseline",
) -> Path:
    """A file `option` will write after the battery, checked before it runs."""
    if overrides:
        raise UserError(f"{option} with --set: {modified}")
    out = Path(path)
    if out.is_dir():
        raise UserError(f"{option} {path}: a directory, not a file")
    if not out.parent.is_dir():
        raise UserError(f"{option} {path}: folder {out.parent} does not exist")
    if not os.access(out if out.exists() else out.parent, os.W_OK):
        raise UserError(f"{option} {path}: not writable")
    return out
