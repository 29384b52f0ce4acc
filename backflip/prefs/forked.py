"""A function run in a forked copy of this process, its result sent back to the parent.

What lets a pipelined reward-model round (`prefs.mode=pipelined`, `pipeline.py`) train on the
second core without sharing Python's lock with the policy: in a thread beside the policy, each
of the two paused the other between torch's kernels, and the policy's update slowed by 40%
(docs/benchmarks.md).

The child starts as an exact copy of this process at the fork (copy-on-write): it reads the
state as it was then, whatever the parent does meanwhile, which is what a pipelined round must
read. It runs `fn()`, pickles what that returns (or the exception it raised) into a pipe, and
leaves with `os._exit`: none of the parent's cleanup, buffered output or handlers run twice.
The parent collects the result with `join()`. A child must not touch what the parent shares
with the outside world through file descriptors it keeps using (an SQLite connection: open its
own).

On Linux, unless `BACKFLIP_FORK=0`, and in a process that has not started CUDA or imported
Ray (whose worker threads talk gRPC, which a fork can leave locked): elsewhere a pipelined round
runs in a thread, with the same numbers. macOS is left out: its system frameworks are not safe
to use in a forked child (why Python's multiprocessing spawns there).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable

SWITCH = "BACKFLIP_FORK"  # "0" (or false, no, off): pipelined rounds in a thread


def available() -> bool:
    """Whether a round can run in a forked process here."""
    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not sys.platform.startswith("linux") or "ray" in sys.modules:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


class ChildDied(RuntimeError):
    """The forked process ended without sending a result (killed, or crashed)."""


class Forked:
    """`fn()` running in a forked child from construction on; `join()` returns its result or
    raises its exception (with the child's traceback as a note)."""

    def __init__(self, fn: Callable[[], object]):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            code = 1
            try:
                os.close(read)
                # Ctrl-C reaches the whole process group: the parent decides what happens to
                # the round (finish_job kills it when the seed stops)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                try:
                    payload = pickle.dumps((True, fn()), protocol=pickle.HIGHEST_PROTOCOL)
                except BaseException as e:  # noqa: BLE001 — sent to the parent, raised there
                    payload = pickle.dumps((False, _sendable(e)))
                with os.fdopen(write, "wb") as f:
                    f.write(payload)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self.fd = pid, read

    def join(self):
        """Wait for the child; its result, or its exception raised here."""
        with os.fdopen(self.fd, "rb") as f:
            data = f.read()
        _, status = os.waitpid(self.pid, 0)
        if not data:
            raise ChildDied(
                f"the forked process {self.pid} ended without a result ({_how(status)})"
            )
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value

    def kill(self) -> None:
        """End the child now; its result is dropped."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self.fd)
        os.waitpid(self.pid, 0)


def _sendable(e: BaseException) -> BaseException:
    """`e` with the child's traceback as a note, or a RuntimeError saying what it was when it
    does not pickle."""
    text = "".join(traceback.format_exception(e))
    try:
        e.add_note(f"in the forked process:\n{text}")
        pickle.dumps(e)
        return e
    except Exception:  # noqa: BLE001 — anything unpicklable becomes its text
        return RuntimeError(f"in the forked process:\n{text}")


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
