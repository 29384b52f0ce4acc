"""The run archive: one directory per run, the source of truth; `index.sqlite` is a cache of it.

The names of a run's files and folders are `backflip/runs/layout.py`'s; this module reads and
writes them. Creating a run and recording its outcome is `records.py`; finding a run from what a
user typed, and keeping the index in step, is `index.py`.

Every JSON file is written atomically (temp file + rename), so a crash never leaves half a file,
and through `backflip.jsonout`, so it is strict JSON (null, never NaN).

The run directories are the record; everything else follows them (docs/architecture.md, "What
the archive guarantees"). `load_run` is where a run is healed, for every command that reads one:
a damaged run.json is restored from run.json.bak (or the index row), a run whose launcher died is
finalized from its seeds' own status.json files once no seed of it still trains, and a finalized
run whose seeds changed since (a deleted seed folder) gets its status and results recomputed.
Each repair is said once, on one line on stderr (`notice`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from backflip import jsonout
from backflip.config import TrainConfig
from backflip.errors import UserError
from backflip.runs.layout import (
    BACKUP,
    CHECKPOINTS,
    FINAL_CHECKPOINT,
    GITIGNORE,
    INDEX,
    LOCK,
    RUN_ID,
    RUN_JSON,
    SEEDS,
    STATUS,
    checkpoint_name,
    seed_dir,
)

STATUSES = ("running", "finished", "failed", "interrupted")

_said: set[str] = set()


def notice(message: str) -> None:
    """One line on stderr, once per process: what the archive repaired on its own."""
    if message not in _said:
        _said.add(message)
        print(f"note: {message}", file=sys.stderr, flush=True)


NO_SPACE = "no space left on device"  # the error of a seed and a run that ran out of disk


def home_dir(home: str | Path | None = None, create: bool = False) -> Path:
    """The archive root: `--home`, else $BACKFLIP_HOME, else ./runs. An empty `--home ''`
    (a variable that was not set, say) is refused: it would mean this folder."""
    if home is not None and not str(home).strip():
        raise UserError("--home is empty: give the archive's folder (or leave --home out)")
    path = Path(home or os.environ.get("BACKFLIP_HOME") or "runs").expanduser()
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
            keep_out_of_git(path)
        except OSError as e:
            raise UserError(f"archive root {path} is not writable: {e.strerror or e}") from None
    return path


def keep_out_of_git(folder: Path) -> None:
    """Give a folder of backflip's outputs (the archive, a report) a `.gitignore` of `*`, unless
    it has one. Written inside a git repository (`./runs`, `--out report`), the outputs then
    neither show in `git status` nor go, as untracked files, into the code.patch of every later
    run launched there (runs/provenance.py), which would mark its code as modified."""
    f = Path(folder) / GITIGNORE
    if not f.exists():
        f.write_text(
            "# written by backflip: its outputs stay out of git (delete this file to commit them)\n*\n"
        )


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# Bytes reserved in each status file and run.json (JSON may end in spaces): when the disk is
# full, the final outcome is rewritten in place into blocks the file already holds.
STATUS_RESERVE = 4096
RUN_RESERVE = 8192


def is_enospc(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno == errno.ENOSPC


def write_json(path: Path, data, reserve: int | None = None) -> None:
    """Atomically (temp file + rename), through `backflip.jsonout` (non-finite floats are
    written as null). `reserve`: pad the file with spaces to this many bytes; by default a
    run.json or status.json keeps the size it has (its spare bytes stay for the outcome).

    On a full disk (ENOSPC) the temp file is removed and, if the new text fits in the bytes
    the file already has, it is rewritten in place (no new blocks needed; not atomic, but the
    alternative is losing the outcome); otherwise the OSError is raised."""
    text = jsonout.dumps(data, indent=2).encode()
    if reserve is None:
        reserve = 0
        if path.name in (RUN_JSON, STATUS):
            try:
                reserve = path.stat().st_size
            except OSError:
                pass
    padded = text + b" " * (reserve - len(text)) if len(text) < reserve else text
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(padded)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if not is_enospc(e) or not _rewrite_in_place(path, text):
            raise


def find_checkpoint(run_dir: Path, seed: int, checkpoint: str | None) -> Path:
    """`final` (default), a step number, a file name in the seed's checkpoints, or a path."""
    folder = seed_dir(run_dir, seed) / CHECKPOINTS
    if checkpoint and Path(checkpoint).is_file():
        return Path(checkpoint)
    available = sorted(folder.glob("*.pt")) if folder.is_dir() else []
    if not available:
        raise UserError(f"seed {seed} of {run_dir.name} has no checkpoints in {folder}")
    names = ", ".join(p.name for p in available)
    if checkpoint in (None, "", "final", "last"):
        final = folder / FINAL_CHECKPOINT
        return final if final.exists() else available[-1]
    if checkpoint.isdigit():
        step = int(checkpoint)
        match = folder / checkpoint_name(step)
        if match.exists():
            return match
        raise UserError(f"no checkpoint at step {step} for seed {seed}; have: {names}")
    match = folder / checkpoint
    if match.exists() and match.parent == folder:
        return match
    raise UserError(f"no checkpoint {checkpoint!r} for seed {seed}; have: {names}")


def load_checkpoint(run_dir: Path, seed: int, checkpoint: str | None) -> tuple[Path, dict]:
    """The checkpoint `find_checkpoint` names, loaded on the CPU: (its path, its contents)."""
    import torch

    path = find_checkpoint(run_dir, seed, checkpoint)
    try:
        return path, torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 — a truncated or foreign file: one line, not a traceback
        raise UserError(f"cannot read checkpoint {path}: {type(e).__name__}: {e}") from None


def save_torch(payload, path: Path) -> None:
    """`torch.save` atomically (temp file + rename); no partial file is left behind.

    Through a Python file object, so a full disk raises OSError(ENOSPC): torch's own zip
    writer reports it as a RuntimeError ("unexpected pos 64 vs 0"), whose context holds the
    OSError only when the bytes went through Python."""
    import torch

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
        os.replace(tmp, path)
    except RuntimeError as e:
        cause = e.__context__
        if isinstance(cause, OSError):
            raise cause from e
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _rewrite_in_place(path: Path, text: bytes) -> bool:
    """Overwrite `path` with `text` padded with spaces to its current size, if it fits."""
    try:
        size = path.stat().st_size
        if len(text) > size:
            return False
        with open(path, "r+b") as f:
            f.write(text + b" " * (size - len(text)))
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        return False


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"missing {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(
            f"corrupt archive file {path}: {e}; the run's other files are untouched "
            f"(metrics in seeds/*/metrics.csv)"
        ) from None


def is_run_dir(path: Path) -> bool:
    """Holds a run record: run.json, or at least its backup (run.json is restored from it)."""
    return (path / RUN_JSON).exists() or (path / BACKUP).exists()


def run_dirs(home: Path) -> list[Path]:
    if not home.is_dir():
        return []
    return sorted(p for p in home.iterdir() if is_run_dir(p))


def broken_run_dirs(home: Path, min_age_s: float = 60.0) -> list[Path]:
    """Directories named like a run that hold no record at all (a launcher that died while
    creating the run, or a run.json deleted by hand); younger ones may be being created."""
    if not home.is_dir():
        return []
    now = time.time()
    out = []
    for p in home.iterdir():
        if RUN_ID.match(p.name) and p.is_dir() and not is_run_dir(p):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime >= min_age_s:
                    out.append(p)
    return sorted(out)


class Damaged(Exception):
    """A run record that cannot be parsed; the message says why."""


def _parse_record(path: Path) -> dict:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise Damaged("is missing") from None
    except OSError as e:
        raise Damaged(f"cannot be read ({e.strerror or e})") from None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        what = "is empty" if not text.strip() else "is truncated or not JSON"
        raise Damaged(f"{what} ({e})") from None
    return _checked(record)


def _checked(record) -> dict:
    """`record` if it is a run record whose config parses (every field to its type: a
    wrong-typed one would fail every reader), else `Damaged` with the reason."""
    if not (
        isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and isinstance(record.get("config"), dict)
        and isinstance(record["config"].get("seeds"), list)
    ):
        raise Damaged("is not a run record")
    try:
        TrainConfig.from_dict(record["config"])
    except UserError as e:
        raise Damaged(f"has a config that does not parse: {e}") from None
    return record


def _record_from_index(run_dir: Path) -> dict:
    """The run's record as the index last stored it (without its provenance), read-only."""
    path = run_dir.parent / INDEX
    if not path.exists():
        raise Damaged("no index")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            row = con.execute("SELECT record FROM runs WHERE id = ?", (run_dir.name,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error as e:
        raise Damaged(f"unreadable index: {e}") from None
    if row is None:
        raise Damaged("not in the index")
    try:
        record = _checked(json.loads(row[0]))
    except (TypeError, json.JSONDecodeError):
        raise Damaged("unreadable index row") from None
    for key in ("seeds", "dir", "findings"):
        record.pop(key, None)
    record["restored_from"] = "index.sqlite (provenance lost)"
    return record


def read_record(run_dir: Path) -> dict:
    """A run's run.json. A damaged one (missing, truncated, not a record) is restored from the
    last good copy: run.json.bak, else the index row; with no good copy, a UserError naming the
    run and what is wrong."""
    run_dir = Path(run_dir)
    try:
        return _parse_record(run_dir / RUN_JSON)
    except Damaged as e:
        why = str(e)
    for source, get in (
        (BACKUP, lambda: _parse_record(run_dir / BACKUP)),
        ("the index", lambda: _record_from_index(run_dir)),
    ):
        try:
            record = get()
        except Damaged:
            continue
        try:
            with run_lock(run_dir):
                write_json(run_dir / RUN_JSON, record)
                if source != BACKUP:
                    write_json(run_dir / BACKUP, record)
        except OSError:
            notice(f"run {run_dir.name}: run.json {why}; read from {source} (could not write it)")
        else:
            notice(f"run {run_dir.name}: run.json {why}; restored it from {source}")
        return record
    raise UserError(
        f"run {run_dir.name} is damaged: run.json {why} and no good copy is left "
        f"({BACKUP}, index.sqlite); its seeds' files are untouched"
    )


def write_record(run_dir: Path, record: dict, reserve: int | None = None) -> None:
    """run.json and its backup, each atomically (the backup is the last good copy);
    `reserve` as for `write_json`."""
    record = {k: v for k, v in record.items() if k not in ("seeds", "dir", "findings")}
    write_json(Path(run_dir) / RUN_JSON, record, reserve=reserve)
    try:
        write_json(Path(run_dir) / BACKUP, record)
    except OSError as e:  # a full disk: run.json has the record; a stale backup must not stay
        if not is_enospc(e):
            raise
        (Path(run_dir) / BACKUP).unlink(missing_ok=True)


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive `flock` on `path` (created if missing), held for the block; no lock where
    the archive cannot hold one (read-only, a full disk): the block runs unlocked, as before
    locks existed, rather than failing."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_lock(run_dir: Path):
    """An exclusive lock on one run's record (read-modify-write of run.json by the launcher,
    `resume` and the repairs of `heal`), reentrant within a process; no lock when the archive
    is read-only."""
    key = os.path.realpath(run_dir)
    if key in _locked:  # already held by this process (a repair inside a repair)
        yield
        return
    with file_lock(Path(run_dir) / LOCK):
        _locked.add(key)
        try:
            yield
        finally:
            _locked.discard(key)


_locked: set[str] = set()


def load_run(run_dir: Path) -> dict:
    """run.json with each seed's status.json merged in as `seeds` (a list of dicts), healed
    (`heal`): what a command shows is what the seeds justify."""
    run_dir = Path(run_dir)
    record = read_record(run_dir)
    record["dir"] = str(run_dir)
    record["seeds"] = seed_statuses(run_dir, record)
    return heal(run_dir, record)


def seed_status(run_dir: Path, seed: int) -> dict:
    folder = seed_dir(run_dir, seed)
    path = folder / STATUS
    if not path.exists():
        if not folder.is_dir() and (run_dir / SEEDS).is_dir():
            return {"seed": seed, "status": "missing", "error": f"its folder seeds/{seed} is gone"}
        return {"seed": seed, "status": "pending"}
    try:
        status = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return {"seed": seed, "status": "unknown", "error": f"unreadable {path}"}
    if not isinstance(status, dict) or status.get("seed") != seed:
        return {"seed": seed, "status": "unknown", "error": f"not a seed status: {path}"}
    return status


def seed_statuses(run_dir: Path, record: dict) -> list[dict]:
    return [seed_status(run_dir, s) for s in record.get("config", {}).get("seeds", [])]


INTACT = ("finished", "failed", "interrupted", "running", "waiting")  # statuses a seed wrote


def pid_alive(pid: int | None) -> bool:
    """The process exists and is not a zombie (an orphan seed that ended waits to be reaped)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _here(d: dict) -> bool:
    return d.get("host") == socket.gethostname()


def launcher_dead(record: dict) -> bool:
    """A run marked `running` whose launching process is gone (checked on its own host only)."""
    return record.get("status") == "running" and _here(record) and not pid_alive(record.get("pid"))


def seed_alive(status: dict) -> bool:
    """The seed's process still trains (an orphan when its launcher died)."""
    return status.get("status") in ("running", "waiting") and (
        not _here(status) or pid_alive(status.get("pid"))
    )


def heal(run_dir: Path, record: dict) -> dict:
    """Make a loaded run agree with its seeds, writing the repair to run.json:

    - its launcher died and no seed of it still trains: finalize it from the seeds' own
      status.json files (a seed whose process died is `failed`, with the steps it logged; one
      that never started is `interrupted`), so `resume` continues what is unfinished;
    - its launcher died but seeds still train (orphans): shown as running, `orphans` lists them;
    - a finalized run whose seeds disagree with its status or results (a seed folder deleted,
      a status.json broken): status and results recomputed from the intact seeds.
    """
    seeds = record["seeds"]
    if record.get("status") == "running":
        if not launcher_dead(record):
            return record
        alive = [s["seed"] for s in seeds if seed_alive(s)]
        if alive:
            record["orphans"] = alive
            return record
        with run_lock(run_dir):
            stored = read_record(run_dir)
            if not launcher_dead(stored):  # resumed or finalized meanwhile
                return load_run(run_dir)
            try:
                seeds = [close_dead_seed(run_dir, s) for s in seed_statuses(run_dir, stored)]
            except OSError as e:  # a read-only archive: shown as it stands
                notice(f"run {record['id']}: its launcher died; cannot finalize it here: {e}")
                return record
            if any(seed_alive(s) for s in seeds):
                return {**record, "seeds": seeds}
            ends = [_timestamp(s.get("ended")) for s in seeds]
            resumes = stored.get("resumes") or []
            start = _timestamp(resumes[-1]["at"] if resumes else stored.get("created"))
            end = max((t for t in ends if t), default=start or time.time())
            start = start or end
            stored["duration_s"] = (stored.get("duration_s") or 0.0) + max(0.0, end - start)
            stored["ended"] = datetime.fromtimestamp(end, UTC).isoformat(timespec="seconds")
            aggregate(stored, seeds)
            with contextlib.suppress(OSError):
                write_record(run_dir, stored)
        notice(
            f"run {record['id']}: its launcher (pid {record.get('pid')}) died; finalized from "
            f"its seeds' statuses: {stored['status']}"
        )
        return {**stored, "dir": str(run_dir), "seeds": seeds}
    seeds = record["seeds"] = [_settled(s) for s in seeds]
    if any(s.get("status") in ("running", "waiting") for s in seeds):
        return record  # an old archive's leftovers: leave it as recorded
    if run_status([s.get("status") for s in seeds]) == record.get("status") and _same(
        _per_seed(seeds), (record.get("results") or {}).get("per_seed")
    ):
        return record
    with run_lock(run_dir):
        stored = read_record(run_dir)
        if stored.get("status") == "running":  # resumed meanwhile
            return load_run(run_dir)
        seeds = [_settled(s) for s in seed_statuses(run_dir, stored)]
        aggregate(stored, seeds)
        try:
            write_record(run_dir, stored)
        except OSError:
            pass  # a read-only archive: shown repaired, recorded as it was
    why = "; ".join(
        f"seed {s['seed']}: {s.get('error') or s['status']}"
        for s in seeds
        if s.get("status") not in INTACT
    )
    notice(
        f"run {record['id']}: status and results recomputed from its seeds"
        + (f" ({why})" if why else "")
        + f": {stored['status']}"
    )
    return {**stored, "dir": str(run_dir), "seeds": seeds}


def _settled(status: dict) -> dict:
    """A seed of a finalized run with no status.json: its status file was deleted."""
    if status.get("status") != "pending":
        return status
    return {
        **status,
        "status": "missing",
        "error": f"its seeds/{status['seed']}/status.json is gone",
    }


def _same(a, b) -> bool:
    return jsonout.dumps(a or {}) == jsonout.dumps(b or {})


def _timestamp(text: str | None) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except (TypeError, ValueError):
        return None


def _last_write(folder: Path) -> float | None:
    """The latest modification time of a seed folder's files (its logs, metrics, status)."""
    try:
        times = [p.stat().st_mtime for p in folder.iterdir() if p.is_file()]
    except OSError:
        return None
    return max(times, default=None)


def close_dead_seed(run_dir: Path, status: dict, why: str | None = None) -> dict:
    """The outcome of a seed whose process is gone without recording one, written to its
    status.json: `failed` (with the steps and wall time its metrics.csv shows) for a seed that
    was training, `interrupted` for one that never started. Any other status is returned as is.
    """
    seed = status["seed"]
    folder = seed_dir(run_dir, seed)
    if status.get("status") == "pending":
        folder.mkdir(parents=True, exist_ok=True)
        status = {
            "seed": seed,
            "status": "interrupted",
            "steps": 0,
            "error": why or "not started: its launcher died",
            "ended": None if why is None else now_iso(),  # found later: no time of its own
        }
    elif status.get("status") in ("running", "waiting") and not seed_alive(status):
        status = dict(status)
        from backflip.telemetry import last_logged  # NumPy: not for `runs` and `show`, which read

        step, wall = last_logged(folder)
        status["steps"] = max(status.get("steps") or 0, step)
        started = _timestamp(status.get("started"))
        if wall is not None and started is not None:
            status["wall_s"] = (status.get("wall_s_before") or 0.0) + max(0.0, wall - started)
        status["error"] = why or (
            "the seed's process died without recording an outcome "
            "(killed with its launcher, or the machine went down)"
        )
        # ended when it last wrote anything, not when someone noticed (a run found hours
        # after the machine went down said it had lasted those hours)
        last = _last_write(folder) if why is None else None
        ended = (
            now_iso()
            if last is None
            else datetime.fromtimestamp(last, UTC).isoformat(timespec="seconds")
        )
        status.update(status="failed", ended=ended)
    else:
        return status
    write_json(folder / STATUS, status)
    return status


def run_status(seed_statuses: list[str]) -> str:
    """failed if any seed failed (or its folder or status is gone), else interrupted if any was,
    else running if any still is (or waits for its labeler, or has not started), else finished.
    """
    if any(s in ("failed", "missing", "unknown") for s in seed_statuses):
        return "failed"
    if "interrupted" in seed_statuses:
        return "interrupted"
    if any(s in ("running", "waiting", "pending") for s in seed_statuses):
        return "running"
    return "finished"


def aggregate(record: dict, seeds: list[dict]) -> dict:
    """Set the run's status and results from its seeds' statuses; only seeds whose folder and
    status.json are intact count in the results."""
    from backflip import stats  # NumPy and SciPy: here, not for `runs` and `show`, which read

    record["status"] = run_status([s.get("status") for s in seeds])
    per_seed = _per_seed(seeds)
    record["results"] = {**stats.summarize(list(per_seed.values())), "per_seed": per_seed}
    return record


def _per_seed(seeds: list[dict]) -> dict[str, float | None]:
    return {str(s["seed"]): s.get("final_eval_return") for s in seeds if s.get("status") in INTACT}


def waiting_seeds(record: dict) -> list[dict]:
    """The statuses of a running run's seeds that wait (a preference run's person is behind)."""
    if record.get("status") != "running":
        return []
    return [s for s in record.get("seeds", []) if s.get("status") == "waiting"]
