"""The `backflip` command. Each subcommand lives in `backflip/commands/<name>.py` and is thin:
it parses arguments, calls into the library, prints. Bad input raises `UserError`, printed here
as one line (exit status 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
import warnings

from backflip import __version__
from backflip.errors import UserError

# Subcommand modules, in the order `backflip --help` lists them.
COMMANDS = [
    "train",
    "runs",
    "show",
    "rerun",
    "doctor",
    "preflight",
    "probe",
    "resume",
    "compare",
    "diff",
    "sweep",
    "ablate",
    "plan",
    "tune",
    "bench",
    "prefs",
    "label",
    "ui",
    "watch",
    "note",
    "journal",
    "report",
    "server",
]


class Parser(argparse.ArgumentParser):
    """argparse with bad arguments reported as one line (exit status 2), like every other bad
    input, pointing at `--help` instead of printing the usage block."""

    def error(self, message: str):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="backflip", description="A lab bench for deep RL that makes silent failures loud."
    )
    parser.add_argument("--version", action="version", version=f"backflip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"backflip.commands.{name}").register(sub)
    return parser


def _show_setting_warnings() -> None:
    """A `config.SettingWarning` (an allowed but unusual value) prints as one `warning:` line."""
    # the config (and the algorithm registry, PyYAML) only when a command runs, not for --help
    from backflip.config import SettingWarning

    default = warnings.showwarning
    if getattr(default, "backflip", False):  # installed already (main called in-process)
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SettingWarning):
            print(f"warning: {message}", file=sys.stderr, flush=True)
        else:
            default(message, category, filename, lineno, file, line)

    show.backflip = True
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    try:  # a Ctrl-C while the arguments are parsed is as quiet as one during the command
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        _show_setting_warnings()
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `backflip runs | head`
        return 0
    except OSError as e:  # a full disk: one line, not a traceback (the run records it too)
        if e.errno != errno.ENOSPC:
            raise
        where = f": {e.filename}" if e.filename else ""
        print(f"error: no space left on device{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
