"""The launcher's side of a seed: what a seed job is (`SeedJob`), and its outcome as recorded in
the seed's status.json — written by the seed (`write_status`), or, when its process died without
one or never started, by the launcher (`final_status`, `mark_not_started`).

The seed's own side, which imports torch and trains, is `seed.py`: the launcher never imports it
(a seed process does), so starting a run does not wait for torch in two processes.
"""

from __future__ import annotations

import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from backflip.runs.archive import (
    close_dead_seed,
    is_enospc,
    now_iso,
    read_json,
    seed_status,
    write_json,
)
from backflip.runs.layout import CHECKPOINTS, FINAL_CHECKPOINT, STATUS, checkpoint_step, seed_dir


@dataclass
class SeedJob:
    run_dir: str
    seed: int
    config: dict
    append: bool = False  # resume: append to existing metrics
    resume_from: str | None = None  # resume: the checkpoint to continue from
    label: str = ""  # how the progress display names the run (when several share a pool)
    # folders the launcher put on sys.path for the run's env module (`envs.module_paths`): the
    # seed puts them on its own before it makes an env
    import_paths: list[str] = field(default_factory=list)


def write_status(folder: Path, status: dict) -> None:
    """A seed's status.json; on a full disk without its traceback if the whole one does not fit
    (the launcher also has it in memory: the `done` message)."""
    try:
        write_json(folder / STATUS, status)
    except OSError as e:
        if not is_enospc(e):
            raise
        slim = {k: v for k, v in status.items() if k != "traceback"}
        try:
            write_json(folder / STATUS, slim)
        except OSError:
            print("could not record the outcome in status.json: disk full", file=sys.stderr)


def mark_not_started(job: SeedJob) -> dict:
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    if job.resume_from:  # a resumed seed keeps its old status: still resumable
        return read_json(folder / STATUS)
    status = {
        "seed": job.seed,
        "status": "interrupted",
        "steps": 0,
        "error": "not started: the launcher was stopped",
        "ended": now_iso(),
    }
    write_json(folder / STATUS, status)
    return status


def final_status(
    job: SeedJob, exitcode: int | None, why: str | None = None, reported: dict | None = None
) -> dict:
    """The seed's status.json, repaired when its process died without writing the outcome
    (`archive.close_dead_seed`: failed, with the steps its metrics show), or could not (a full
    disk: `reported` is the outcome the process sent, written here)."""
    run_dir = Path(job.run_dir)
    status = seed_status(run_dir, job.seed)
    unfinished = ("running", "waiting", "pending", "unknown", "missing")
    if status.get("status") in unfinished and reported is not None:
        status = reported
        write_status(seed_dir(run_dir, job.seed), status)
    if status.get("status") in unfinished:
        if not why:
            if exitcode is not None and exitcode < 0:
                sig = signal.Signals(-exitcode).name
                extra = " (often the kernel's out-of-memory killer)" if sig == "SIGKILL" else ""
                why = f"the seed's process was killed by {sig}{extra}"
            else:
                why = f"the seed's process exited with code {exitcode} without a result"
        status = {**status, "seed": job.seed, "status": "running", "pid": None}
        status["host"] = socket.gethostname()  # its process is gone: nothing to wait for
        status = close_dead_seed(run_dir, status, why)
    return status


def last_checkpoint(folder: Path) -> tuple[Path, int] | None:
    """The checkpoint with the highest step in a seed's folder: (path, step), or None. Where a
    seed continues from: `backflip resume`, and a Slurm task requeued after a preemption."""
    found = []
    for path in (folder / CHECKPOINTS).glob("*.pt"):
        step = checkpoint_step(path.name)
        if step is not None:
            found.append((step, path))
        elif path.name == FINAL_CHECKPOINT:  # the only name without its step: read it
            import torch  # here only: the launcher loads torch for a final checkpoint alone

            try:
                step = torch.load(path, map_location="cpu", weights_only=False)["step"]
            except Exception:  # noqa: BLE001 — a torn or foreign file is not a checkpoint
                continue
            found.append((int(step), path))
    if not found:
        return None
    step, path = max(found, key=lambda t: (t[0], t[1].name == FINAL_CHECKPOINT))
    return path, step


class Pool:
    """What a backend that runs seeds elsewhere (a Ray cluster, Slurm) tells `complete`: how to
    start a job, which started jobs have ended, how to stop them. The local pool and `--inline`
    run their seeds as processes of their own and have their own loops."""

    status = "running"
    """what the display says of a job once submitted"""

    def submit_all(self, indices: list[int]) -> dict[int, object]:
        """Start these jobs at once when the backend schedules them itself (a Slurm array: at
        most `workers` run); {} when jobs are submitted one by one as room frees (`submit`)."""
        return {}

    def submit(self, i: int) -> object:
        raise NotImplementedError

    def ended(self, active: dict[int, object]) -> list[tuple[int, str | None]]:
        """Wait a moment; say the jobs' progress to the display; the active jobs that ended,
        each with why it failed when its task died without an outcome (else None)."""
        raise NotImplementedError

    def stop(self, first: bool, active: dict[int, object]) -> None:
        """A stop request (a signal, `should_stop`): the first asks every seed to stop at its
        next iteration boundary, a second stops them at once."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def complete(
    jobs: list[SeedJob], workers: int, display, should_stop, pool: Pool
) -> dict[int, dict]:
    """Run `jobs` on `pool`, at most `workers` at once, until each has an outcome: the loop the
    Ray and Slurm backends share. SIGINT/SIGTERM (and `should_stop()`) reach `pool.stop`, the
    first as a stop at the next iteration, a second at once; jobs not started by then stay
    pending (`launch.run_jobs` marks them not started). {job index: final status}."""
    pending, done = list(range(len(jobs))), {}
    active = pool.submit_all(pending)
    for i in active:
        display.update(i, step=0, status="queued")
    pending = [i for i in pending if i not in active]
    stops = 0

    def on_signal(signum, frame):
        nonlocal stops
        stops += 1
        pool.stop(stops == 1, active)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or active:
            while pending and len(active) < workers and not stops:
                i = pending.pop(0)
                active[i] = pool.submit(i)
                display.update(i, step=0, status=pool.status)
            if not active:
                break
            if should_stop is not None and not stops and should_stop():
                on_signal(signal.SIGTERM, None)
            for i, why in pool.ended(active):
                del active[i]
                done[i] = final_status(jobs[i], None, why=why)
                display.finished(i, done[i])
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        pool.close()
    return done
