"""Thin CLI subcommands: argument parsing and printing only (see backflip/cli.py).

`backflip --help` imports every module here to build its parser, so each imports the library
(even the config, which reads the algorithm registry) inside the function that runs the command.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from backflip import jsonout


def add_home(parser) -> None:
    parser.add_argument(
        "--home", metavar="DIR", help="archive root (default: $BACKFLIP_HOME or ./runs)"
    )


def _bounded(text: str, cast, low: float, high: float, what: str):
    """`cast(text)` if it lies in [low, high]; otherwise argparse's one-line error, "must be
    `what`", which argparse prefixes with the option's name."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
    return value


def workers(text: str) -> int:
    """`--workers K`: a whole number >= 1. Zero or a negative number would start no seed (or,
    taken as "the default", silently as many as there are CPUs): refused in one line."""
    return _bounded(text, int, 1, math.inf, "a whole number >= 1 (seed processes at once)")


def positive(text: str) -> int:
    """A count (`--steps N`): a whole number >= 1."""
    return _bounded(text, int, 1, math.inf, "a whole number >= 1")


def probability(text: str) -> float:
    """A probability (`--epsilon E`): a number in [0, 1]."""
    return _bounded(text, float, 0.0, 1.0, "a number from 0 to 1")


def port(text: str) -> int:
    """`--port P`: 0 (any free port) to 65535."""
    return _bounded(text, int, 0, 65535, "a whole number from 0 to 65535")


def add_server(parser) -> None:
    """`--host`, `--port` and `--token` of the commands that serve the web UI (`ui`, `label`)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port, default=8765, help="port (default 8765; 0: any free port)"
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("BACKFLIP_UI_TOKEN"),
        help="require this token (default: $BACKFLIP_UI_TOKEN; generated for non-loopback hosts)",
    )


def add_sets(parser, help: str, metavar: str = "KEY=VALUE") -> None:
    """`--set KEY=VALUE`, repeatable, into `args.sets` (checked later by `config.resolve`)."""
    parser.add_argument(
        "--set", action="append", default=[], metavar=metavar, dest="sets", help=help
    )


def add_workers(parser) -> None:
    parser.add_argument(
        "--workers",
        type=workers,
        metavar="K",
        help=f"seed processes at once, at least 1 (default: CPU count, {os.cpu_count()})",
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
        "--inline",
        action="store_true",
        help="run the seeds in this process, one after another: prints and breakpoint() in "
        "an algorithm reach this terminal (the same archive and numbers as a normal run)",
    )
    parser.add_argument(
        "--backend",
        choices=["local", "ray", "slurm"],
        default="local",
        help="where seeds run: local processes (default), a Ray cluster (extra: backflip[ray]) "
        "or Slurm job arrays through submitit (extra: backflip[slurm])",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster address (default: start a local one for this command)",
    )
    parser.add_argument(
        "--slurm",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --backend slurm: a submitit parameter (repeatable), e.g. partition=dev, "
        "timeout_min=120, mem_gb=4; cluster=local runs the tasks on this machine",
    )


def backend_of(args) -> str:
    """The backend `--backend` and `--inline` ask for (one line when they clash)."""
    from backflip.errors import UserError

    if getattr(args, "inline", False):
        if args.backend != "local":
            raise UserError(f"--inline runs the seeds here: drop --backend {args.backend}")
        return "inline"
    return args.backend


def backend_address(args) -> str | dict | None:
    """Where the seeds go, checked before anything is archived: the Ray address, or the
    `--slurm` options as a dict (`backflip.launch.slurm.parse_options`)."""
    from backflip.errors import UserError

    if args.slurm and args.backend != "slurm":
        raise UserError("--slurm is for --backend slurm")
    if args.backend != "slurm":
        return args.address
    if args.address:
        raise UserError("--address is for --backend ray")
    from backflip.launch.slurm import parse_options

    return parse_options(args.slurm)
