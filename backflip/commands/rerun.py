"""backflip rerun ID: the same config and seeds, as a new run linked to the original."""

from __future__ import annotations

import sys

from backflip.commands import add_backend, add_home, add_workers, backend_address, backend_of
from backflip.commands.train import execute

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser("rerun", help="run an archived run again (same config and seeds)")
    p.add_argument("run", metavar="ID")
    add_workers(p)
    p.add_argument("-m", "--message", default=None, help="default: the original's message")
    add_backend(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.config import TrainConfig
    from backflip.envs import check_env_id
    from backflip.runs.archive import home_dir, load_run
    from backflip.runs.index import resolve_run

    home = home_dir(args.home, create=True)
    original = load_run(resolve_run(home, args.run))
    cfg = TrainConfig.from_dict(original["config"])
    # a custom env module: from here, else where the original found it or was launched from
    check_env_id(cfg.env_id, [*original.get("import_paths", []), original.get("cwd")])
    message = args.message if args.message is not None else original.get("message", "")
    return execute(
        cfg,
        home,
        sys.argv,
        message,
        args.workers,
        not args.no_progress,
        rerun_of=original["id"],
        tags=original.get("tags"),
        as_json=args.json,
        notes=original.get("notes"),
        backend=backend_of(args),
        address=backend_address(args),
    )
