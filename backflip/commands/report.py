"""backflip report ID [ID...] --out DIR"""

from __future__ import annotations

from pathlib import Path

from backflip.commands import add_format, add_home

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write a static HTML report of runs (plots, tables, findings, videos); no server needed",
    )
    p.add_argument(
        "runs", nargs="+", metavar="ID", help="run ids (or prefixes, `last`, directories)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (created)")
    p.add_argument("--no-videos", action="store_true", help="do not copy videos into the report")
    add_format(
        p,
        "also write each run's curves and the comparison as figure files for a paper "
        "in <out>/figures/ (SVG and PDF with embedded fonts)",
    )
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:

    from backflip.report import write_report
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run

    home = home_dir(args.home)
    dirs = []
    for ref in args.runs:
        d = resolve_run(home, ref)
        if d not in dirs:
            dirs.append(d)
    out = Path(args.out)
    index = write_report(dirs, out, videos=not args.no_videos, home=home, figures=args.format)
    print(index)
    if args.format:
        print(f"figures: {out / 'figures'}")
    return 0
