"""backflip ui [--home DIR] [--host H] [--port P] [--token T]"""

from __future__ import annotations

import os

from backflip.commands import add_home
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "ui",
        help="browse the archive in a web browser (runs, curves, findings, videos, journal)",
        description="Serve a web UI over the run archive. Binds 127.0.0.1 unless --host says "
        "otherwise; any other address requires a token (printed in the URL).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    p.add_argument(
        "--token",
        default=os.environ.get("BACKFLIP_UI_TOKEN"),
        help="require this token (default: $BACKFLIP_UI_TOKEN; generated for non-loopback hosts)",
    )
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.runs.archive import home_dir
    from backflip.ui.app import serve

    home = home_dir(args.home)
    if not home.is_dir():
        raise UserError(f"no archive at {home} (set --home or BACKFLIP_HOME)")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {args.port}")
    serve(home, host=args.host, port=args.port, token=args.token or None)
    return 0
