"""Creating a run and recording its outcome: run.json and its index row, at the start and at the
end of a launch (`backflip.launch.launch_runs`, `backflip resume`).

`create_run` makes the run directory with its provenance and a run.json that says `running`;
`finalize_run` sets the run's status and results from its seeds' status.json files. Both keep
`index.sqlite` in step; the archive's own repairs (`archive.heal`) finalize a run whose launcher
died without coming here.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from backflip import jsonout
from backflip.runs import index, provenance
from backflip.runs.archive import (
    NO_SPACE,
    RUN_RESERVE,
    aggregate,
    keep_out_of_git,
    now_iso,
    read_record,
    run_lock,
    seed_statuses,
    write_record,
)
from backflip.runs.layout import new_run_id, seed_dir


def create_run(
    home: Path,
    config: dict,
    argv: list[str],
    message: str = "",
    rerun_of: str | None = None,
    tags: list[str] | None = None,
    extra: dict | None = None,
) -> tuple[Path, dict]:
    """Make the run directory, capture provenance, write run.json and index it.

    `extra` adds keys to run.json (e.g. `backend`: where the seeds run). If any of it fails
    (a full disk), the directory is removed: no half-made run is left behind."""
    home.mkdir(parents=True, exist_ok=True)
    keep_out_of_git(home)
    for _ in range(100):
        run_id = new_run_id()
        run_dir = home / run_id
        try:
            run_dir.mkdir(parents=True)
            break
        except FileExistsError:
            continue
    try:
        return _populate(home, run_dir, run_id, config, argv, message, rerun_of, tags, extra)
    except BaseException:  # a full disk, say: no half-made run is left behind
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _populate(home, run_dir, run_id, config, argv, message, rerun_of, tags, extra):
    prov, files = provenance.capture()
    for name, text in files.items():
        (run_dir / name).write_text(text)
    record = {
        "id": run_id,
        "created": now_iso(),
        "status": "running",
        "argv": list(argv),
        "cwd": os.getcwd(),
        "message": message,
        "algo": config["algo"],
        "env": config["env_id"],
        "config": config,
        "tags": list(tags or []),
        "rerun_of": rerun_of,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "provenance": prov,
        **(extra or {}),
    }
    for seed in config["seeds"]:  # now: a folder that disappears later is a deleted seed
        seed_dir(run_dir, seed).mkdir(parents=True, exist_ok=True)
    write_record(run_dir, record, reserve=len(jsonout.dumps(record)) + RUN_RESERVE)
    record["seeds"] = [{"seed": s, "status": "pending"} for s in config["seeds"]]
    index.upsert(home, record)
    return run_dir, record


@contextmanager
def held_signals():
    """Ctrl-C and SIGTERM wait until the block is done, then reach the handler they would have
    reached: a run's outcome is written whole even when the stop request lands while it is
    written (a Ctrl-C after the last seed ended left the run unfinalized). Main thread only
    (elsewhere signals cannot be handled and the block runs as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if got:
        signal.raise_signal(got[0])


def finalize_run(home: Path, run_dir: Path, started: float, previous_s: float = 0.0) -> dict:
    """Aggregate the seeds' outcomes into run.json and the index. `previous_s`: the run's
    duration before this launch (a resumed run's time adds up)."""
    with run_lock(run_dir):
        record = read_record(run_dir)
        seeds = seed_statuses(run_dir, record)
        aggregate(record, seeds)
        record["ended"] = now_iso()
        record["duration_s"] = previous_s + time.time() - started
        if any(NO_SPACE in str(s.get("error", "")) for s in seeds):
            record["error"] = NO_SPACE
        write_record(run_dir, record)
    record["seeds"] = seeds
    try:
        index.upsert(home, record)
    except (sqlite3.Error, OSError) as e:  # a full disk: the index is a cache of run.json
        print(
            f"warning: index.sqlite not updated ({e}); `backflip runs --reindex` rebuilds it",
            file=sys.stderr,
        )
    record["dir"] = str(run_dir)
    return record
