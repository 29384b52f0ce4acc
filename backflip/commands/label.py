"""backflip label RUN_ID: the labeling page of a preference run, a page of `backflip ui`."""

from __future__ import annotations

from backflip.commands import add_home, add_server
from backflip.errors import UserError
from backflip.runs.layout import PREFS_DB, seed_dir

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "label",
        help="label pairs of clips for a preference run in the browser",
        description="Serve `backflip ui` and print the URL of RUN_ID's labeling page (if a "
        "backflip ui of this archive already listens on the port, just print the URL). Works "
        "while the run trains (start it with --labeler human) and after. Loopback only by "
        "default; any other address requires a token (printed in the URL).",
    )
    p.add_argument("run", metavar="RUN_ID", help="run id, unique prefix, `last`, or a path")
    p.add_argument("--seed", type=int, help="which seed's queries (default: the run's first)")
    add_server(p)
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.prefs.db import preference_seeds
    from backflip.runs.archive import home_dir, load_run
    from backflip.runs.index import resolve_run
    from backflip.ui.app import running_ui, serve

    home = home_dir(args.home)
    run_dir = resolve_run(home, args.run)
    record = load_run(run_dir)
    seed = preference_seeds(record, args.seed)[0]
    if not (seed_dir(run_dir, seed) / PREFS_DB).exists():
        raise UserError(f"no preference database yet for seed {seed} (has the seed started?)")
    if run_dir.parent.resolve() != home.resolve():
        raise UserError(f"run {record['id']} is not in the archive {home} (use --home)")
    path = f"/label/{record['id']}/{seed}/"
    try:
        serve(home, host=args.host, port=args.port, token=args.token or None, path=path)
    except UserError:
        url = running_ui(home, args.host, args.port)
        if url is None:
            raise
        print(f"backflip ui already serves {home} there: label at {url.rstrip('/')}{path}")
    return 0
