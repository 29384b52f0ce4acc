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
