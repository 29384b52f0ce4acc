"""Thin CLI subcommands: argument parsing and printing only (see backflip/cli.py).

`backflip --help` imports every module here to build its parser, so each imports the library
(even the config, which reads the algorithm registry) inside the function that runs the command.
"""

from __future__ import annotations

import sys

from backflip import jsonout


def add_home(parser) -> None:
    parser.add_argument(
        "--home", metavar="DIR", help="archive root (default: $BACKFLIP_HOME or ./runs)"
    )


def print_json(data) -> None:
    """`--json` output: strict JSON through `backflip.jsonout` (null, never NaN)."""
    sys.stdout.write(jsonout.dumps(data, indent=2) + "\n")


def add_backend(parser) -> None:
    parser.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="where seeds run: local processes (default) or a Ray cluster (extra: backflip[ray])",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster address (default: start a local one for this command)",
    )
