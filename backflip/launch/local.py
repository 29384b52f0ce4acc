"""Seeds as local OS processes, at most `workers` at once, each with one torch thread.

Processes are forks of the warm seed server (`warm.py`), which has already imported torch,
gymnasium and the seed's code, so a seed starts in milliseconds, not seconds. Seeds run in their own process groups, so Ctrl-C
in the terminal (or `timeout -s INT`, or SIGTERM) reaches the launcher alone, which forwards one
SIGTERM to each seed (stop at the next iteration, with a final checkpoint), and SIGINT on a
second signal. `should_stop()` (polled every 0.2 s) asks for the same stop as a first signal:
how `backflip tune` prunes a trial.
"""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Pipe, wait
from pathlib import Path

from backflip.launch import warm
from backflip.launch.display import Display
from backflip.launch.job import SeedJob, final_status
from backflip.runs.layout import seed_dir


def _child(job: SeedJob, conn) -> None:
    """A seed, in a fork of the warm server. `seed.py` imports torch: the server has (never the
    launcher, which would wait for torch too)."""
    from backflip.launch.seed import redirected_output, run_seed

    os.environ["OMP_NUM_THREADS"] = "1"
    # Out of the terminal's process group: a Ctrl-C reaches the launcher alone, which asks each
    # seed once (SIGTERM) to stop at its next iteration with a final checkpoint, and a second
    # Ctrl-C at once (SIGINT). In the terminal's group a seed would get the terminal's SIGINT
    # and the launcher's SIGTERM together, take them for two requests and stop unsaved.
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    with redirected_output(folder, job.append):
        run_seed(job, conn)
    conn.close()


def start_server() -> None:
    """Find or start the server seeds fork from: a new one's imports (torch, ~1.5-4 s) then
    overlap the launcher's own work (checks, provenance, the index) instead of following it.
    Called as soon as a command knows it will train locally."""
    warm.ensure()


def run_jobs_local(
    jobs: list[SeedJob], workers: int, display: Display, address=None, should_stop=None
) -> dict[int, dict]:
    """The jobs as local processes (`address` is unused: the backends share one signature)."""
    server = warm.ensure()
    pending, active, done = list(range(len(jobs))), {}, {}
    reported: dict[int, dict] = {}  # each job's outcome as its process sent it
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        # second signal: children stop at once, with SIGINT alone (a SIGTERM after it would be
        # a third request, landing while the seed writes its outcome)
        if stopping:
            for proc, _ in active.values():
                if proc.pid and proc.is_alive():
                    _signal(proc.pid, signal.SIGINT)
            return
        stopping = True
        for proc, _ in active.values():  # forward: the terminal may not have signalled them
            if proc.pid and proc.is_alive():
                _signal(proc.pid, signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or active:
            while pending and len(active) < workers and not stopping:
                server.wait_ready()  # a cold server imports torch first: a stop meanwhile
                if stopping:  # starts nothing (a seed forked after it was never told)
                    break
                i = pending.pop(0)
                reader, writer = Pipe(duplex=False)
                proc = warm.WarmProcess(server, _child, jobs[i], writer.fileno())
                writer.close()
                active[i] = (proc, reader)
                display.update(i, step=0, status="running")
                if stopping and proc.pid:  # the request came while it was being forked
                    os.kill(proc.pid, signal.SIGTERM)
            if stopping and not active:
                break
            if should_stop is not None and not stopping and should_stop():
                on_signal(signal.SIGTERM, None)
            owner = {id(r): i for i, (_, r) in active.items()}
            readers = [r for _, r in active.values()]
            for r in wait(readers, timeout=0.2) if readers else []:
                try:
                    msg = r.recv()
                except (EOFError, OSError):
                    continue
                if msg[0] == "done":  # kept: a full disk may have kept it off status.json
                    reported[owner[id(r)]] = msg[2]
                display.message(owner[id(r)], msg)
            for i, (proc, reader) in list(active.items()):
                if proc.is_alive():
                    continue
                proc.join()
                reader.close()
                del active[i]
                done[i] = final_status(jobs[i], proc.exitcode, reported=reported.get(i))
                display.finished(i, done[i])
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return done


def _signal(pid: int, signum: int) -> None:
    """Send `signum` to a seed that may have ended since it was last seen alive."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
