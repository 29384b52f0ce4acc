"""Thin CLI subcommands: argument parsing and printing only (see backflip/cli.py)."""

from __future__ import annotations

import json
import sys


def add_home(parser) -> None:
    parser.add_argument(
        "--home", metavar="DIR", help="archive root (default: $BACKFLIP_HOME or ./runs)"
    )


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


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
