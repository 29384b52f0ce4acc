"""The preference database: segments, queries and labels in one SQLite file per seed.

    seeds/<seed>/prefs.sqlite
      meta(key, value)        env id, observation/action shapes, segment length, label target
      segments(id, ...)       a clip of experience: observations, actions, true rewards (blobs)
      queries(id, left, right, status, label, ...)
                              a pair of segments shown to a labeler; status pending, labeled or
                              skipped ("can't tell"); label 1 = left better, 0 = right, 0.5 = equal

Durability: WAL journal with `synchronous=FULL`, and every write is its own committed transaction
before the call returns, so a label that a labeler was told about survives a crash of either the
trainer or the labeling page (they are separate processes sharing the file). A later run reuses
the labels with `import_from` (`backflip prefs train --prefs FROM_RUN`): segments travel with
their queries, so the labels mean the same thing in the new run.
"""

from __future__ import annotations

import io
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    created REAL NOT NULL,
    true_return REAL NOT NULL,
    obs BLOB NOT NULL,
    actions BLOB NOT NULL,
    rewards BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS queries (
    id INTEGER PRIMARY KEY,
    left INTEGER NOT NULL REFERENCES segments(id),
    right INTEGER NOT NULL REFERENCES segments(id),
    step INTEGER NOT NULL,
    created REAL NOT NULL,
    selection TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'labeled', 'skipped')),
    label REAL CHECK (label IN (0.0, 0.5, 1.0)),
    labeler TEXT,
    labeled_at REAL,
    origin TEXT
);
CREATE INDEX IF NOT EXISTS queries_status ON queries (status, id);
"""

LABELS = {"left": 1.0, "right": 0.0, "equal": 0.5}


@dataclass
class Segment:
    """`length` consecutive steps of one env copy: obs[t], actions[t], true rewards[t]."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    step: int = 0
    id: int | None = None

    @property
    def true_return(self) -> float:
        return float(np.sum(self.rewards))


def pack(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return zlib.compress(buf.getvalue(), 1)


def unpack(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(zlib.decompress(b)), allow_pickle=False)


class PreferenceDB:
    """One SQLite preference database; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
        self.conn.execute("PRAGMA foreign_keys=ON")
        with self._lock, self.conn:
            self.conn.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # -- meta ----------------------------------------------------------------------------------

    def set_meta(self, **values) -> None:
        with self._lock, self.conn:
            self.conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, str(v)) for k, v in values.items()],
            )

    def meta(self) -> dict[str, str]:
        with self._lock:
            return dict(self.conn.execute("SELECT key, value FROM meta"))

    # -- writing -------------------------------------------------------------------------------

    def _insert_segment(self, seg: Segment) -> int:
        cur = self.conn.execute(
            "INSERT INTO segments (step, created, true_return, obs, actions, rewards) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                int(seg.step),
                time.time(),
                seg.true_return,
                pack(seg.obs),
                pack(seg.actions),
                pack(seg.rewards),
            ),
        )
        return int(cur.lastrowid)

    def add_query(
        self,
        left: Segment,
        right: Segment,
        step: int,
        selection: str,
        label: float | None = None,
        labeler: str | None = None,
        origin: str | None = None,
    ) -> int:
        """Store a pair (and its segments, if new) as a query; with `label`, already answered.

        Returns the query id once the transaction is committed.
        """
        with self._lock, self.conn:
            for seg in (left, right):
                if seg.id is None:
                    seg.id = self._insert_segment(seg)
            now = time.time()
            cur = self.conn.execute(
                "INSERT INTO queries (left, right, step, created, selection, status, label, "
                "labeler, labeled_at, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    left.id,
                    right.id,
                    int(step),
                    now,
                    selection,
                    "pending" if label is None else "labeled",
                    label,
                    labeler,
                    None if label is None else now,
                    origin,
                ),
            )
            return int(cur.lastrowid)

    def answer(self, query_id: int, choice: str, labeler: str = "human") -> None:
        """Record the labeler's answer: left, right, equal, or skip ("can't tell").

        Committed before returning. Answering a query that is no longer pending is refused.
        """
        if choice not in (*LABELS, "skip"):
            raise ValueError(f"choice must be left, right, equal or skip, got {choice!r}")
        status, label = ("skipped", None) if choice == "skip" else ("labeled", LABELS[choice])
        with self._lock, self.conn:
            cur = self.conn.execute(
                "UPDATE queries SET status = ?, label = ?, labeler = ?, labeled_at = ? "
                "WHERE id = ? AND status = 'pending'",
                (status, label, labeler, time.time(), int(query_id)),
            )
            if cur.rowcount != 1:
                raise KeyError(f"query {query_id} is not pending")

    def undo(self, labeler: str = "human") -> int | None:
        """Make the most recent answer of `labeler` pending again; its query id (None if none)."""
        with self._lock, self.conn:
            row = self.conn.execute(
                "SELECT id FROM queries WHERE labeler = ? AND status != 'pending' "
                "ORDER BY labeled_at DESC, id DESC LIMIT 1",
                (labeler,),
            ).fetchone()
            if row is None:
                return None
            self.conn.execute(
                "UPDATE queries SET status = 'pending', label = NULL, labeler = NULL, "
                "labeled_at = NULL WHERE id = ?",
                row,
            )
            return int(row[0])

    # -- reading -------------------------------------------------------------------------------

    def labels(self, limit: int | None = None) -> list[tuple[int, int, int, float]]:
        """(query id, left segment id, right segment id, label) of answered queries, oldest
        first; with `limit`, only the most recent `limit`."""
        sql = "SELECT id, left, right, label FROM queries WHERE status = 'labeled' ORDER BY id"
        with self._lock:
            rows = self.conn.execute(sql).fetchall()
        return rows[-limit:] if limit else rows

    def pending(self, limit: int = 1) -> list[tuple[int, int, int]]:
        """(query id, left, right) of unanswered queries, oldest first."""
        with self._lock:
            return self.conn.execute(
                "SELECT id, left, right FROM queries WHERE status = 'pending' ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()

    def segment(self, seg_id: int) -> Segment:
        with self._lock:
            row = self.conn.execute(
                "SELECT obs, actions, rewards, step FROM segments WHERE id = ?", (int(seg_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"no segment {seg_id}")
        return Segment(unpack(row[0]), unpack(row[1]), unpack(row[2]), row[3], int(seg_id))

    def counts(self) -> dict[str, int]:
        with self._lock:
            by_status = dict(
                self.conn.execute("SELECT status, COUNT(*) FROM queries GROUP BY status")
            )
            segments = self.conn.execute("SELECT COUNT(*) FROM segments").fetchone()[0]
        return {
            "labeled": by_status.get("labeled", 0),
            "pending": by_status.get("pending", 0),
            "skipped": by_status.get("skipped", 0),
            "segments": segments,
        }

    def last_label_time(self) -> float | None:
        with self._lock:
            row = self.conn.execute(
                "SELECT MAX(labeled_at) FROM queries WHERE status != 'pending'"
            ).fetchone()
        return row[0]

    def size_bytes(self) -> int:
        """The database on disk, write-ahead log included."""
        return sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        )

    # -- reuse ---------------------------------------------------------------------------------

    def import_from(self, other: PreferenceDB, origin: str) -> int:
        """Copy every answered query of `other` (with its segments) into this database."""
        copied = 0
        seg_map: dict[int, Segment] = {}
        for _, left, right, label in other.labels():
            for sid in (left, right):
                if sid not in seg_map:
                    seg = other.segment(sid)
                    seg.id = None
                    seg_map[sid] = seg
            self.add_query(
                seg_map[left], seg_map[right], 0, "imported", label, "imported", origin=origin
            )
            copied += 1
        return copied
