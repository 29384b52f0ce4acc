"""The run archive: one directory per run, the source of truth; `index.sqlite` is a cache of it.

    <home>/
      index.sqlite
      <run id>/
        run.json                 id, argv, message, resolved config, status, results, provenance
        code.patch               uncommitted changes of the repo the run was launched from
        backflip.patch           ... of backflip itself, when it is a separate checkout
        packages.txt             every installed package, pinned
        findings.json            the doctor's findings (when it has run)
        seeds/<seed>/
          status.json            status, steps, steps/s, final evaluation, error and traceback
          stdout.log stderr.log  everything the seed's process printed
          metrics.csv            long table: step, wall, name, value (docs/metrics.md)
          episodes.csv           every finished training episode: step, return, length
          tb/                    TensorBoard event files
          checkpoints/           step_<n>.pt (periodic), final.pt

Every JSON file is written atomically (temp file + rename), so a crash never leaves half a file,
and through `backflip.jsonout`, so it is strict JSON (null, never NaN).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import socket
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from backflip import jsonout
from backflip.errors import UserError

STATUSES = ("running", "finished", "failed", "interrupted")
NO_SPACE = "no space left on device"  # the error of a seed and a run that ran out of disk


def home_dir(home: str | Path | None = None, create: bool = False) -> Path:
    """The archive root: `--home`, else $BACKFLIP_HOME, else ./runs."""
    path = Path(home or os.environ.get("BACKFLIP_HOME") or "runs").expanduser()
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"archive root {path} is not writable: {e.strerror or e}") from None
    return path


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    """Sortable and unique across concurrent launches: 20261122-074502-3f9a."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


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
        if path.name in ("run.json", "status.json"):
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


def run_dirs(home: Path) -> list[Path]:
    if not home.is_dir():
        return []
    return sorted(p for p in home.iterdir() if (p / "run.json").exists())


def resolve_run(home: Path, ref: str) -> Path:
    """A run directory from an id, a unique id prefix, `last`, or a path to a run directory."""
    p = Path(ref)
    if (p / "run.json").exists():
        return p
    if not home.is_dir():
        raise UserError(f"no archive at {home} (set --home or BACKFLIP_HOME)")
    if ref in ("last", "latest"):
        dirs = run_dirs(home)
        if not dirs:
            raise UserError(f"no runs in {home}")
        return dirs[-1]
    if (home / ref / "run.json").exists():
        return home / ref
    matches = [d for d in run_dirs(home) if d.name.startswith(ref) or d.name.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise UserError(f"run id {ref!r} is ambiguous: {', '.join(d.name for d in matches[:5])}")
    raise UserError(f"no run {ref!r} in {home} (see `backflip runs`)")


def load_run(run_dir: Path) -> dict:
    """run.json with each seed's status.json merged in as `seeds` (a list of dicts)."""
    record = read_json(run_dir / "run.json")
    if not isinstance(record, dict) or "id" not in record:
        raise UserError(f"corrupt archive file {run_dir / 'run.json'}: not a run record")
    record["dir"] = str(run_dir)
    record["seeds"] = [seed_status(run_dir, s) for s in record.get("config", {}).get("seeds", [])]
    return reconcile(record)


def seed_dir(run_dir: Path, seed: int) -> Path:
    return run_dir / "seeds" / str(seed)


def seed_status(run_dir: Path, seed: int) -> dict:
    path = seed_dir(run_dir, seed) / "status.json"
    if not path.exists():
        return {"seed": seed, "status": "pending"}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, OSError):
        return {"seed": seed, "status": "unknown", "error": f"unreadable {path}"}


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reconcile(record: dict) -> dict:
    """A run still marked `running` whose launcher died on this host is reported as `failed`."""
    if (
        record.get("status") == "running"
        and record.get("host") == socket.gethostname()
        and not pid_alive(record.get("pid"))
    ):
        record["status"] = "failed"
        record.setdefault(
            "error",
            "the launching process died without recording an outcome "
            "(killed, or the machine went down)",
        )
    return record


# --- creating and closing runs ------------------------------------------------------------------


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
    from backflip.runs import index, provenance

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
    write_json(run_dir / "run.json", record, reserve=len(jsonout.dumps(record)) + RUN_RESERVE)
    record["seeds"] = [{"seed": s, "status": "pending"} for s in config["seeds"]]
    index.upsert(home, record)
    return run_dir, record


def run_status(seed_statuses: list[str]) -> str:
    """failed if any seed failed, else interrupted if any was, else running if any still is
    (or waits for its labeler), else finished."""
    for status in ("failed", "interrupted", "running"):
        if status in seed_statuses:
            return status
    return "running" if "waiting" in seed_statuses else "finished"


def waiting_seeds(record: dict) -> list[dict]:
    """The statuses of a running run's seeds that wait (a preference run's person is behind)."""
    if record.get("status") != "running":
        return []
    return [s for s in record.get("seeds", []) if s.get("status") == "waiting"]


def finalize_run(home: Path, run_dir: Path, started: float) -> dict:
    """Aggregate the seeds' outcomes into run.json and the index."""
    from backflip import stats
    from backflip.runs import index

    record = read_json(run_dir / "run.json")
    seeds = [seed_status(run_dir, s) for s in record["config"]["seeds"]]
    record["status"] = run_status([s.get("status") for s in seeds])
    record["ended"] = now_iso()
    record["duration_s"] = time.time() - started
    finals = [s.get("final_eval_return") for s in seeds]
    record["results"] = {
        **stats.summarize(finals),
        "per_seed": {str(s["seed"]): s.get("final_eval_return") for s in seeds},
    }
    if any(NO_SPACE in str(s.get("error", "")) for s in seeds):
        record["error"] = NO_SPACE
    write_json(run_dir / "run.json", record)
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
