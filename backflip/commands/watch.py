"""backflip watch ID [--seed S] [--checkpoint C] [--out FILE]"""

from __future__ import annotations

from pathlib import Path

from backflip.commands import add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "watch",
        help="render a greedy episode of a checkpoint to an MP4 file and print its path",
    )
    p.add_argument("run", metavar="ID", help="run id, unique prefix, `last`, or a run directory")
    p.add_argument("--seed", type=int, help="which seed (default: the run's first)")
    p.add_argument(
        "--checkpoint",
        metavar="C",
        help="final (default), a step number, a file name in the seed's checkpoints/, or a path",
    )
    p.add_argument(
        "--out", metavar="FILE", help="where to write the MP4 (default: the seed's videos/)"
    )
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:

    from backflip.experiments.watch import watch
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run

    run_dir = resolve_run(home_dir(args.home), args.run)
    info = watch(run_dir, args.seed, args.checkpoint, Path(args.out) if args.out else None)
    if args.json:
        print_json(info)
    else:
        print(info["path"])
    return 0
