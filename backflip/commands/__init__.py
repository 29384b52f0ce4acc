"""Thin CLI subcommands: argument parsing and printing only (see backflip/cli.py).

`backflip --help` imports every module here to build its parser, so each imports the library
(NumPy, torch, SciPy, Flask, ...) inside the function that runs the command, not at the top.
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


def add_format(parser, help: str | None = None) -> None:
    """`--format png|svg|pdf` for commands that draw a figure (`backflip.plots`)."""
    parser.add_argument(
        "--format",
        choices=["png", "svg", "pdf"],
        help=help
        or "figure format (default: the --plot file's suffix, else png); SVG and PDF embed "
        "their fonts, every figure is sized for a two-column paper",
    )


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
