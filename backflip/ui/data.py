"""What the UI shows, read from the archive: plain dicts and lists, ready for JSON or a template.

Nothing here knows about HTTP. The archive stays the source of truth; `index.sqlite` answers the
listing, and the run directories answer everything else (live progress comes from the tail of
each seed's `metrics.csv`, so a running seed's step count is as fresh as its last metrics row).
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from backflip import stats
from backflip.runs.archive import load_run, read_json, seed_dir, seed_status
from backflip.telemetry import read_metrics

MAX_POINTS = 600  # per metric and seed sent to the browser; longer series are averaged in buckets
BAND_REPS = 300  # bootstrap resamples for the per-step IQM interval
GROUP_ORDER = ("eval", "rollout", "train", "env", "time", "sys")
PREFERRED_CURVES = ("eval/return_mean", "rollout/ep_return_mean")


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


def last_metrics_row(path: Path) -> tuple[int, dict[str, float]]:
    """(step, {name: value}) of the last complete row of a metrics.csv, read from its tail."""
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
    if not rows:
        return 0, {}
    # a row is complete once its last metric (time/wall_s) is written; the file is buffered, so
    # the newest row may be cut short
    complete = [s for s, row in rows.items() if "time/wall_s" in row]
    step = max(complete) if complete else max(rows)
    return step, rows[step]


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

    if not (home / "index.sqlite").exists():
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


def seed_progress(run_dir: Path, seed: int) -> dict:
    """A seed's status.json, with its latest step and return read live while it runs."""
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
        step, row = last_metrics_row(seed_dir(run_dir, seed) / "metrics.csv")
        out["steps"] = max(step, out["steps"])
        out["sps"] = _finite(row.get("time/sps"))
        out["ret"] = _finite(row.get("rollout/ep_return_mean"))
        started = _parse_time(st.get("started"))
        out["wall_s"] = time.time() - started if started else None
    return out


def run_progress(run_dir: Path) -> dict:
    """Status, steps done out of the budget, per-seed progress and the result line of one run."""
    from backflip.summary import result_line, run_state

    record = load_run(run_dir)
    seeds = [seed_progress(run_dir, s) for s in record["config"]["seeds"]]
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
        "result": result_line(results) if results else None,
        "iqm": _finite(results.get("iqm")),
        "ci": [_finite(results.get("ci_low")), _finite(results.get("ci_high"))],
        "duration_s": record.get("duration_s")
        or (time.time() - (_parse_time(record.get("created")) or time.time())),
    }


# --- one run --------------------------------------------------------------------------------------


def findings(run_dir: Path) -> dict | None:
    """The doctor's `findings.json` ({"target", "findings": [...]}) or None when absent/unreadable.

    Each finding: rule, severity (error/warning/info), metric, step, message, evidence.
    """
    path = run_dir / "findings.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        return {"error": f"unreadable findings.json: {e}", "findings": []}
    items = data.get("findings", []) if isinstance(data, dict) else []
    order = {"error": 0, "warning": 1, "info": 2}
    clean = [f for f in items if isinstance(f, dict)]
    clean.sort(key=lambda f: (order.get(f.get("severity"), 3), str(f.get("metric") or "")))
    return {"target": data.get("target") if isinstance(data, dict) else None, "findings": clean}


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
            f" && git apply {run_dir / ('code.patch' if 'git' in prov else 'backflip.patch')}"
            if git.get("dirty")
            else ""
        )
        checkout = f"git -C {git['root']} checkout {git['commit']}{patch}"
    patches = {
        name: tail_text(run_dir / name, max_lines=2000, max_bytes=400_000)
        for name in ("code.patch", "backflip.patch")
        if (run_dir / name).exists()
    }
    results = record.get("results") or {}
    return {
        "record": record,
        "result_line": result_line(results) if results else None,
        "checkout": checkout,
        "patches": patches,
        "packages": tail_text(run_dir / "packages.txt", max_lines=2000, max_bytes=200_000),
        "progress": run_progress(run_dir),
        "logs": {
            s: {
                "stdout": tail_text(seed_dir(run_dir, s) / "stdout.log"),
                "stderr": tail_text(seed_dir(run_dir, s) / "stderr.log"),
            }
            for s in seeds
        },
        "findings": findings(run_dir),
        "videos": seed_files(run_dir, seeds, "videos", "*.mp4"),
        "checkpoints": seed_files(run_dir, seeds, "checkpoints", "*.pt"),
        "notes": notes_for_run(run_dir.parent, record["id"]),
        "usage": run_usage(record),
        "labeling": labeling(run_dir, record),
    }


def labeling(run_dir: Path, record: dict) -> list[dict] | None:
    """A preference run's labeling, per seed: counts, the labeling page, and its people (answers,
    latency, agreement with the true reward and with each other: `backflip.prefs.people`)."""
    from backflip.prefs.db import PreferenceDB
    from backflip.prefs.people import labeler_table

    prefs = record["config"].get("prefs")
    if prefs is None:
        return None
    out = []
    for seed in record["config"]["seeds"]:
        path = seed_dir(run_dir, seed) / "prefs.sqlite"
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
                "target": prefs.get("labels"),
                "ended_by": meta.get("labels_ended_by") if "labels_ended_at" in meta else None,
                **labeler_table(answers),
            }
        )
    return out


# --- curves ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _read_metrics_cached(path: str, size: int, mtime_ns: int) -> dict:
    return read_metrics(path)


def seed_metrics(run_dir: Path, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (steps, values)} of one seed; cached until the file changes."""
    path = seed_dir(run_dir, seed) / "metrics.csv"
    try:
        st = path.stat()
    except OSError:
        return {}
    return _read_metrics_cached(str(path), st.st_size, st.st_mtime_ns)


def _dedupe(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted by step; for a step logged twice (a resumed run re-logs it) the last value wins."""
    rev_steps, rev_values = steps[::-1], values[::-1]
    uniq, first = np.unique(rev_steps, return_index=True)
    return uniq, rev_values[first]


def align(series: dict[int, tuple[np.ndarray, np.ndarray]], max_points: int = MAX_POINTS):
    """Put each seed's (steps, values) on one step grid: (grid, {seed: values or NaN}).

    The grid is the union of the seeds' steps; a seed's value between its own steps is linearly
    interpolated and NaN outside its range. A grid longer than `max_points` becomes that many
    equal buckets, each seed's value the mean of its points in the bucket.
    """
    series = {s: _dedupe(*sv) for s, sv in series.items() if len(sv[0])}
    if not series:
        return np.zeros(0), {}
    grid = np.unique(np.concatenate([s for s, _ in series.values()]))
    bucketed = len(grid) > max_points
    if bucketed:
        edges = np.linspace(grid[0], grid[-1], max_points + 1)
        grid = np.round((edges[:-1] + edges[1:]) / 2)
    out = {}
    for seed, (s, v) in series.items():
        if bucketed:
            which = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, max_points - 1)
            counts = np.bincount(which, minlength=max_points)
            sums = np.bincount(which, weights=v, minlength=max_points)
            with np.errstate(invalid="ignore", divide="ignore"):
                means = sums / counts
            have = counts > 0
            s, v = grid[have], means[have]
        vals = np.interp(grid, s, v)
        vals[(grid < s[0]) | (grid > s[-1])] = np.nan
        out[seed] = vals
    return grid, out


def iqm_band(matrix: np.ndarray, reps: int = BAND_REPS, level: float = 0.95, seed: int = 0):
    """IQM over seeds at each step with a percentile-bootstrap interval: (iqm, low, high).

    `matrix` is (seeds, steps) with NaN where a seed has no value. The IQM is
    `backflip.stats.iqm` (25%-trimmed mean); the interval resamples seeds, as
    `stats.bootstrap_ci` does for one number, vectorized over the steps (steps where a seed is
    missing, or with one seed, get no interval).
    """
    n, p = matrix.shape
    center = np.full(p, np.nan)
    low, high = np.full(p, np.nan), np.full(p, np.nan)
    if n == 0 or p == 0:
        return center, low, high
    finite = np.isfinite(matrix)
    full = finite.all(axis=0)
    cut = int(0.25 * n)  # scipy.stats.trim_mean's rule, so this equals stats.iqm
    if full.any():
        m = np.sort(matrix[:, full], axis=0)
        center[full] = m[cut : n - cut].mean(axis=0)
        if n >= 2:
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, n, size=(reps, n))
            boot = np.sort(matrix[:, full][idx], axis=1)[:, cut : n - cut].mean(axis=1)
            alpha = (1 - level) / 2
            low[full], high[full] = np.quantile(boot, [alpha, 1 - alpha], axis=0)
    for j in np.flatnonzero(~full & finite.any(axis=0)):
        center[j] = stats.iqm(matrix[finite[:, j], j])
    return center, low, high


def _group_key(name: str):
    group = name.split("/", 1)[0]
    rank = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    preferred = PREFERRED_CURVES.index(name) if name in PREFERRED_CURVES else len(PREFERRED_CURVES)
    return (rank, preferred, name)


def _json_list(a: np.ndarray, digits: int = 6) -> list:
    """Floats rounded to `digits` significant digits, non-finite as None (JSON has no NaN)."""
    out = []
    for x in a.tolist():
        out.append(float(f"{x:.{digits}g}") if math.isfinite(x) else None)
    return out


def curve(run_dir: Path, seeds: list[int], name: str, max_points: int = MAX_POINTS) -> dict | None:
    """One metric over seeds: x, each seed's y, and the IQM with its band."""
    per_seed = {s: m[name] for s in seeds if name in (m := seed_metrics(run_dir, s))}
    grid, values = align(per_seed, max_points)
    if not len(grid):
        return None
    order = sorted(values)
    matrix = np.vstack([values[s] for s in order])
    center, low, high = iqm_band(matrix)
    return {
        "x": grid.astype(np.int64).tolist(),
        "seeds": {str(s): _json_list(values[s]) for s in order},
        "iqm": _json_list(center),
        "low": _json_list(low),
        "high": _json_list(high),
    }


def run_curves(run_dir: Path, names: list[str] | None = None) -> dict:
    """Every metric of a run (or the named ones) as curves, grouped in display order."""
    record = read_json(run_dir / "run.json")
    seeds = record["config"]["seeds"]
    all_names: set[str] = set()
    for s in seeds:
        all_names.update(seed_metrics(run_dir, s))
    wanted = sorted(all_names if names is None else all_names & set(names), key=_group_key)
    curves = {n: c for n in wanted if (c := curve(run_dir, seeds, n)) is not None}
    return {"id": record["id"], "seeds": seeds, "names": list(curves), "curves": curves}


# --- comparing runs -------------------------------------------------------------------------------


def final_scores(record: dict) -> list[float]:
    """Each finished seed's final greedy evaluation return."""
    out = []
    for s in record.get("seeds", []):
        v = s.get("final_eval_return") if isinstance(s, dict) else None
        if isinstance(v, int | float) and math.isfinite(v):
            out.append(float(v))
    return out


def verdict(a: list[float], b: list[float], name_a: str, name_b: str) -> dict:
    """Is B better than A? Probability of improvement and Welch's t-test on final scores.

    P(B > A) is the Mann–Whitney probability that a random seed of B beats a random seed of A
    (ties count half; Agarwal et al. 2021), with a bootstrap interval resampling each side's
    seeds. Kept small on purpose: when `backflip.stats` offers these (issue 5), call it here.
    """
    from scipy import stats as sps

    a_, b_ = np.asarray(a, float), np.asarray(b, float)
    out: dict = {"a": name_a, "b": name_b, "n_a": a_.size, "n_b": b_.size}
    if a_.size < 2 or b_.size < 2:
        out["text"] = (
            f"insufficient evidence: {name_b} vs {name_a} needs at least 2 finished seeds each "
            f"(have {b_.size} and {a_.size})"
        )
        out["decided"] = False
        return out

    def p_improve(x, y):  # P(y > x) over all pairs, ties half
        return (
            (y[..., :, None] > x[..., None, :]) + 0.5 * (y[..., :, None] == x[..., None, :])
        ).mean(axis=(-1, -2))

    p = float(p_improve(a_, b_))
    rng = np.random.default_rng(0)
    boot = p_improve(
        a_[rng.integers(0, a_.size, (2000, a_.size))], b_[rng.integers(0, b_.size, (2000, b_.size))]
    )
    lo, hi = (float(q) for q in np.quantile(boot, [0.025, 0.975]))
    if np.ptp(a_) == 0 and np.ptp(b_) == 0:
        welch_p = 1.0 if a_[0] == b_[0] else 0.0
    else:
        with warnings.catch_warnings():  # one side constant (e.g. every seed at 500): fine
            warnings.simplefilter("ignore", RuntimeWarning)
            welch_p = float(sps.ttest_ind(b_, a_, equal_var=False).pvalue)
    out.update(p_improve=p, p_low=lo, p_high=hi, welch_p=welch_p)
    numbers = (
        f"P({name_b}>{name_a})={p:.2f} [{lo:.2f}, {hi:.2f}], Welch p={welch_p:.3g}, "
        f"{b_.size} and {a_.size} seeds"
    )
    few = min(a_.size, b_.size) < stats.MIN_TRUSTWORTHY_SEEDS
    if lo > 0.5 and welch_p < 0.05:
        out["text"] = f"{name_b} beats {name_a}: {numbers}"
        out["decided"] = True
    elif hi < 0.5 and welch_p < 0.05:
        out["text"] = f"{name_a} beats {name_b}: {numbers}"
        out["decided"] = True
    else:
        out["text"] = f"insufficient evidence to separate {name_b} from {name_a}: {numbers}"
        out["decided"] = False
    if few:
        out["text"] += f" — fewer than {stats.MIN_TRUSTWORTHY_SEEDS} seeds per side"
    return out


def compare(run_dirs: list[Path], metric: str | None = None) -> dict:
    """Several runs side by side: their final scores, one metric's IQM curves, verdicts vs the first."""
    records = [load_run(d) for d in run_dirs]
    common = None
    for d, r in zip(run_dirs, records, strict=True):
        names = set()
        for s in r["config"]["seeds"]:
            names.update(seed_metrics(d, s))
        common = names if common is None else common & names
    common = sorted(common or set(), key=_group_key)
    if metric not in common:  # not logged by every run: fall back to the default
        metric = None
    if metric is None:
        metric = next((m for m in PREFERRED_CURVES if m in common), common[0] if common else None)
    runs = []
    for d, r in zip(run_dirs, records, strict=True):
        scores = final_scores(r)
        label = f"{r['id'][-4:]} {r['algo']}"
        runs.append(
            {
                "id": r["id"],
                "label": label,
                "algo": r["algo"],
                "env": r["env"],
                "message": r.get("message", ""),
                "status": r["status"],
                "steps": r["config"]["steps"],
                "summary": stats.summarize(scores),
                "scores": scores,
                "curve": curve(d, r["config"]["seeds"], metric) if metric else None,
            }
        )
    base = runs[0] if runs else None
    verdicts = [verdict(base["scores"], r["scores"], base["label"], r["label"]) for r in runs[1:]]
    return {"metric": metric, "metrics": common, "runs": runs, "verdicts": verdicts}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
