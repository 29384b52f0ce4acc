"""Learning curves over seeds: each seed's curve from the archive, and their IQM with a CI band.

A curve is `(steps, values)`. `seed_curve` reads one seed: the metric `"return"` is the mean of
the last `window` finished training episodes at each episode end (from `episodes.csv`, so it is
exact whatever the logging interval; `window=20` matches `rollout/ep_return_mean`); any other
name is read from `metrics.csv` (docs/metrics.md).

`aggregate_curves` puts the seeds on a common grid of steps — every step any seed logged when
there are at most `points` of them, else `points` evenly spaced steps; a seed's value at step s
is its last value logged at or before s, and it has none before its first point or after its
last step — then takes the IQM across seeds at each grid step with a bootstrap 95% band. The
same resampled seeds are used at every step, so the band is the uncertainty of one curve, not of
unrelated points. A step logged twice (a resumed seed logs its last rows again) keeps the later
value. Plots (`backflip/plots.py`), `backflip compare`, `diff`, the web UI and the static
reports all call these: one alignment and one band everywhere, so a curve looks the same on
every screen.
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


def seed_curve(folder: str | Path, metric: str = RETURN, window: int = 20):
    """(steps, values) of one seed's metric; empty arrays if it never logged it."""
    folder = Path(folder)
    if metric == RETURN:
        path = folder / EPISODES
        if not path.exists():
            return EMPTY
        steps, rets, _ = read_episodes(path)
        if steps.size == 0:
            return steps, rets
        csum = np.cumsum(np.insert(rets, 0, 0.0))
        idx = np.arange(1, rets.size + 1)
        lo = np.maximum(0, idx - window)
        return _last_per_step(steps, (csum[idx] - csum[lo]) / (idx - lo))
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
    """(seeds, len(grid)): each curve's last value at or before each grid step (NaN outside)."""
    out = np.full((len(curves), grid.size), np.nan)
    for i, curve in enumerate(curves):
        steps, values = curve[0], curve[1]
        end = curve[2] if len(curve) > 2 else steps[-1]
        if steps.size == 0:
            continue
        j = np.searchsorted(steps, grid, side="right") - 1
        ok = (j >= 0) & (grid <= end)
        out[i, ok] = values[j[ok]]
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
    return {**agg, "metric": metric, "seeds": list(per_seed)}


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
