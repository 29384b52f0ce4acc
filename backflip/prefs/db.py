"""The preference database: segments, queries, answers and labels in one SQLite file per seed.

    seeds/<seed>/prefs.sqlite
      meta(key, value)        env id, shapes, segment length, label target, the task statement,
                              the reward model's latest validation accuracy, whether (and by
                              whom) labeling was ended early
      segments(id, ...)       a clip of experience: observations, actions, true rewards (blobs),
                              and which of its steps were taken in the absorbing state of a
                              fixed horizon (`absorbing`, NULL: none; envs/horizon.py), and
                              for people the env's own rendered frames (`clip`: one PNG, the
                              frames stacked top to bottom; NULL: not rendered)
      queries(id, left, right, status, label, needs, ...)
                              a pair of segments shown to labelers; status pending, labeled or
                              skipped ("can't tell"); label in [0, 1]: 1 = left better, 0 = right,
                              0.5 = equal; `needs` people must answer it (1, or 2 for a query
                              shared between two people)
      answers(query, person, choice, shown_at, answered_at)
                              each person's answer, with when the pair was shown and answered

**From answers to a label** (`combine`): once a query has `needs` answers, "can't tell" answers
are dropped and the label is the mean of the rest (left = 1, equal = 0.5, right = 0), the share
of people who preferred the left clip: the label distribution μ of Christiano et al. (2017).
Two people who agree give their answer; left against right gives 0.5, as if both had said
"equal"; left and "can't tell" gives left. When every answer is "can't tell" the query is skipped.

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
    rewards BLOB NOT NULL,
    absorbing BLOB,
    clip BLOB
);
CREATE TABLE IF NOT EXISTS queries (
    id INTEGER PRIMARY KEY,
    left INTEGER NOT NULL REFERENCES segments(id),
    right INTEGER NOT NULL REFERENCES segments(id),
    step INTEGER NOT NULL,
    created REAL NOT NULL,
    selection TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'labeled', 'skipped')),
    label REAL CHECK (label >= 0.0 AND label <= 1.0),
    labeler TEXT,
    labeled_at REAL,
    origin TEXT,
    needs INTEGER NOT NULL DEFAULT 1
);
"""
# created after the migration of an older `queries` table (see `PreferenceDB._migrate`)
ANSWERS = """
CREATE TABLE IF NOT EXISTS answers (
    id INTEGER PRIMARY KEY,
    query INTEGER NOT NULL REFERENCES queries(id),
    person TEXT NOT NULL,
    choice TEXT NOT NULL CHECK (choice IN ('left', 'right', 'equal', 'skip')),
    shown_at REAL,
    answered_at REAL NOT NULL,
    answer_id TEXT,
    UNIQUE (query, person)
);
CREATE INDEX IF NOT EXISTS queries_status ON queries (status, id);
CREATE INDEX IF NOT EXISTS answers_person ON answers (person, answered_at);
"""
QUERY_COLUMNS = (
    "id, left, right, step, created, selection, status, label, labeler, labeled_at, origin"
)

LABELS = {"left": 1.0, "right": 0.0, "equal": 0.5}
CHOICES = (*LABELS, "skip")


def combine(choices: list[str]) -> tuple[str, float | None]:
    """(status, label) of a query from its people's answers (the rule in the module docstring)."""
    values = [LABELS[c] for c in choices if c != "skip"]
    if not values:
        return "skipped", None
    return "labeled", float(np.mean(values))


@dataclass
class Segment:
    """`length` consecutive steps of one env copy: obs[t], actions[t], true rewards[t], and
    `predicted`, the learned reward the policy was paid over them (None where no model paid it:
    random-policy clips, segments read back from the database). `absorbing[t]`: step t was taken
    in the absorbing state of a fixed horizon, after the env ended the episode (None: no step
    was; `envs/horizon.py`)."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    step: int = 0
    id: int | None = None
    predicted: float | None = None
    absorbing: np.ndarray | None = None
    clip: bytes | None = None
    """the env's rendered frames of the segment, as one PNG (frames stacked vertically), when a
    person labels the run (`prefs/frames.py: png`)"""

    def absorbed(self) -> np.ndarray:
        """`absorbing` as a boolean per step (all False when None)."""
        if self.absorbing is None:
            return np.zeros(len(self.rewards), bool)
        return np.asarray(self.absorbing, bool)

    @property
    def true_return(self) -> float:
        return float(np.sum(self.rewards))


def pack(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return zlib.compress(buf.getvalue(), 1)


def unpack(b: bytes) -> np.ndarray:
    return np.load(io.BytesIO(zlib.decompress(b)), allow_pickle=False)


class AlreadyTrained(Exception):
    """An answer the reward model has already trained on (`PreferenceDB.undo`)."""

    def __init__(self, query: int):
        super().__init__(f"the answer to query {query} was already used to train the reward model")
        self.query = query


class PreferenceDB:
    """One SQLite preference database; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")  # a commit is on disk when it returns
        with self._lock, self.conn:
            self.conn.executescript(SCHEMA)
            self._migrate()
            self.conn.executescript(ANSWERS)
            (answers,) = self.conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'answers'"
            ).fetchone()
            if "answer_id" not in answers:  # written before answers had the page's ids
                self.conn.execute("ALTER TABLE answers ADD COLUMN answer_id TEXT")
            self.conn.execute(
                "CREATE UNIQUE INDEX IF NOT EXISTS answers_answer_id ON answers (answer_id)"
            )
        self.conn.execute("PRAGMA foreign_keys=ON")

    def _migrate(self) -> None:
        """Bring a database written before answers were kept per person up to this schema: its
        `queries` table allowed only hard labels and had no `needs` column; and one written
        before segments kept their absorbing steps (none were: NULL)."""
        (segments,) = self.conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'segments'"
        ).fetchone()
        for column in ("absorbing", "clip"):
            if column not in segments:
                self.conn.execute(f"ALTER TABLE segments ADD COLUMN {column} BLOB")
        (sql,) = self.conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'queries'"
        ).fetchone()
        if "needs" in sql:
            return
        self.conn.execute("ALTER TABLE queries RENAME TO queries_v1")
        self.conn.execute(SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS queries") :])
        self.conn.execute(
            f"INSERT INTO queries ({QUERY_COLUMNS}) SELECT {QUERY_COLUMNS} FROM queries_v1"
        )
        self.conn.execute("DROP TABLE queries_v1")

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
            "INSERT INTO segments "
            "(step, created, true_return, obs, actions, rewards, absorbing, clip) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                int(seg.step),
                time.time(),
                seg.true_return,
                pack(seg.obs),
                pack(seg.actions),
                pack(seg.rewards),
                pack(seg.absorbed()) if seg.absorbed().any() else None,
                seg.clip,
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
        needs: int = 1,
        skipped: bool = False,
    ) -> int:
        """Store a pair (and its segments, if new) as a query; with `label`, already answered
        (by `labeler`, e.g. a simulated teacher); with `skipped`, already skipped by `labeler`
        ("can't tell"); otherwise it waits for `needs` people.

        Returns the query id once the transaction is committed.
        """
        return self.add_queries(
            [(left, right, label, skipped)], step, selection, labeler, origin, needs
        )[0]

    def add_queries(
        self,
        pairs: list[tuple[Segment, Segment, float | None, bool]],
        step: int,
        selection: str,
        labeler: str | None = None,
        origin: str | None = None,
        needs: int = 1,
    ) -> list[int]:
        """`add_query` for many pairs, (left, right, label, skipped) each, in one transaction:
        all of them or none. A commit waits for the disk (synchronous=FULL: ~5 ms here), so a
        simulated teacher's answers, which arrive together, are written together (one commit
        per label was 1.6 s of a 30k-step preference run with 300 labels).

        Returns the query ids, in order, once the transaction is committed.
        """
        ids: list[int] = []
        new: list[Segment] = []  # segments given an id here: none of them stored if it fails
        try:
            self._insert_queries(pairs, step, selection, labeler, origin, needs, ids, new)
        except BaseException:
            for seg in new:
                seg.id = None
            raise
        return ids

    def _insert_queries(self, pairs, step, selection, labeler, origin, needs, ids, new) -> None:
        with self._lock, self.conn:
            now = time.time()
            for left, right, label, skipped in pairs:
                for seg in (left, right):
                    if seg.id is None:
                        seg.id = self._insert_segment(seg)
                        new.append(seg)
                answered = label is not None or skipped
                status = "skipped" if skipped else "pending" if label is None else "labeled"
                cur = self.conn.execute(
                    "INSERT INTO queries (left, right, step, created, selection, status, label, "
                    "labeler, labeled_at, origin, needs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        left.id,
                        right.id,
                        int(step),
                        now,
                        selection,
                        status,
                        None if skipped else label,
                        labeler,
                        now if answered else None,
                        origin,
                        int(needs),
                    ),
                )
                ids.append(int(cur.lastrowid))

    def answer(
        self,
        query_id: int,
        choice: str,
        person: str = "human",
        shown_at: float | None = None,
        answer_id: str | None = None,
    ) -> str:
        """Record `person`'s answer to a query: left, right, equal, or skip ("can't tell"), with
        when the pair was shown to them. When the query has as many answers as it `needs`, they
        become its label (`combine`). Committed before returning; the query's status after it.

        `answer_id` (the page's own id for the answer) makes it idempotent: an answer sent again
        (the page kept it while the server was away, and cannot know whether it arrived) is
        recorded once, and the second call returns the query's status.

        Refused (KeyError, with the reason) for an unknown query, one that is no longer pending,
        or one this person has answered already.
        """
        if choice not in CHOICES:
            raise ValueError(f"choice must be left, right, equal or skip, got {choice!r}")
        now = time.time()
        with self._lock, self.conn:
            if answer_id is not None:
                known = self.conn.execute(
                    "SELECT a.query, q.status FROM answers a JOIN queries q ON q.id = a.query "
                    "WHERE a.answer_id = ?",
                    (answer_id,),
                ).fetchone()
                if known is not None:
                    return known[1]
            row = self.conn.execute(
                "SELECT status, needs FROM queries WHERE id = ?", (int(query_id),)
            ).fetchone()
            if row is None:
                raise KeyError(f"no query {query_id}")
            if row[0] != "pending":
                raise KeyError(f"query {query_id} is not pending (already answered)")
            try:
                self.conn.execute(
                    "INSERT INTO answers (query, person, choice, shown_at, answered_at, "
                    "answer_id) VALUES (?, ?, ?, ?, ?, ?)",
                    (int(query_id), person, choice, shown_at, now, answer_id),
                )
            except sqlite3.IntegrityError:
                raise KeyError(f"{person} has already answered query {query_id}") from None
            answers = self.conn.execute(
                "SELECT choice, person FROM answers WHERE query = ? ORDER BY id", (int(query_id),)
            ).fetchall()
            if len(answers) < row[1]:
                return "pending"
            status, label = combine([c for c, _ in answers])
            self.conn.execute(
                "UPDATE queries SET status = ?, label = ?, labeler = ?, labeled_at = ? "
                "WHERE id = ?",
                (status, label, "+".join(p for _, p in answers), now, int(query_id)),
            )
            return status

    def undo(
        self, person: str = "human", query: int | None = None, trained_at: float | None = None
    ) -> int | None:
        """Take back `person`'s answer to `query` (None: their most recent); its query is pending
        again (and its label, if that answer completed it, is gone). The query id, or None when
        there is none. With `trained_at`, an answer given before then (the reward model has
        trained on it) is refused: `AlreadyTrained`."""
        with self._lock, self.conn:
            if query is None:
                row = self.conn.execute(
                    "SELECT id, query, answered_at FROM answers WHERE person = ? "
                    "ORDER BY answered_at DESC, id DESC LIMIT 1",
                    (person,),
                ).fetchone()
            else:
                row = self.conn.execute(
                    "SELECT id, query, answered_at FROM answers WHERE person = ? AND query = ?",
                    (person, int(query)),
                ).fetchone()
            if row is None:
                return None
            if trained_at is not None and row[2] <= trained_at:
                raise AlreadyTrained(int(row[1]))
            self.conn.execute("DELETE FROM answers WHERE id = ?", (row[0],))
            self.conn.execute(
                "UPDATE queries SET status = 'pending', label = NULL, labeler = NULL, "
                "labeled_at = NULL WHERE id = ?",
                (row[1],),
            )
            return int(row[1])

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

    def next_queries(self, person: str, limit: int = 20) -> list[tuple[int, int, int]]:
        """(query id, left, right) of pending queries that `person` has not answered yet, oldest
        first."""
        with self._lock:
            return self.conn.execute(
                "SELECT id, left, right FROM queries q WHERE status = 'pending' AND NOT EXISTS "
                "(SELECT 1 FROM answers a WHERE a.query = q.id AND a.person = ?) "
                "ORDER BY id LIMIT ?",
                (person, limit),
            ).fetchall()

    def pair(self, query_id: int) -> tuple[int, int]:
        """The (left, right) segment ids of a query."""
        with self._lock:
            row = self.conn.execute(
                "SELECT left, right FROM queries WHERE id = ?", (int(query_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"no query {query_id}")
        return row

    def answers(self) -> list[dict]:
        """Every person's answers with the true returns of the two segments (for agreement,
        latency and label-rate statistics: `backflip.prefs.people`), oldest first."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT a.query, a.person, a.choice, a.shown_at, a.answered_at, "
                "l.true_return, r.true_return FROM answers a "
                "JOIN queries q ON q.id = a.query "
                "JOIN segments l ON l.id = q.left JOIN segments r ON r.id = q.right "
                "ORDER BY a.answered_at, a.id"
            ).fetchall()
        keys = ("query", "person", "choice", "shown_at", "answered_at", "left_true", "right_true")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def graded_answers(self) -> list[dict]:
        """Every answer to this database's queries with who gave it and the two segment ids,
        oldest first: each person's (the `answers` table; kind "person") and the labels of
        queries answered without people (kind "synthetic": a simulated teacher, by the spec in
        `labeler`, or "imported"). choice: left, right, equal, skip, or "mixed" for a label
        that is none of 1, 0.5, 0 (combined or imported answers)."""
        with self._lock:
            people = self.conn.execute(
                "SELECT a.person, a.choice, q.left, q.right FROM answers a "
                "JOIN queries q ON q.id = a.query ORDER BY a.answered_at, a.id"
            ).fetchall()
            synthetic = self.conn.execute(
                "SELECT COALESCE(q.labeler, ''), q.status, q.label, q.left, q.right "
                "FROM queries q WHERE q.status != 'pending' AND NOT EXISTS "
                "(SELECT 1 FROM answers a WHERE a.query = q.id) ORDER BY q.id"
            ).fetchall()
        out = [
            {"kind": "person", "who": p, "choice": c, "left": lt, "right": rt}
            for p, c, lt, rt in people
        ]
        by_label = {v: k for k, v in LABELS.items()}
        for who, status, label, lt, rt in synthetic:
            choice = "skip" if status == "skipped" else by_label.get(label, "mixed")
            out.append({"kind": "synthetic", "who": who, "choice": choice, "left": lt, "right": rt})
        return out

    def segment_rewards(self, seg_ids) -> dict[int, np.ndarray]:
        """The true rewards of segments, by id (without their observations)."""
        ids = sorted({int(i) for i in seg_ids})
        out = {}
        with self._lock:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = self.conn.execute(
                    f"SELECT id, rewards FROM segments WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                out.update({int(i): unpack(blob) for i, blob in rows})
        return out

    def clip(self, seg_id: int) -> bytes | None:
        """A segment's rendered frames (one PNG), or None when it has none."""
        with self._lock:
            row = self.conn.execute(
                "SELECT clip FROM segments WHERE id = ?", (int(seg_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"no segment {seg_id}")
        return row[0]

    def segment(self, seg_id: int) -> Segment:
        with self._lock:
            row = self.conn.execute(
                "SELECT obs, actions, rewards, step, absorbing FROM segments WHERE id = ?",
                (int(seg_id),),
            ).fetchone()
        if row is None:
            raise KeyError(f"no segment {seg_id}")
        absorbing = unpack(row[4]) if row[4] is not None else None
        return Segment(
            unpack(row[0]), unpack(row[1]), unpack(row[2]), row[3], int(seg_id), None, absorbing
        )

    def counts(self) -> dict[str, int]:
        """Queries by status, `equal` the labeled ones answered "equally good" (label 0.5), and
        the segments stored."""
        with self._lock:
            by_status = dict(
                self.conn.execute("SELECT status, COUNT(*) FROM queries GROUP BY status")
            )
            equal = self.conn.execute(
                "SELECT COUNT(*) FROM queries WHERE status = 'labeled' AND label = 0.5"
            ).fetchone()[0]
            segments = self.conn.execute("SELECT COUNT(*) FROM segments").fetchone()[0]
        return {
            "labeled": by_status.get("labeled", 0),
            "equal": equal,
            "pending": by_status.get("pending", 0),
            "skipped": by_status.get("skipped", 0),
            "segments": segments,
        }

    def shown(self) -> dict[str, int]:
        """The distinct segments of labeled queries, how many of them have a true return above
        and below 0, and how many hold an episode's end (a step in the absorbing state of a
        fixed horizon): what the reward model has been shown of gains, losses and ends."""
        with self._lock:
            shown, gains, losses, ends = self.conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(true_return > 0), 0), "
                "COALESCE(SUM(true_return < 0), 0), COALESCE(SUM(absorbing IS NOT NULL), 0) "
                "FROM segments WHERE id IN "
                "(SELECT left FROM queries WHERE status = 'labeled' "
                "UNION SELECT right FROM queries WHERE status = 'labeled')"
            ).fetchone()
        return {
            "labeled_segments": shown,
            "labeled_gains": gains,
            "labeled_losses": losses,
            "labeled_ends": ends,
        }

    def last_label_time(self) -> float | None:
        with self._lock:
            row = self.conn.execute(
                "SELECT MAX(labeled_at) FROM queries WHERE status != 'pending'"
            ).fetchone()
        return row[0]

    def answered(self) -> int:
        """Queries labeled or skipped (one query whatever the number of people it needed)."""
        with self._lock:
            return self.conn.execute(
                "SELECT COUNT(*) FROM queries WHERE status != 'pending'"
            ).fetchone()[0]

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
        seg_map: dict[int, Segment] = {}
        pairs = []
        for _, left, right, label in other.labels():
            for sid in (left, right):
                if sid not in seg_map:
                    seg = other.segment(sid)
                    seg.clip = other.clip(sid)
                    seg.id = None
                    seg_map[sid] = seg
            pairs.append((seg_map[left], seg_map[right], label, False))
        return len(self.add_queries(pairs, 0, "imported", "imported", origin=origin))


def preference_seeds(record: dict, seed: int | None = None) -> list[int]:
    """The seeds of the preference run `record` (run.json), or just `seed`: a UserError, in one
    line, when the run is of another kind or has no such seed (`label`, `fit-teacher`,
    `check-reward`)."""
    from backflip.config import run_kind
    from backflip.errors import UserError

    config = record.get("config", {})
    if run_kind(config) != "prefs":
        raise UserError(f"run {record['id']} is not a preference run (backflip prefs train ...)")
    seeds = list(config["seeds"])
    if seed is None:
        return seeds
    if seed not in seeds:
        raise UserError(f"run {record['id']} has seeds {seeds}, not {seed}")
    return [seed]
