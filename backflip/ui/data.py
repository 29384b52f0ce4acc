"""What the UI shows, read from the archive: plain dicts and lists, ready for JSON or a template.

Nothing here knows about HTTP. The archive stays the source of truth; `index.sqlite` answers the
listing, and the run directories answer everything else (live progress comes from the tail of
each seed's `metrics.csv`, so a running seed's step count is as fresh as its last metrics row).
"""

from __future__ import annotations

import math
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from backflip import curves, stats
from backflip.returns import (
    EVAL_RETURN,
    LEARNED_NOTE,
    TRAINING_RETURN,
    TRUE_RETURN,
    holds_learned_reward,
    is_preference_run,
    training_return,
)
from backflip.runs.archive import load_run, read_record, seed_status
from backflip.runs.layout import (
    BACKFLIP_PATCH,
    CHECKPOINTS,
    CODE_PATCH,
    INDEX,
    METRICS,
    PACKAGES,
    PREFS_DB,
    STDERR,
    STDOUT,
    VIDEOS,
    seed_dir,
)

MAX_POINTS = 600  # steps per metric sent to the run page; longer runs are sampled on a grid
GROUP_ORDER = ("eval", "rollout", "train", "env", "time", "sys")
PREFERRED_CURVES = (EVAL_RETURN, TRAINING_RETURN)
# A preference run's page opens on what tells whether it works: the task's return, then the
# reward model (does it generalize, does it track the task?), then the labels; every other
# prefs/ and reward_model/ chart follows in the same group, before the usual groups.
PREFERENCE_GROUP = "preferences"
PREFERENCE_FIRST = (
    TRUE_RETURN,
    EVAL_RETURN,
    "reward_model/val_acc",
    "reward_model/segment_corr",
    "reward_model/return_corr",
    "prefs/labels",
    "prefs/label_debt",
)
PREFERENCE_PREFIXES = ("prefs/", "reward_model/")


# --- small readers ------------------------------------------------------------------------------


def tail_text(path: Path, max_lines: int = 60, max_bytes: int = 16_384) -> str:
    """The last lines of a (possibly growing, possibly huge) text file, or ''."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line is probably cut
    return "\n".join(lines[-max_lines:])


def _tail_rows(path: Path) -> dict[int, dict[str, float]]:
    """{step: {name: value}} of the rows in the tail of a metrics.csv."""
    text = tail_text(path, max_lines=400, max_bytes=32_768)
    rows: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) != 4:
            continue
        try:
            step, value = int(parts[0]), float(parts[3])
        except ValueError:
            continue
        rows.setdefault(step, {})[parts[2]] = value
    return rows


def _last_complete(rows: dict[int, dict[str, float]]) -> tuple[int, dict[str, float]]:
    if not rows:
        return 0, {}
    # a row is complete once its last metric (time/wall_s) is written; the file is buffered, so
    # the newest row may be cut short
    complete = [s for s, row in rows.items() if "time/wall_s" in row]
    step = max(complete) if complete else max(rows)
    return step, rows[step]


def last_metrics_row(path: Path) -> tuple[int, dict[str, float]]:
    """(step, {name: value}) of the last complete row of a metrics.csv, read from its tail."""
    return _last_complete(_tail_rows(path))


def _newest(rows: dict[int, dict[str, float]], name: str) -> float | None:
    """The newest value of `name` among `rows`: metrics not logged on every row (a preference
    run's true return comes with the pipeline's rows) are found in an earlier one."""
    return next((rows[s][name] for s in sorted(rows, reverse=True) if name in rows[s]), None)


def _finite(x):
    return x if isinstance(x, int | float) and math.isfinite(x) else None


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


# --- the index ------------------------------------------------------------------------------------


def choices(home: Path) -> dict[str, list[str]]:
    """Values offered by the index filters: every env, algo, status and tag in the archive."""
    from backflip.runs import index
    from backflip.runs.archive import STATUSES

    if not (home / INDEX).exists():
        return {"env": [], "algo": [], "status": list(STATUSES), "tag": []}
    con = index.connect(home)
    try:
        envs = [r[0] for r in con.execute("SELECT DISTINCT env FROM runs ORDER BY env") if r[0]]
        algos = [r[0] for r in con.execute("SELECT DISTINCT algo FROM runs ORDER BY algo") if r[0]]
        tags = sorted(
            {
                t
                for (ts,) in con.execute("SELECT DISTINCT tags FROM runs")
                for t in (ts or "").split(",")
                if t
            }
        )
    finally:
        con.close()
    return {"env": envs, "algo": algos, "status": list(STATUSES), "tag": tags}


# --- progress (polled by the pages while runs are going) ------------------------------------------


def seed_progress(run_dir: Path, seed: int, ret_metric: str = TRAINING_RETURN) -> dict:
    """A seed's status.json, with its latest step and return (`ret_metric`) read live while it
    runs."""
    from backflip.summary import status_text

    st = seed_status(run_dir, seed)
    out = {
        "seed": seed,
        "status": st.get("status", "pending"),
        "status_text": status_text({"status": "pending", **st}),
        "labels_needed": st.get("labels_needed"),
        "steps": st.get("steps") or 0,
        "sps": st.get("sps"),
        "ret": None,
        "final_eval_return": _finite(st.get("final_eval_return")),
        "wall_s": st.get("wall_s"),
        "error": st.get("error"),
    }
    if out["status"] in ("running", "waiting"):
        rows = _tail_rows(seed_dir(run_dir, seed) / METRICS)
        step, row = _last_complete(rows)
        out["steps"] = max(step, out["steps"])
        out["sps"] = _finite(row.get("time/sps"))
        out["ret"] = _finite(row.get(ret_metric, _newest(rows, ret_metric)))
        started = _parse_time(st.get("started"))
        out["wall_s"] = time.time() - started if started else None
    return out


def run_progress(run_dir: Path) -> dict:
    """Status, steps done out of the budget, per-seed progress and the result line of one run."""
    from backflip.summary import result_line, run_state

    record = load_run(run_dir)
    ret_metric = training_return(record["config"])
    seeds = [seed_progress(run_dir, s, ret_metric) for s in record["config"]["seeds"]]
    budget = record["config"]["steps"] * max(1, len(seeds))
    done = sum(min(s["steps"] or 0, record["config"]["steps"]) for s in seeds)
    results = record.get("results") or {}
    return {
        "id": record["id"],
        "status": record["status"],
        "status_text": run_state({**record, "seeds": seeds}),
        "steps_done": done,
        "steps_total": budget,
        "fraction": done / budget if budget else 0.0,
        "seeds": seeds,
        "return_metric": ret_metric,
        "result": result_line(results) if results else None,
        "iqm": _finite(results.get("iqm")),
        "ci": [_finite(results.get("ci_low")), _finite(results.get("ci_high"))],
        "interval": stats.interval(results.get("ci_low"), results.get("ci_high"), results.get("n")),
        "duration_s": record.get("duration_s")
        or (time.time() - (_parse_time(record.get("created")) or time.time())),
    }


# --- one run --------------------------------------------------------------------------------------


def _step_from_name(name: str) -> int | None:
    digits = "".join(c for c in Path(name).stem if c.isdigit())
    return int(digits) if digits else None


def seed_files(run_dir: Path, seeds: list[int], folder: str, pattern: str) -> list[dict]:
    """Files under seeds/<seed>/<folder>/ matching pattern: seed, name, path relative to the run."""
    out = []
    for seed in seeds:
        d = seed_dir(run_dir, seed) / folder
        if not d.is_dir():
            continue
        for f in sorted(d.glob(pattern)):
            st = f.stat()
            out.append(
                {
                    "seed": seed,
                    "name": f.name,
                    "rel": f.relative_to(run_dir).as_posix(),
                    "step": _step_from_name(f.name),
                    "size": st.st_size,
                    "mtime": st.st_mtime,
                }
            )
    return out


def run_detail(run_dir: Path) -> dict:
    """Everything the run page shows except the curves (fetched separately, they are bigger)."""
    # the doctor's package loads its rules (scipy): on a run's page, not at the server's start
    from backflip.doctor.findings import read_findings
    from backflip.journal import notes_for_run, run_usage
    from backflip.summary import reproduce_command, result_line

    record = load_run(run_dir)
    seeds = record["config"]["seeds"]
    record["reproduce"] = reproduce_command(record)
    prov = record.get("provenance", {})
    git = prov.get("git") or prov.get("backflip_git")
    checkout = None
    if git and git.get("commit"):
        patch = (
            f" && git apply {run_dir / (CODE_PATCH if 'git' in prov else BACKFLIP_PATCH)}"
            if git.get("dirty")
            else ""
        )
        checkout = f"git -C {git['root']} checkout {git['commit']}{patch}"
    patches = {
        name: tail_text(run_dir / name, max_lines=2000, max_bytes=400_000)
        for name in (CODE_PATCH, BACKFLIP_PATCH)
        if (run_dir / name).exists()
    }
    results = record.get("results") or {}
    return {
        "record": record,
        "preference": is_preference_run(record["config"]),
        "result_line": result_line(results) if results else None,
        "checkout": checkout,
        "patches": patches,
        "packages": tail_text(run_dir / PACKAGES, max_lines=2000, max_bytes=200_000),
        "progress": run_progress(run_dir),
        "logs": {
            s: {
                "stdout": tail_text(seed_dir(run_dir, s) / STDOUT),
                "stderr": tail_text(seed_dir(run_dir, s) / STDERR),
            }
            for s in seeds
        },
        "findings": read_findings(run_dir),
        "videos": seed_files(run_dir, seeds, VIDEOS, "*.mp4"),
        "checkpoints": seed_files(run_dir, seeds, CHECKPOINTS, "*.pt"),
        "notes": notes_for_run(run_dir.parent, record["id"]),
        "usage": run_usage(record),
        "labeling": labeling(run_dir, record),
    }


def labeling(run_dir: Path, record: dict) -> list[dict] | None:
    """A preference run's labeling, per seed: counts, the labeling page, and its people (answers,
    latency, agreement with the true reward and with each other: `backflip.prefs.people`)."""
    from backflip.prefs.db import PreferenceDB
    from backflip.prefs.people import labeler_table

    if not is_preference_run(record["config"]):
        return None
    out = []
    for seed in record["config"]["seeds"]:
        path = seed_dir(run_dir, seed) / PREFS_DB
        if not path.exists():
            continue
        db = PreferenceDB(path)
        try:
            counts, answers, meta = db.counts(), db.answers(), db.meta()
        finally:
            db.close()
        out.append(
            {
                "seed": seed,
                "url": f"/label/{record['id']}/{seed}/",
                "labeled": counts["labeled"],
                "skipped": counts["skipped"],
                "pending": counts["pending"],
                "target": record["config"]["prefs"].get("labels"),
                "ended_by": meta.get("labels_ended_by") if "labels_ended_at" in meta else None,
                **labeler_table(answers),
            }
        )
    return out


# --- curves ---------------------------------------------------------------------------------------


def _group_key(name: str):
    group = name.split("/", 1)[0]
    rank = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    preferred = PREFERRED_CURVES.index(name) if name in PREFERRED_CURVES else len(PREFERRED_CURVES)
    return (rank, preferred, name)


def _in_preference_group(name: str) -> bool:
    return name in PREFERENCE_FIRST or name.startswith(PREFERENCE_PREFIXES)


def display_key(name: str, preference: bool):
    """Where a metric's chart goes on a run page: the usual groups in `GROUP_ORDER`, the result
    first; on a preference run the preference group (`PREFERENCE_FIRST`, then every other
    prefs/ and reward_model/ chart) before them all."""
    if preference and _in_preference_group(name):
        first = PREFERENCE_FIRST.index(name) if name in PREFERENCE_FIRST else len(PREFERENCE_FIRST)
        return (0, first, name)
    return (1, *_group_key(name))


def chart_group(name: str, preference: bool) -> str:
    if preference and _in_preference_group(name):
        return PREFERENCE_GROUP
    return name.split("/", 1)[0] if "/" in name else "other"


def chart_note(name: str, preference: bool) -> str | None:
    """What a chart's title adds to the metric name: on a preference run, which reward a
    return is in — the learned one r̂ the policy trained on, or the task's."""
    if not preference:
        return None
    if holds_learned_reward(name):
        return LEARNED_NOTE
    if name == TRUE_RETURN:
        return "true return (the task's reward), training episodes"
    if name.startswith("eval/return_"):
        return "true return (the task's reward), greedy evaluation"
    return None


def run_curves(run_dir: Path, names: list[str] | None = None) -> dict:
    """Every metric of a run (or the named ones) as curves over its seeds, in display order.

    Each curve is `backflip.curves`' (the alignment and IQM band of `backflip compare` and the
    plots) with every seed's values on the grid: {"step", "iqm", "low", "high", "n", "values",
    "seeds"}, at most `MAX_POINTS` steps, values rounded to 6 significant digits. `groups` lists
    the page's sections in order ({key, title, names}); `notes` adds to a chart's title what the
    metric name does not say (on a preference run: which reward a return is in).
    """
    record = read_record(run_dir)
    seeds = record["config"]["seeds"]
    preference = is_preference_run(record["config"])
    all_names = curves.metric_names(run_dir, seeds)
    wanted = sorted(
        all_names if names is None else all_names & set(names),
        key=lambda n: display_key(n, preference),
    )
    found = curves.run_metric_curves(run_dir, seeds, wanted, points=MAX_POINTS, digits=6)
    groups: list[dict] = []
    for n in found:
        key = chart_group(n, preference)
        if not groups or groups[-1]["key"] != key:
            title = (
                "preferences: the task's return, the reward model, the labels"
                if key == PREFERENCE_GROUP
                else f"{key}/"
            )
            groups.append({"key": key, "title": title, "names": []})
        groups[-1]["names"].append(n)
    notes = {n: note for n in found if (note := chart_note(n, preference))}
    return {
        "id": record["id"],
        "seeds": seeds,
        "preference": preference,
        "names": list(found),
        "groups": groups,
        "notes": notes,
        "curves": found,
    }


# --- comparing runs -------------------------------------------------------------------------------


def compare(
    home: Path, run_dirs: list[Path | str], metric: str | None = None, score: str = "auto"
) -> dict:
    """Runs side by side: `backflip compare`'s own report (`experiments.compare.compare_runs`: the
    same scores, intervals, verdicts, fairness notes and curves), plus what the page needs —
    `metrics`, the curves every run can show, and `error` when the asked-for one is not among
    them (the page then shows the default, "return", and says so). A side may be a
    Stable-Baselines3 or CleanRL TensorBoard logdir (`PATH[@ENV]`), as on the command line:
    every side is then scored by its training episodes and only return curves are offered.
    """
    from backflip.experiments.compare import compare_runs, curve_metrics, is_peer

    runs = [Path(d) for d in run_dirs if not is_peer(str(d))]
    common = curve_metrics(runs) if len(runs) == len(run_dirs) else curve_metrics([])[:1]
    error = None
    if metric and metric not in common:
        error = f"not every run logged {metric!r}: showing {common[0]!r}"
        metric = None
    report = compare_runs(
        home, [str(d) for d in run_dirs], metric or common[0], at_least=1, score=score
    )
    report["metrics"] = [common[0], *sorted(common[1:], key=_group_key)]
    report["error"] = error
    return report


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
