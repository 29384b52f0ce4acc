"""`index.sqlite`: a queryable cache of every run.json under the archive root.

Safe with several `backflip train` processes at once: WAL journaling, a generous busy timeout, and
one short transaction per write. The run directories are the record and the index follows them:
every command that reads the index first checks it (`ensure`) —

- missing (while the archive holds runs) or unreadable (not a database, malformed): rebuilt from
  the run directories into a temporary file that then replaces it atomically (`rebuild`), one
  process at a time (`.index.lock`: launches that find it missing together rebuild it once);
- stale (a run directory it does not list, a row whose directory is gone, a run.json or a seed
  folder changed since it was indexed — `signature`): the rows concerned are refreshed, one
  transaction each, safe beside concurrent writers;

and says once, on stderr, that it did. Run directories that cannot be read are kept in the
`damaged` table with the reason, so `backflip runs` names them instead of dropping them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import time
from pathlib import Path

from backflip import jsonout
from backflip.errors import UserError
from backflip.runs.archive import (
    broken_run_dirs,
    file_lock,
    is_enospc,
    is_run_dir,
    launcher_dead,
    load_run,
    notice,
    run_dirs,
)
from backflip.runs.layout import INDEX, INDEX_LOCK, RUN_JSON, SEEDS

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created TEXT, status TEXT, algo TEXT, env TEXT, message TEXT, tags TEXT,
    n_seeds INTEGER, steps INTEGER, duration_s REAL,
    final_mean REAL, final_min REAL, final_max REAL, final_iqm REAL, ci_low REAL, ci_high REAL,
    rerun_of TEXT, pid INTEGER, host TEXT, record TEXT
);
CREATE INDEX IF NOT EXISTS runs_env ON runs(env);
CREATE INDEX IF NOT EXISTS runs_algo ON runs(algo);
CREATE INDEX IF NOT EXISTS runs_created ON runs(created);
CREATE TABLE IF NOT EXISTS seeds (
    run_id TEXT, seed INTEGER, status TEXT, final_eval_return REAL, steps INTEGER,
    sps REAL, wall_s REAL, PRIMARY KEY (run_id, seed)
);
CREATE TABLE IF NOT EXISTS files (id TEXT PRIMARY KEY, signature TEXT);
CREATE TABLE IF NOT EXISTS damaged (id TEXT PRIMARY KEY, why TEXT, signature TEXT);
"""


def signature(run_dir: Path) -> str:
    """What a run's row was built from: run.json's mtime and size and the mtimes of the seeds
    folder and of each seed's folder (a seed folder or status.json added, replaced or deleted).
    When it changes, the row is stale."""
    parts = []
    seeds = run_dir / SEEDS
    try:
        folders = sorted(seeds.iterdir()) if seeds.is_dir() else []
    except OSError:
        folders = []
    for path in (run_dir / RUN_JSON, seeds, *folders):
        try:
            st = path.stat()
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_mtime_ns}:{st.st_size if path.name == RUN_JSON else 0}")
    return "/".join(parts)


def _older(run_dir: Path, seconds: float = 60.0) -> bool:
    try:
        return time.time() - run_dir.stat().st_mtime > seconds
    except OSError:
        return False


def _unreadable(e: sqlite3.Error) -> bool:
    """Not an SQLite database, or a corrupt one (not: locked, busy, permission denied)."""
    if isinstance(e, sqlite3.OperationalError):
        return "malformed" in str(e) or "not a database" in str(e)
    return isinstance(e, sqlite3.DatabaseError)


def _open(path: Path, wal: bool = True) -> sqlite3.Connection:
    con = sqlite3.connect(path, timeout=60, isolation_level=None)
    con.row_factory = sqlite3.Row
    try:
        for attempt in range(20):
            try:
                if wal:
                    con.execute("PRAGMA journal_mode=WAL")
                con.executescript(SCHEMA)
                con.execute("SELECT count(*) FROM runs").fetchone()
                break
            except sqlite3.OperationalError as e:  # another process is creating the schema
                if "locked" not in str(e) or attempt == 19:
                    raise
                time.sleep(0.1 * (attempt + 1))
    except BaseException:
        con.close()
        raise
    return con


def connect(home: Path, creating: str | None = None) -> sqlite3.Connection:
    """A connection to the archive's index. A missing index (when the archive holds runs) or an
    unreadable one is rebuilt from the run directories first. `creating`: the id of a run being
    created (the first run of a new archive is no news)."""
    path = home / INDEX
    if not path.exists():
        others = [d for d in run_dirs(home) if d.name != creating]
        if creating is None:
            if others:
                rebuild(home, "index.sqlite was missing", only_if=_missing)
        else:  # news unless the other runs are launches of this minute (a new archive)
            why = "index.sqlite was missing" if any(map(_older, others)) else None
            rebuild(home, why, only_if=_missing)
    try:
        return _open(path)
    except sqlite3.Error as e:
        if not _unreadable(e):
            raise
        rebuild(home, f"index.sqlite was unreadable ({e})", only_if=_still_unreadable)
        return _open(path)


def _missing(path: Path) -> bool:
    return not path.exists()


def _still_unreadable(path: Path) -> bool:
    try:
        _open(path).close()
    except sqlite3.Error as e:
        return _unreadable(e)
    return False  # another process rebuilt it meanwhile


def _row(record: dict) -> dict:
    res = record.get("results") or {}
    return {
        "id": record["id"],
        "created": record.get("created"),
        "status": record.get("status"),
        "algo": record.get("algo"),
        "env": record.get("env"),
        "message": record.get("message", ""),
        "tags": ",".join(record.get("tags", [])),
        "n_seeds": len(record.get("config", {}).get("seeds", [])),
        "steps": record.get("config", {}).get("steps"),
        "duration_s": record.get("duration_s"),
        "final_mean": res.get("mean"),
        "final_min": res.get("min"),
        "final_max": res.get("max"),
        "final_iqm": res.get("iqm"),
        "ci_low": res.get("ci_low"),
        "ci_high": res.get("ci_high"),
        "rerun_of": record.get("rerun_of"),
        "pid": record.get("pid"),
        "host": record.get("host"),
        "record": jsonout.dumps({k: v for k, v in record.items() if k not in ("provenance",)}),
    }


def _write(con: sqlite3.Connection, home: Path, record: dict, sig: str | None = None) -> None:
    """A run's rows (inside the caller's transaction). `sig`: the run directory's signature
    taken before its record was read (default: now)."""
    row = _row(record)
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    con.execute(f"INSERT OR REPLACE INTO runs ({cols}) VALUES ({marks})", row)
    for s in record.get("seeds", []):
        if isinstance(s, dict) and "seed" in s:
            con.execute(
                "INSERT OR REPLACE INTO seeds VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record["id"],
                    s["seed"],
                    s.get("status"),
                    s.get("final_eval_return"),
                    s.get("steps"),
                    s.get("sps"),
                    s.get("wall_s"),
                ),
            )
    con.execute(
        "INSERT OR REPLACE INTO files VALUES (?, ?)",
        (record["id"], sig or signature(home / record["id"])),
    )
    con.execute("DELETE FROM damaged WHERE id = ?", (record["id"],))


def _forget(con: sqlite3.Connection, run_id: str) -> None:
    for table, col in (("runs", "id"), ("seeds", "run_id"), ("files", "id"), ("damaged", "id")):
        con.execute(f"DELETE FROM {table} WHERE {col} = ?", (run_id,))


def _transaction(con: sqlite3.Connection, work) -> None:
    con.execute("BEGIN IMMEDIATE")
    try:
        work()
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:  # the failed statement ended the transaction (a full disk)
            pass
        raise


def upsert(home: Path, record: dict) -> None:
    con = connect(home, creating=record["id"])
    try:
        _transaction(con, lambda: _write(con, home, record))
    except sqlite3.OperationalError as e:
        if _disk_full(e):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(home / INDEX)) from None
        raise
    finally:
        con.close()


def _disk_full(e: Exception) -> bool:
    """ENOSPC, or SQLite's word for it ("database or disk is full")."""
    return is_enospc(e) or (isinstance(e, sqlite3.OperationalError) and "disk is full" in str(e))


def _read(run_dir: Path) -> tuple[dict | None, str | None]:
    """(the run's healed record, None), or (None, why it cannot be read)."""
    if not is_run_dir(run_dir):
        return None, (
            f"run {run_dir.name} is damaged: no run.json (its launcher died while creating it, "
            "or it was deleted)"
        )
    try:
        record = load_run(run_dir)
    except UserError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 — a damaged run is named with its reason, never fatal
        return None, f"run {run_dir.name} cannot be read: {type(e).__name__}: {e}"
    if record["id"] != run_dir.name:
        return None, f"run {run_dir.name} is damaged: its run.json is run {record['id']}'s"
    return record, None


def _candidates(home: Path) -> dict[str, Path]:
    return {d.name: d for d in sorted({*run_dirs(home), *broken_run_dirs(home)})}


def rebuild(home: Path, why: str | None = None, only_if=None) -> tuple[int, list[tuple[str, str]]]:
    """Build a new index from the run directories into a temporary file and move it into place
    (atomic: readers see the old index or the new one); (runs indexed, [(run, why damaged)]).
    One process at a time; `only_if(path)`, asked under the lock, skips a rebuild that another
    process has done meanwhile (then (0, []) and no notice): processes that found the index
    missing together rebuild it once, instead of one replacing the file, and deleting its WAL,
    under another that already writes to it."""
    with file_lock(home / INDEX_LOCK):
        if only_if is not None and not only_if(home / INDEX):
            return 0, []
        return _rebuild(home, why)


def _rebuild(home: Path, why: str | None) -> tuple[int, list[tuple[str, str]]]:
    path = home / INDEX
    tmp = home / f".{INDEX}.{os.getpid()}.{secrets.token_hex(3)}.tmp"
    n, damaged = 0, []
    try:
        con = _open(tmp, wal=False)
        try:
            con.execute("BEGIN")
            for name, d in _candidates(home).items():
                sig = signature(d)  # before reading: a change while reading shows next time
                record, problem = _read(d)
                if record is None:
                    con.execute(
                        "INSERT OR REPLACE INTO damaged VALUES (?, ?, ?)", (name, problem, sig)
                    )
                    damaged.append((name, problem))
                else:
                    _write(con, home, record, sig)
                    n += 1
            con.execute("COMMIT")
        finally:
            con.close()
        for suffix in ("-wal", "-shm", "-journal"):  # the old file's: never replayed on the new
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        os.replace(tmp, path)
    except (OSError, sqlite3.Error) as e:
        if _disk_full(e):  # the CLI's one line for a full disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from None
        raise UserError(f"cannot rebuild {path}: {e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if why:
        more = f" ({len(damaged)} damaged)" if damaged else ""
        notice(f"{why}: rebuilt it from {n} run director{'y' if n == 1 else 'ies'}{more}")
    for _, problem in damaged:
        notice(problem)
    return n, damaged


def ensure(home: Path) -> bool:
    """Make the index agree with the run directories (module docstring); quiet when it does.
    False when it could not be opened or refreshed (a full disk, a read-only archive): then it
    may be stale, and readers use the run folders."""
    if not home.is_dir():
        return True
    if not (home / INDEX).exists():
        if run_dirs(home):
            try:
                rebuild(home, "index.sqlite was missing", only_if=_missing)
            except (UserError, OSError) as e:  # a full disk, a read-only archive
                notice(
                    f"index.sqlite is missing and could not be rebuilt ({e}): reading the run folders"
                )
                return False
        return True
    try:
        con = connect(home)
    except sqlite3.OperationalError:  # cannot be opened (a full disk): readers use the folders
        return False
    try:
        try:
            indexed = dict(con.execute("SELECT id, signature FROM files").fetchall())
            listed = {r[0] for r in con.execute("SELECT id FROM runs")}
            broken = dict(con.execute("SELECT id, signature FROM damaged").fetchall())
        except sqlite3.Error as e:
            if not _unreadable(e):
                raise
            con.close()
            rebuild(home, f"index.sqlite was unreadable ({e})", only_if=_still_unreadable)
            return True
        dirs = _candidates(home)
        known = {**indexed, **broken}
        gone = sorted((listed | known.keys()) - dirs.keys())
        new = [name for name in dirs if name not in listed and name not in broken]
        changed = [
            name for name, d in dirs.items() if name not in new and signature(d) != known.get(name)
        ]
        damaged = []
        try:
            for name in [*new, *changed]:
                # the signature before reading: a change while reading shows next time
                sig = signature(dirs[name])
                record, problem = _read(dirs[name])
                if record is not None:
                    _transaction(con, lambda record=record, sig=sig: _write(con, home, record, sig))
                    continue
                damaged.append((name, problem))

                def mark(name=name, problem=problem, sig=sig):
                    _forget(con, name)
                    con.execute(
                        "INSERT OR REPLACE INTO damaged VALUES (?, ?, ?)", (name, problem, sig)
                    )

                _transaction(con, mark)
            if gone:
                _transaction(con, lambda: [_forget(con, name) for name in gone])
        except sqlite3.OperationalError as e:  # full disk, read-only: readers use the folders
            notice(f"{home / INDEX} could not be refreshed ({e}): reading the run folders")
            return False
    finally:
        con.close()
    missing = [name for name in new if name not in dict(damaged)]
    if missing or gone:
        parts = [f"{len(missing)} run(s) missing from it"] if missing else []
        parts += [f"{len(gone)} run(s) no longer in the archive"] if gone else []
        notice(
            f"index.sqlite was stale ({', '.join(parts)}): refreshed it from the run directories"
        )
    for _, problem in damaged:
        notice(problem)
    return True


def damaged(home: Path) -> list[tuple[str, str]]:
    """[(run directory, why it cannot be read)] of the archive, as `ensure` last found them."""
    if not (home / INDEX).exists():
        return []
    try:
        con = connect(home)
        try:
            return [(r[0], r[1]) for r in con.execute("SELECT id, why FROM damaged ORDER BY id")]
        finally:
            con.close()
    except sqlite3.OperationalError:  # a full disk: WAL can't open; read the run folders
        return [(d.name, problem) for d in _candidates(home).values() if (problem := _read(d)[1])]


def query(
    home: Path,
    env: str | None = None,
    algo: str | None = None,
    status: str | None = None,
    grep: str | None = None,
    tag: str | None = None,
    limit: int | None = None,
) -> list[dict]:
    current = ensure(home)
    if current and not (home / INDEX).exists():
        return []
    where, args = [], []
    for col, val in (("env", env), ("algo", algo)):
        if val:
            where.append(f"{col} = ?")
            args.append(val)
    if tag:  # exact: a tag with % or _ is not a pattern
        where.append("instr(',' || tags || ',', ?) > 0")
        args.append(f",{tag},")
    if grep:  # literal text, any case: % and _ match themselves
        cols = ("message", "id", "env", "algo", "tags")
        where.append("(" + " OR ".join(f"instr(lower({c}), ?) > 0" for c in cols) + ")")
        args += [grep.lower()] * len(cols)
    sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY created DESC, id DESC"
    if limit:
        sql += f" LIMIT {int(limit)}"
    rows = None
    if current:  # not: a full disk left it stale (or WAL can't open); read the run folders
        with contextlib.suppress(sqlite3.OperationalError):
            con = connect(home)
            try:
                rows = [dict(r) for r in con.execute(sql, args)]
            finally:
                con.close()
    if rows is None:
        rows = _scan(home, env, algo, grep, tag, limit)
    for r in rows:  # a dead launcher leaves `running` behind: the run follows its seeds
        if r["status"] == "running":
            r.update(_heal_row(home, r) or {})
    if status:
        rows = [r for r in rows if r["status"] == status]
    return rows


def _heal_row(home: Path, row: dict) -> dict | None:
    """The row of a run marked running whose launcher died, as `load_run` (which finalizes it
    from its seeds once none still trains) sees it now."""
    if not launcher_dead(row):
        return None
    record, _ = _read(home / row["id"])
    if record is None or record.get("status") == "running":
        return None
    with contextlib.suppress(sqlite3.Error, UserError):
        upsert(home, record)
    return _row(record)


def _scan(home, env, algo, grep, tag, limit) -> list[dict]:
    """What `query` selects, read from the run directories instead of the index."""
    rows = []
    for d in run_dirs(home):
        try:
            row = _row(load_run(d))
        except Exception:  # noqa: BLE001 — an unreadable run is left out, as the index does
            continue
        text = " ".join(str(row[c] or "") for c in ("message", "id", "env", "algo", "tags"))
        if (
            (not env or row["env"] == env)
            and (not algo or row["algo"] == algo)
            and (not tag or f",{tag}," in f",{row['tags']},")
            and (not grep or grep.lower() in text.lower())
        ):
            rows.append(row)
    rows.sort(key=lambda r: (r["created"] or "", r["id"]), reverse=True)
    return rows[:limit] if limit else rows


def reindex(home: Path) -> tuple[int, list[tuple[str, str]]]:
    """Rebuild the index from the run directories: (runs indexed, [(run, why it could not be
    read)])."""
    return rebuild(home)


def used_seeds(home: Path, env: str) -> dict[int, list[str]]:
    """{seed: [run ids]} of every archived run on `env`, any algorithm (fresh-seed checks)."""
    ensure(home)
    if not (home / INDEX).exists():
        return {}
    con = connect(home)
    try:
        rows = con.execute(
            "SELECT seeds.seed, runs.id FROM seeds JOIN runs ON seeds.run_id = runs.id "
            "WHERE runs.env = ?",
            (env,),
        ).fetchall()
    finally:
        con.close()
    out: dict[int, list[str]] = {}
    for seed, run_id in rows:
        out.setdefault(int(seed), []).append(run_id)
    return out


# --- naming a run ----------------------------------------------------------------------------


def heal_index(home: Path) -> None:
    """Rebuild or refresh `index.sqlite` if it is missing, unreadable or stale (`ensure`);
    a repair that cannot be written (a read-only archive) is said, never fatal."""
    try:
        ensure(home)
    except (UserError, sqlite3.Error, OSError) as e:
        notice(f"{home / INDEX} is out of date and could not be repaired: {e}")


def resolve_run(home: Path, ref: str) -> Path:
    """A run directory from an id, a unique id prefix, `last`, or a path to a run directory.
    Every command that names a run comes here: the archive's index is checked on the way."""
    heal_index(home)
    p = Path(ref)
    if is_run_dir(p):
        return p
    if not home.is_dir():
        raise UserError(f"no archive at {home} (set --home or BACKFLIP_HOME)")
    if ref in ("last", "latest"):
        dirs = run_dirs(home)
        if not dirs:
            raise UserError(f"no runs in {home}")
        return dirs[-1]
    if is_run_dir(home / ref):
        return home / ref
    matches = [d for d in run_dirs(home) if d.name.startswith(ref) or d.name.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise UserError(f"run id {ref!r} is ambiguous: {', '.join(d.name for d in matches[:5])}")
    raise UserError(f"no run {ref!r} in {home} (see `backflip runs`)")
