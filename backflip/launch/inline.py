"""Seeds in the command's own process, one after another (`backflip train --inline`).

A seed of a normal run is a fork of the warm server with its output in `seeds/<s>/stdout.log`:
a `print` or a `breakpoint()` in `algos/ppo.py` never reaches the person who typed the command.
Inline, each seed is `seed.run_seed` called here, in the terminal's process: its prints reach
the terminal (and its log files, as they would), `breakpoint()` stops in pdb, Ctrl-C is handled
by the seed itself (stop at the next iteration, with a final checkpoint; the seeds after it do
not start). The archive and the numbers are those of a normal run (`tests/test_inline.py`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path

from backflip.launch.display import Display
from backflip.launch.job import SeedJob, final_status
from backflip.runs.layout import STDERR, STDOUT, seed_dir


class Tee:
    """A text stream written to two: the terminal's and the seed's log file."""

    def __init__(self, stream, path: Path, append: bool):
        self.stream, self.file = stream, open(path, "a" if append else "w", buffering=1)

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding...: the terminal's (pdb asks)
        return getattr(self.stream, name)

    def close(self) -> None:
        self.file.close()


@contextlib.contextmanager
def teed_output(folder: Path, append: bool):
    folder.mkdir(parents=True, exist_ok=True)
    out, err = Tee(sys.stdout, folder / STDOUT, append), Tee(sys.stderr, folder / STDERR, append)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        out.close()
        err.close()


class ToDisplay:
    """What `run_seed` sends its launcher (`conn.send(message)`), straight to the display."""

    def __init__(self, display: Display, i: int):
        self.display, self.i, self.done = display, i, None

    def send(self, msg: tuple) -> None:
        if msg[0] == "done":
            self.done = msg[2]
        self.display.message(self.i, msg)


def run_jobs_inline(
    jobs: list[SeedJob], workers: int, display: Display, address=None, should_stop=None
) -> dict[int, dict]:
    """The jobs in this process, in order (`workers` and `address` are unused: the backends
    share one signature). A seed that ends interrupted stops the ones after it."""
    from backflip.launch.seed import run_seed  # torch: only when a seed runs here

    done: dict[int, dict] = {}
    for i, job in enumerate(jobs):
        if should_stop is not None and should_stop():
            break
        conn = ToDisplay(display, i)
        display.update(i, step=0, status="running")
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            with teed_output(seed_dir(Path(job.run_dir), job.seed), job.append):
                run_seed(job, conn)
        finally:  # the seed leaves its signals ignored while it writes its outcome
            for s, handler in handlers.items():
                signal.signal(s, handler)
        done[i] = final_status(job, 0, reported=conn.done)
        display.finished(i, done[i])
        if done[i].get("status") == "interrupted":
            break
    return done
