"""backflip report ID [ID...] [--out DIR]"""

from __future__ import annotations

from pathlib import Path

from backflip.commands import add_format, add_home
from backflip.runs.layout import REPORTS

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write a static HTML report of runs (plots, tables, findings, videos); no server needed",
    )
    p.add_argument(
        "runs", nargs="+", metavar="ID", help="run ids (or prefixes, `last`, directories)"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder to write (created; default: reports/ID in the archive, out of git's way)",
    )
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
    out = Path(args.out) if args.out else default_out(home, dirs)
    index = write_report(dirs, out, videos=not args.no_videos, home=home, figures=args.format)
    print(index)
    if args.format:
        print(f"figures: {out / 'figures'}")
    return 0


def default_out(home: Path, dirs: list[Path]) -> Path:
    """reports/<id> in the archive (reports/<first id>+<n> for n more runs): beside the runs it
    shows, and ignored by git with them."""
    name = dirs[0].name + (f"+{len(dirs) - 1}" if len(dirs) > 1 else "")
    return home / REPORTS / name
