"""`index.sqlite`: a queryable cache of every run.json under the archive root.

Safe with several `backflip train` processes at once: WAL journaling, a generous busy timeout, and
one short transaction per write. The index can always be rebuilt from the run directories
(`backflip runs --reindex`), so it never holds anything the archive doesn't.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from backflip import jsonout
from backflip.runs.archive import load_run, reconcile, run_dirs

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
"""


def connect(home: Path) -> sqlite3.Connection:
    con = sqlite3.connect(home / "index.sqlite", timeout=60, isolation_level=None)
    con.row_factory = sqlite3.Row
    for attempt in range(20):
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(SCHEMA)
            break
        except sqlite3.OperationalError as e:  # another process is creating the schema
            if "locked" not in str(e) or attempt == 19:
                raise
            time.sleep(0.1 * (attempt + 1))
    return con


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


def upsert(home: Path, record: dict) -> None:
    row = _row(record)
    cols = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    con = connect(home)
    try:
        con.execute("BEGIN IMMEDIATE")
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
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:  # the failed statement ended the transaction (a full disk)
            pass
        raise
    finally:
        con.close()


def query(
    home: Path,
    env: str | None = None,
    algo: str | None = None,
    status: str | None = None,
    grep: str | None = None,
    tag: str | None = None,
    limit: int | None = None,
) -> list[dict]:
    if not (home / "index.sqlite").exists():
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
    try:
        con = connect(home)
        try:
            rows = [dict(r) for r in con.execute(sql, args)]
        finally:
            con.close()
    except sqlite3.OperationalError:  # e.g. a full disk: WAL can't open; read the run folders
        rows = _scan(home, env, algo, grep, tag, limit)
    for r in rows:  # a dead launcher leaves `running` behind; report it as failed
        if r["status"] == "running":
            r["status"] = reconcile({"status": "running", "pid": r["pid"], "host": r["host"]})[
                "status"
            ]
    if status:
        rows = [r for r in rows if r["status"] == status]
    return rows


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


def reindex(home: Path) -> int:
    """Rebuild the index from the run directories; returns the number of runs indexed."""
    n = 0
    for d in run_dirs(home):
        try:
            upsert(home, load_run(d))
            n += 1
        except Exception:  # noqa: BLE001 — a corrupt run is skipped here; `show` reports it
            continue
    return n


def used_seeds(home: Path, env: str) -> dict[int, list[str]]:
    """{seed: [run ids]} of every archived run on `env`, any algorithm (fresh-seed checks)."""
    if not (home / "index.sqlite").exists():
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
