"""The lab journal: notes and runs on one timeline, grouped the way Rahtz kept his work log.

Rahtz's log had four parts: what am I working on right now (focus); thinking out loud
(hypotheses, what to try next); which runs are going and what question each answers; and the
results. The archive already knows the runs, their questions (`-m`) and outcomes, so a note is
the only thing to write by hand:

    backflip note --focus "get Pendulum to -200 with PPO"
    backflip note "hypothesis: reward scale too large; the value loss is 1e4"
    backflip note --run 20261122-0756 "entropy collapsed by 10k steps"   # attached to a run

Notes live in `<home>/journal.jsonl` (append-only, one JSON object per line, flushed and synced
before the command returns). `build` assembles the journal; `to_markdown` prints it.

Compute accounting: each seed records its process CPU time (`cpu_s` in status.json); a run's
CPU hours are their sum (older runs without it count wall time, one core per seed), GPU hours the
wall time of seeds that ran on a CUDA device. Totals per run, per tag and overall, with an
optional price per hour (Rahtz's compute bill was $850 he had not seen coming).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from backflip import jsonout
from backflip.errors import UserError
from backflip.runs import index
from backflip.runs.archive import load_run
from backflip.runs.layout import INDEX
from backflip.summary import result_line

JOURNAL_FILE = "journal.jsonl"
KINDS = ("focus", "thought", "result")


# --- notes --------------------------------------------------------------------------------------


def add_note(home: Path, text: str, kind: str = "thought", run: str | None = None) -> dict:
    """Append one note to the journal and return it (with its id and time)."""
    text = text.strip()
    if not text:
        raise UserError("a note needs some text")
    if kind not in KINDS:
        raise UserError(f"note kind must be one of {', '.join(KINDS)}, got {kind!r}")
    note = {
        "id": secrets.token_hex(4),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "kind": kind,
        "text": text,
        "run": run,
    }
    home.mkdir(parents=True, exist_ok=True)
    line = jsonout.dumps(note) + "\n"
    # One write with O_APPEND: concurrent notes never interleave within a line.
    fd = os.open(home / JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return note


def read_notes(home: Path, since: datetime | None = None) -> list[dict]:
    """Every note (oldest first), skipping lines that are not valid notes (a torn last line)."""
    path = home / JOURNAL_FILE
    if not path.exists():
        return []
    notes = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            note = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(note, dict) or "text" not in note:
            continue
        if since is not None and _when(note.get("time")) < since:
            continue
        notes.append(note)
    return notes


def notes_for_run(home: Path, run_id: str) -> list[dict]:
    return [n for n in read_notes(home) if n.get("run") == run_id]


def _when(text: str | None) -> datetime:
    try:
        t = datetime.fromisoformat(text or "")
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def parse_since(text: str | None) -> datetime | None:
    """`2026-11-20`, `2026-11-20T08:00`, `7d`, `12h`, `today` or `yesterday` -> a UTC time."""
    if not text:
        return None
    text = text.strip().lower()
    now = datetime.now(UTC)
    if text in ("today", "yesterday"):
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return day - timedelta(days=1) if text == "yesterday" else day
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([dhm])", text)
    if m:
        unit = {"d": "days", "h": "hours", "m": "minutes"}[m.group(2)]
        return now - timedelta(**{unit: float(m.group(1))})
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"--since: expected a date like 2026-11-20, a time, or 7d / 12h / today, got {text!r}"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


# --- compute ------------------------------------------------------------------------------------


def _seed_seconds(seed: dict) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of one seed; a running seed counts wall time up to now."""
    wall = seed.get("wall_s")
    if seed.get("status") == "running" and seed.get("started"):
        wall = time.time() - _when(seed["started"]).timestamp()
    wall = float(wall or 0.0)
    cpu = seed.get("cpu_s")
    return (float(cpu) if cpu is not None else wall), wall


def run_usage(record: dict) -> dict:
    """CPU hours and GPU hours of one run (see the module docstring for what counts)."""
    device = str(record.get("config", {}).get("run", {}).get("device", "cpu"))
    cpu = gpu = 0.0
    for seed in record.get("seeds", []):
        if not isinstance(seed, dict):
            continue
        c, w = _seed_seconds(seed)
        cpu += c
        if device.startswith("cuda"):
            gpu += w
    return {"cpu_h": cpu / 3600, "gpu_h": gpu / 3600}


def cost(usage: dict, cpu_price: float | None, gpu_price: float | None) -> float | None:
    if cpu_price is None and gpu_price is None:
        return None
    return usage["cpu_h"] * (cpu_price or 0.0) + usage["gpu_h"] * (gpu_price or 0.0)


def prices_from_env() -> tuple[float | None, float | None]:
    """Default prices per hour from BACKFLIP_CPU_PRICE / BACKFLIP_GPU_PRICE."""

    def read(name):
        value = os.environ.get(name)
        if not value:
            return None
        try:
            return float(value)
        except ValueError:
            raise UserError(f"{name} must be a number (price per hour), got {value!r}") from None

    return read("BACKFLIP_CPU_PRICE"), read("BACKFLIP_GPU_PRICE")


# --- the journal --------------------------------------------------------------------------------


def _records(home: Path) -> list[dict]:
    """Every run record, newest first: from the index, re-read from disk while running."""
    out = []
    for row in index.query(home):
        try:
            record = json.loads(row["record"])
        except (TypeError, json.JSONDecodeError):
            continue
        record["status"] = row["status"]
        if row["status"] == "running" or not record.get("seeds"):
            try:
                record = load_run(home / row["id"])
            except UserError:
                pass
        out.append(record)
    return out


def _findings_summary(home: Path, run_id: str) -> str | None:
    # the doctor's package loads its rules (scipy): only when a journal is built
    from backflip.doctor.findings import read_findings

    data = read_findings(home / run_id)
    if not data or not data.get("findings"):
        return None
    counts: dict[str, int] = {}
    for f in data["findings"]:
        counts[f.get("severity", "?")] = counts.get(f.get("severity", "?"), 0) + 1
    return ", ".join(f"{n} {sev}{'s' * (n != 1)}" for sev, n in sorted(counts.items()))


def build(
    home: Path,
    since: datetime | None = None,
    cpu_price: float | None = None,
    gpu_price: float | None = None,
) -> dict:
    """The journal as plain data: focus, thoughts, ongoing runs, results by env, timeline, compute."""
    notes = read_notes(home)
    by_run: dict[str, list[dict]] = {}
    for n in notes:
        if n.get("run"):
            by_run.setdefault(n["run"], []).append(n)
    focus_notes = [n for n in notes if n.get("kind") == "focus"]
    in_window = [n for n in notes if since is None or _when(n.get("time")) >= since]

    runs = []
    for r in _records(home):
        created, ended = _when(r.get("created")), _when(r.get("ended"))
        if since is not None and r["status"] != "running" and max(created, ended) < since:
            continue
        usage = run_usage(r)
        runs.append(
            {
                "id": r["id"],
                "algo": r.get("algo"),
                "env": r.get("env"),
                "status": r["status"],
                "question": r.get("message") or "",
                "tags": r.get("tags") or [],
                "created": r.get("created"),
                "ended": r.get("ended"),
                "surprise": (r.get("premortem") or {}).get("surprise"),
                "outcome": result_line(r.get("results") or {}) if r.get("results") else None,
                "error": next(
                    (
                        s.get("error")
                        for s in r.get("seeds", [])
                        if isinstance(s, dict) and s.get("error")
                    ),
                    None,
                ),
                "findings": _findings_summary(home, r["id"]),
                "notes": by_run.get(r["id"], []),
                "usage": usage,
                "cost": cost(usage, cpu_price, gpu_price),
                "steps": r.get("config", {}).get("steps"),
                "n_seeds": len(r.get("config", {}).get("seeds", [])),
            }
        )

    results: dict[str, list[dict]] = {}
    for r in runs:
        if r["status"] != "running":
            results.setdefault(r["env"] or "?", []).append(r)

    tags: dict[str, dict] = {}
    for r in runs:
        for tag in r["tags"] or ["(untagged)"]:
            t = tags.setdefault(tag, {"runs": 0, "cpu_h": 0.0, "gpu_h": 0.0})
            t["runs"] += 1
            t["cpu_h"] += r["usage"]["cpu_h"]
            t["gpu_h"] += r["usage"]["gpu_h"]
    for t in tags.values():
        t["cost"] = cost(t, cpu_price, gpu_price)
    total = {
        "runs": len(runs),
        "cpu_h": sum(r["usage"]["cpu_h"] for r in runs),
        "gpu_h": sum(r["usage"]["gpu_h"] for r in runs),
    }
    total["cost"] = cost(total, cpu_price, gpu_price)

    timeline = [{"time": n["time"], "kind": "note", "note": n} for n in in_window]
    for r in runs:
        timeline.append({"time": r["created"], "kind": "run started", "run": r})
        if r["ended"]:
            timeline.append({"time": r["ended"], "kind": f"run {r['status']}", "run": r})
    timeline.sort(key=lambda e: _when(e["time"]), reverse=True)

    return {
        "home": str(home),
        "since": since.isoformat(timespec="minutes") if since else None,
        "focus": focus_notes[-1] if focus_notes else None,
        "earlier_focus": list(reversed(focus_notes[:-1]))[:5],
        "thoughts": [n for n in reversed(in_window) if n.get("kind") == "thought"],
        "result_notes": [n for n in reversed(in_window) if n.get("kind") == "result"],
        "ongoing": [r for r in runs if r["status"] == "running"],
        "results": dict(sorted(results.items())),
        "timeline": timeline,
        "compute": {
            "runs": runs,
            "tags": dict(sorted(tags.items())),
            "total": total,
            "cpu_price": cpu_price,
            "gpu_price": gpu_price,
        },
    }


# --- text ---------------------------------------------------------------------------------------


def _hours(h: float) -> str:
    return f"{h:.2f}" if h < 10 else f"{h:,.1f}"


def _money(x: float | None) -> str:
    return "" if x is None else f"${x:,.2f}"


def _note_line(n: dict) -> str:
    run = f" (run {n['run']})" if n.get("run") else ""
    return f"- {n['time'][:16].replace('T', ' ')} — {n['text']}{run}"


def to_markdown(j: dict) -> str:
    """The journal as Markdown (`backflip journal --md`; the terminal view renders the same)."""
    lines = ["# Lab journal", ""]
    if j["since"]:
        lines += [f"Since {j['since']}.", ""]
    lines += ["## Current focus", ""]
    if j["focus"]:
        lines.append(f"**{j['focus']['text']}** (since {j['focus']['time'][:10]})")
        for n in j["earlier_focus"]:
            lines.append(f"- earlier: {n['text']} ({n['time'][:10]})")
    else:
        lines.append('_none set — `backflip note --focus "what I am working on"`_')
    lines += ["", "## Thoughts and hypotheses", ""]
    lines += [_note_line(n) for n in j["thoughts"]] or ['_none — `backflip note "..."`_']
    lines += ["", "## Ongoing runs", ""]
    if not j["ongoing"]:
        lines.append("_none_")
    for r in j["ongoing"]:
        q = r["question"] or "(no question given: -m)"
        surprise = f" Surprise if it fails: {r['surprise']}." if r["surprise"] else ""
        lines.append(f"- `{r['id']}` {r['algo']} on {r['env']} — **{q}**{surprise}")
    lines += ["", "## Results", ""]
    if j["result_notes"]:
        lines += [_note_line(n) for n in j["result_notes"]] + [""]
    if not j["results"]:
        lines.append("_no finished runs_")
    for env, runs in j["results"].items():
        lines += [f"### {env}", ""]
        for r in runs:
            q = r["question"] or "(no question)"
            outcome = r["outcome"] or r["error"] or "no result"
            lines.append(f"- `{r['id']}` {r['algo']}, {r['status']} — **{q}** → {outcome}")
            if r["findings"]:
                lines.append(f"  - doctor: {r['findings']}")
            if r["surprise"]:
                lines.append(f"  - surprise if it failed (asked at launch): {r['surprise']}")
            lines += [f"  - note: {n['text']}" for n in r["notes"]]
        lines.append("")
    c = j["compute"]
    priced = c["cpu_price"] is not None or c["gpu_price"] is not None
    lines += ["## Compute", ""]
    head = "| | runs | CPU h | GPU h |" + (" cost |" if priced else "")
    lines += [head, "|---|---|---|---|" + ("---|" if priced else "")]
    for tag, t in c["tags"].items():
        row = f"| tag `{tag}` | {t['runs']} | {_hours(t['cpu_h'])} | {_hours(t['gpu_h'])} |"
        lines.append(row + (f" {_money(t['cost'])} |" if priced else ""))
    t = c["total"]
    row = f"| **total** | {t['runs']} | {_hours(t['cpu_h'])} | {_hours(t['gpu_h'])} |"
    lines.append(row + (f" {_money(t['cost'])} |" if priced else ""))
    if priced:
        lines += [
            "",
            f"Prices per hour: CPU {_money(c['cpu_price'] or 0)}, GPU {_money(c['gpu_price'] or 0)}.",
        ]
    lines += ["", "## Timeline", ""]
    for e in j["timeline"][:200]:
        when = (e["time"] or "")[:16].replace("T", " ")
        if e["kind"] == "note":
            n = e["note"]
            lines.append(f"- {when} note ({n['kind']}): {n['text']}")
        else:
            r = e["run"]
            extra = f" → {r['outcome']}" if e["kind"] != "run started" and r["outcome"] else ""
            q = f": {r['question']}" if r["question"] else ""
            lines.append(f"- {when} {e['kind']} `{r['id']}` {r['algo']} on {r['env']}{q}{extra}")
    return "\n".join(lines) + "\n"


# --- the pre-mortem question before long runs --------------------------------------------------------

ASK_ENV = "BACKFLIP_ASK_AFTER_MIN"
ASK_AFTER_MIN = 30.0  # ask before runs expected to take longer than this many minutes
FALLBACK_SPS = 1000.0  # steps/s per seed assumed when no earlier run of the algo/env exists
QUESTION = "How surprised would you be if this run failed? (1 not at all … 5 very; Enter skips) "


def expected_seconds(home: Path, algo: str, env: str, steps: int, n_seeds: int, workers: int):
    """Expected wall time of a run: median steps/s of earlier seeds of the same algo and env."""
    sps = []
    if (home / INDEX).exists():
        con = index.connect(home)
        try:
            sps = [
                r[0]
                for r in con.execute(
                    "SELECT s.sps FROM seeds s JOIN runs r ON r.id = s.run_id WHERE r.algo = ? "
                    "AND r.env = ? AND s.status = 'finished' AND s.sps > 0 "
                    "ORDER BY r.created DESC LIMIT 50",
                    (algo, env),
                )
            ]
        finally:
            con.close()
    rate = statistics.median(sps) if sps else FALLBACK_SPS
    return steps / rate * math.ceil(n_seeds / max(1, workers))


def ask_after_seconds() -> float | None:
    """The threshold from $BACKFLIP_ASK_AFTER_MIN (minutes; `off` never asks), else 30 min."""
    value = os.environ.get(ASK_ENV, "").strip().lower()
    if not value:
        return ASK_AFTER_MIN * 60
    if value in ("off", "never", "no", "false"):
        return None
    try:
        return float(value) * 60
    except ValueError:
        raise UserError(f"{ASK_ENV} must be a number of minutes or `off`, got {value!r}") from None


def interactive() -> bool:
    """A person at a terminal: stdin and stderr are TTYs and this is not CI."""
    return sys.stdin.isatty() and sys.stderr.isatty() and not os.environ.get("CI")


def premortem(expected_s: float, answer: str | None = None, ask: bool = True) -> dict | None:
    """Rahtz's pre-mortem: the answer to QUESTION, asked when the run is expected to be long.

    `answer` given on the command line (`--surprise`) is stored as is. Otherwise the question is
    asked on the terminal only when `ask`, a person is there, and `expected_s` exceeds the
    threshold. Returns the record stored in run.json as `premortem`, or None.
    """
    record = {"expected_s": round(expected_s, 1), "asked": _now()}
    if answer is not None and answer.strip():
        return {**record, "surprise": answer.strip(), "asked": None}
    threshold = ask_after_seconds()
    if not ask or threshold is None or expected_s <= threshold or not interactive():
        return None
    print(
        f"This run is expected to take about {expected_s / 60:.0f} min.",
        file=sys.stderr,
        flush=True,
    )
    print(QUESTION, end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return None
    if line.strip()[0] in "12":  # Rahtz's script: not surprised -> imagine the failure first
        print(
            "Not very surprised: imagine it has failed — what went wrong? If something comes to "
            "mind, Ctrl-C now and fix it first.",
            file=sys.stderr,
            flush=True,
        )
    return {**record, "surprise": line.strip()}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
