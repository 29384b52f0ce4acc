"""backflip ui [--home DIR] [--host H] [--port P] [--token T]"""

from __future__ import annotations

from backflip.commands import add_home, add_server
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "ui",
        help="browse the archive in a web browser (runs, curves, findings, videos, journal)",
        description="Serve a web UI over the run archive. Binds 127.0.0.1 unless --host says "
        "otherwise; any other address requires a token (printed in the URL).",
    )
    add_server(p)
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.runs.archive import home_dir
    from backflip.ui.app import serve

    home = home_dir(args.home)
    if not home.is_dir():
        raise UserError(f"no archive at {home} (set --home or BACKFLIP_HOME)")
    serve(home, host=args.host, port=args.port, token=args.token or None)
    return 0
