"""Learning curves over seeds: each seed's curve from the archive, and their IQM with a CI band.

A curve is `(steps, values)`. `seed_curve` reads one seed: the metric `"return"` is the mean of
the last `window` finished training episodes at each episode end (from `episodes.csv`, so it is
exact whatever the logging interval; `window=20` matches `rollout/ep_return_mean`); any other
name is read from `metrics.csv` (docs/metrics.md).

`aggregate_curves` puts the seeds on a common grid of steps — every step any seed logged when
there are at most `points` of them, else `points` evenly spaced steps — with one alignment rule
(`on_grid`): a seed's value at step s is **linearly interpolated** between the two points it
logged around s, is its last value from its last logged point to the step it reached, and is
missing before its first point or after its last step. Then it takes the IQM across seeds at
each grid step with a bootstrap 95% band. The same resampled seeds are used at every step, so
the band is the uncertainty of one curve, not of unrelated points. A step logged twice (a
resumed seed logs its last rows again) keeps the later value. `aggregate_task_curves` does the
same across several tasks (envs) on normalized scores, with a stratified bootstrap — rliable's
sample-efficiency curves. Plots (`backflip/plots.py`), `backflip compare`, `diff`, `bench`,
`plan`, the web UI and the static reports all call these: one alignment and one band
everywhere, so a curve looks the same on every screen.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from backflip import stats
from backflip.returns import TRUE_RETURN, is_preference_run
from backflip.runs.archive import read_record, seed_status
from backflip.runs.layout import EPISODES, METRICS, seed_dir
from backflip.telemetry import read_episodes, read_metrics

RETURN = "return"
REPS = 2000  # bootstrap resamples of the seeds for a curve's band
EMPTY = (np.zeros(0, np.int64), np.zeros(0))


@functools.lru_cache(maxsize=256)
def _read_metrics(path: str, size: int, mtime_ns: int) -> dict:
    return {name: _last_per_step(*sv) for name, sv in read_metrics(path).items()}


def seed_metrics(folder: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (steps, values)} of one seed's `metrics.csv`, sorted by step (a step logged twice
    keeps its later value); {} when there is none. Cached until the file changes (the web UI
    re-reads live runs): the arrays are shared, never modify them."""
    path = Path(folder) / METRICS
    try:
        st = path.stat()
    except OSError:
        return {}
    return _read_metrics(str(path), st.st_size, st.st_mtime_ns)


def _last_per_step(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted by step; of the values at one step, the last one logged."""
    if steps.size == 0 or (np.diff(steps) > 0).all():
        return steps, values
    uniq, first_from_end = np.unique(steps[::-1], return_index=True)
    return uniq, values[::-1][first_from_end]


def rolling_mean(steps: np.ndarray, returns: np.ndarray, window: int):
    """(steps, mean of the last `window` episodes at each episode end): a return curve from
    every episode's return, as `rollout/ep_return_mean` (window 20) or SB3's `ep_rew_mean`
    (window 100) are."""
    if steps.size == 0:
        return steps, np.asarray(returns, np.float64)
    csum = np.cumsum(np.insert(np.asarray(returns, np.float64), 0, 0.0))
    idx = np.arange(1, len(returns) + 1)
    lo = np.maximum(0, idx - window)
    return _last_per_step(np.asarray(steps), (csum[idx] - csum[lo]) / (idx - lo))


def peer_return_curve(data, window: int = 100):
    """A TensorBoard log's training-return curve (a `doctor.sources.RunData` read from SB3 or
    CleanRL): with every episode logged (CleanRL), the mean of the last `window` at each episode
    end; else SB3's `rollout/ep_rew_mean`, the mean of its last 100 episodes (SB3's default
    `stats_window_size`). Empty arrays when the log has neither."""
    if data.episodes is not None:
        steps, rets = data.episodes[0], data.episodes[1]
        return rolling_mean(steps, rets, window)
    return _last_per_step(*data.metrics.get("rollout/ep_return_mean", EMPTY))


def seed_curve(folder: str | Path, metric: str = RETURN, window: int = 20):
    """(steps, values) of one seed's metric; empty arrays if it never logged it."""
    folder = Path(folder)
    if metric == RETURN:
        path = folder / EPISODES
        if not path.exists():
            return EMPTY
        steps, rets, _ = read_episodes(path)
        return rolling_mean(steps, rets, window)
    return seed_metrics(folder).get(metric, EMPTY)


def run_seed_curves(run_dir: str | Path, seeds, metric: str = RETURN, window: int = 20):
    """{seed: (steps, values, end)} for a run's seeds; `end` is the last step the seed reached.

    On a preference run the return is the task's (`prefs/true_return_mean`): its episodes.csv
    holds the learned reward's returns (`backflip.returns`)."""
    if metric == RETURN:
        config = read_record(Path(run_dir)).get("config")
        if is_preference_run(config):
            metric = TRUE_RETURN
    out = {}
    for seed in seeds:
        steps, values = seed_curve(seed_dir(Path(run_dir), seed), metric, window)
        if steps.size == 0:
            continue
        end = max(int(steps[-1]), int(seed_status(Path(run_dir), seed).get("steps") or 0))
        out[seed] = (steps, values, end)
    return out


def on_grid(curves: list[tuple], grid: np.ndarray) -> np.ndarray:
    """(seeds, len(grid)): each curve's value at each grid step, NaN where it has none.

    THE alignment rule (every curve backflip aggregates, compares or draws goes through here):
    between two logged points the value is **linearly interpolated**; from the last logged point
    to the step the seed reached (`end`) it is the last value; before the first logged point and
    after `end` there is none. Linear, so that two seeds logging the same curve at different
    steps agree everywhere on the grid (y = x logged at 0, 10, 20 and at 0, 7, 14, 21 is y = x);
    a value logged at a grid step is taken exactly; a non-finite neighbour makes the interval
    between them unknown (NaN), never a made-up number."""
    grid = np.asarray(grid)
    out = np.full((len(curves), grid.size), np.nan)
    for i, curve in enumerate(curves):
        steps, values = curve[0], np.asarray(curve[1], np.float64)
        if steps.size == 0:
            continue
        end = curve[2] if len(curve) > 2 else steps[-1]
        j = np.searchsorted(steps, grid, side="right") - 1
        ok = (j >= 0) & (grid <= end)
        j = j[ok]
        g = grid[ok].astype(np.float64)
        left = values[j]
        nxt = np.minimum(j + 1, steps.size - 1)
        inside = (j + 1 < steps.size) & (g > steps[j])  # strictly between two logged points
        with np.errstate(invalid="ignore"):
            t = np.where(inside, (g - steps[j]) / np.maximum(steps[nxt] - steps[j], 1e-300), 0.0)
            between = left + t * (values[nxt] - left)
        out[i, ok] = np.where(inside, between, left)
    return out


def make_grid(curves: list[tuple], points: int = 100) -> np.ndarray:
    """Every step a curve logged (and each curve's end) when there are at most `points` of them;
    else `points` evenly spaced steps from the first to the last."""
    have = [c for c in curves if c[0].size]
    if not have:
        return np.zeros(0, np.int64)
    ends = [int(c[2] if len(c) > 2 else c[0][-1]) for c in have]
    union = np.unique(np.concatenate([c[0] for c in have] + [np.asarray(ends)]))
    if union.size <= points:
        return union.astype(np.int64)
    return np.unique(np.linspace(union[0], union[-1], points).round().astype(np.int64))


def aggregate_curves(
    curves: list[tuple],
    points: int = 100,
    reps: int = REPS,
    seed: int = 0,
    grid=None,
    per_seed: bool = False,
    digits: int | None = None,
) -> dict:
    """IQM across seeds with a 95% bootstrap band, on a grid of steps.

    `curves`: a list of (steps, values) or (steps, values, end). Returns lists (JSON-ready,
    None where there is no value): {"step", "iqm", "low", "high", "n", "no_interval"} — `n` is
    how many seeds have a value at each step; one seed present at a step gives no band there, and
    with one seed in all `no_interval` says so ("no interval: 1 seed") for the chart's legend.
    `per_seed` adds "values": each curve on the grid, in order. `digits` rounds the values to
    that many significant digits (smaller pages; the statistics are computed unrounded).
    """
    grid = make_grid(curves, points) if grid is None else np.asarray(grid)
    values = on_grid(curves, grid)
    iqm = np.full(grid.size, np.nan)
    low, high = iqm.copy(), iqm.copy()
    have = np.isfinite(values)
    # columns with the same seeds present share one resampling (usually all columns at once)
    patterns = {}
    for col in range(grid.size):
        patterns.setdefault(have[:, col].tobytes(), []).append(col)
    blocks = [(np.flatnonzero(have[:, cols[0]]), cols) for cols in patterns.values()]
    blocks = [(rows, cols) for rows, cols in blocks if rows.size]
    draws = iter(_resamples(seed, reps, tuple(rows.size for rows, _ in blocks if rows.size >= 2)))
    for rows, cols in blocks:
        block = values[np.ix_(rows, cols)]  # (seeds, columns)
        iqm[cols] = stats.iqm_columns(block)
        if rows.size >= 2:
            multisets, counts = next(draws)
            boot = stats.iqm_columns(block[multisets])  # (distinct resamples, columns)
            low[cols], high[cols] = _quantiles(boot, counts, (0.025, 0.975))
    out = {
        "step": grid.tolist(),
        "iqm": _clean(iqm, digits),
        "low": _clean(low, digits),
        "high": _clean(high, digits),
        "n": have.sum(0).tolist(),
        # why the band is missing everywhere (one seed), for a chart's legend; None otherwise
        "no_interval": stats.no_interval(len(curves)) if len(curves) < 2 else None,
    }
    if per_seed:
        out["values"] = [_clean(row, digits) for row in values]
    return out


def aggregate_task_curves(
    tasks: list[list[tuple]],
    budgets: list[int] | None = None,
    points: int = 100,
    reps: int = REPS,
    seed: int = 0,
    level: float = stats.LEVEL,
    fraction: bool | None = None,
) -> dict:
    """rliable's sample-efficiency curve: the IQM over every run of every task at each grid step,
    with a stratified bootstrap band (runs resampled within each task, 2,000 times). `tasks`: per
    task, its runs' curves (steps, normalized values[, end]), put on the grid by `on_grid` (the
    one alignment rule). A grid point counts only where every task has a run with a value, so the
    aggregate never silently drops a task.

    The x axis is env steps when every task has the same step budget (or `budgets` is None);
    otherwise it is each task's fraction of its own budget (0..1), said in "x"; `fraction`
    True or False forces one (several curves drawn on one axis must share it). Returns lists:
    {"step", "iqm", "low", "high", "n", "x", "tasks"} (`step` holds fractions in that case)."""
    tasks = [[c for c in t if c[0].size] for t in tasks]
    if not tasks or not all(tasks):
        raise ValueError("every task needs at least one curve")
    x_label = "steps"
    if fraction is None:
        fraction = budgets is not None and len(set(budgets)) > 1
    if fraction:
        if budgets is None:
            raise ValueError("a fraction of the budget needs the budgets")
        x_label = "fraction of budget"
        tasks = [
            [(c[0] / b, c[1], (c[2] if len(c) > 2 else c[0][-1]) / b) for c in t]
            for t, b in zip(tasks, budgets, strict=True)
        ]
    every = [c for t in tasks for c in t]
    if x_label == "steps":
        grid = make_grid(every, points)
    else:
        union = np.unique(np.concatenate([c[0] for c in every] + [[c[2] for c in every]]))
        grid = union if union.size <= points else np.linspace(union[0], union[-1], points)
    values = [on_grid(t, grid) for t in tasks]  # per task (runs, grid)
    have = [np.isfinite(v) for v in values]
    iqm = np.full(grid.size, np.nan)
    low, high = iqm.copy(), iqm.copy()
    n = np.zeros(grid.size, np.int64)
    patterns: dict[bytes, list[int]] = {}
    for col in range(grid.size):
        key = b"".join(h[:, col].tobytes() for h in have)
        patterns.setdefault(key, []).append(col)
    rng = np.random.default_rng(seed)
    alpha = (1 - level) / 2
    for cols in patterns.values():
        rows = [np.flatnonzero(h[:, cols[0]]) for h in have]
        if min(r.size for r in rows) == 0:
            continue  # a task without a value here: no aggregate at these steps
        block = [v[np.ix_(r, cols)] for v, r in zip(values, rows, strict=True)]
        pooled = np.concatenate(block, axis=0)  # (runs, cols)
        iqm[cols] = stats.iqm_columns(pooled)
        n[cols] = pooled.shape[0]
        if min(r.size for r in rows) < 2:
            continue
        draws = [rng.integers(0, b.shape[0], size=(reps, b.shape[0])) for b in block]
        for start in range(0, len(cols), 25):  # (reps, runs, 25 columns) at a time
            part = slice(start, start + 25)
            boot = np.concatenate([b[:, part][d] for b, d in zip(block, draws, strict=True)], 1)
            est = stats.iqm_columns(boot)  # (reps, columns)
            idx = cols[part]
            low[idx] = np.quantile(est, alpha, axis=0)
            high[idx] = np.quantile(est, 1 - alpha, axis=0)
    fewest = min(len(t) for t in tasks)
    return {
        "step": grid.tolist(),
        "iqm": _clean(iqm),
        "low": _clean(low),
        "high": _clean(high),
        "n": n.tolist(),
        "x": x_label,
        "tasks": len(tasks),
        "no_interval": stats.no_interval(fewest) if fewest < 2 else None,
    }


@functools.lru_cache(maxsize=64)
def _resamples(seed: int, reps: int, sizes: tuple[int, ...]) -> list:
    """For blocks of `sizes` seeds in turn, `reps` bootstrap resamples of each from one generator
    seeded `seed`, as (distinct multisets of seed indices (m, size), how many resamples drew each).

    A resample's IQM does not depend on the order of its draws, so it is computed once per
    multiset — 126 at most for 5 seeds, against 2,000 resamples — with the same result. Cached:
    every metric of a run draws the same."""
    rng = np.random.default_rng(seed)
    out = []
    for k in sizes:
        idx = rng.integers(0, k, size=(reps, k))
        multisets, inverse = np.unique(np.sort(idx, axis=1), axis=0, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), minlength=len(multisets))
        multisets.flags.writeable = counts.flags.writeable = False
        out.append((multisets, counts))
    return out


def _quantiles(values: np.ndarray, counts: np.ndarray, qs) -> list[np.ndarray]:
    """np.quantile of each column of `values` with row i repeated counts[i] times (NumPy's default
    "linear" method, computed the same way), without building the repeated array."""
    n = int(counts.sum())
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.take_along_axis(values, order, axis=0)
    below = np.cumsum(counts[order], axis=0)  # draws at or below each ranked value
    cols = np.arange(values.shape[1])
    out = []
    for q in qs:
        h = (n - 1) * q  # numpy's virtual index for the linear method
        lo = np.floor(h)
        t = h - lo
        a = ranked[(below <= lo).sum(0), cols]  # the value at sorted position lo
        b = ranked[(below <= min(lo + 1, n - 1)).sum(0), cols]
        diff = b - a
        out.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return out


def _clean(a: np.ndarray, digits: int | None = None) -> list:
    """NaN -> None (JSON has no NaN); optionally rounded to `digits` significant digits."""
    if digits is None:
        return [float(v) if np.isfinite(v) else None for v in a.tolist()]
    return [float(f"{v:.{digits}g}") if np.isfinite(v) else None for v in a.tolist()]


def run_curve(
    run_dir: str | Path,
    metric: str = RETURN,
    points: int = 100,
    window: int = 20,
    seeds=None,
) -> dict:
    """The aggregate curve of one archived run (all its seeds, or `seeds`): `aggregate_curves`'s
    dict plus `metric` and `seeds` (those that logged it)."""
    run_dir = Path(run_dir)
    if seeds is None:
        seeds = read_record(run_dir)["config"]["seeds"]
    per_seed = run_seed_curves(run_dir, seeds, metric, window)
    agg = aggregate_curves(list(per_seed.values()), points)
    return {**agg, "metric": metric, "seeds": list(per_seed), "window": window}


def metric_names(run_dir: str | Path, seeds) -> set[str]:
    """Every metrics.csv name logged by any of a run's seeds."""
    names: set[str] = set()
    for seed in seeds:
        names.update(seed_metrics(seed_dir(Path(run_dir), seed)))
    return names


def run_metric_curves(
    run_dir: str | Path, seeds, names, points: int = 100, digits: int | None = None
) -> dict[str, dict]:
    """Several metrics.csv metrics of one run at once, each seed's curve included (the run page):
    {name: aggregate_curves(..., per_seed=True) + "seeds"}. Each seed's file is read once."""
    run_dir = Path(run_dir)
    ends = {}
    for seed in seeds:
        ends[seed] = int(seed_status(run_dir, seed).get("steps") or 0)
    out = {}
    for name in names:
        per_seed = {}
        for seed in seeds:
            steps, values = seed_metrics(seed_dir(run_dir, seed)).get(name, EMPTY)
            if steps.size:
                per_seed[seed] = (steps, values, max(int(steps[-1]), ends[seed]))
        if per_seed:
            agg = aggregate_curves(list(per_seed.values()), points, per_seed=True, digits=digits)
            out[name] = {**agg, "seeds": list(per_seed)}
    return out


def normalized_runs_curve(
    run_dirs: list[Path], budgets: list[int] | None = None, fraction: bool | None = None
) -> dict | None:
    """The sample-efficiency curve of runs on different envs (one run per env, each a task):
    every seed's training-return curve normalized by `backflip.references`, aggregated by
    `aggregate_task_curves` (x: steps, or the fraction of each budget when budgets differ).
    None when a run has no curve."""
    from backflip.references import normalize

    tasks = []
    for run_dir in run_dirs:
        record = read_record(Path(run_dir))
        per_seed = run_seed_curves(run_dir, record["config"]["seeds"])
        if not per_seed:
            return None
        env = record["env"]
        tasks.append([(s, normalize(env, v), end) for s, v, end in per_seed.values()])
    return aggregate_task_curves(tasks, budgets, fraction=fraction)
