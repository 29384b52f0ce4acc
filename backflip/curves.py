"""Learning curves over seeds: each seed's curve from the archive, and their IQM with a CI band.

A curve is `(steps, values)`. `seed_curve` reads one seed: the metric `"return"` is the mean of
the last `window` finished training episodes at each episode end (from `episodes.csv`, so it is
exact whatever the logging interval; `window=20` matches `rollout/ep_return_mean`); any other
name is read from `metrics.csv` (docs/metrics.md).

`aggregate_curves` puts the seeds on a common grid of steps — a seed's value at step s is its
last value logged at or before s, and it has none before its first point or after its last step —
then takes the IQM across seeds at each grid step with a bootstrap 95% band. The same resampled
seeds are used at every step, so the band is the uncertainty of one curve, not of unrelated
points. Plots (`backflip/plots.py`), `backflip compare`, `diff` and the web UI call these.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from backflip import stats
from backflip.runs.archive import seed_dir, seed_status
from backflip.telemetry import read_episodes, read_metrics

RETURN = "return"


def seed_curve(folder: str | Path, metric: str = RETURN, window: int = 20):
    """(steps, values) of one seed's metric; empty arrays if it never logged it."""
    folder = Path(folder)
    if metric == RETURN:
        path = folder / "episodes.csv"
        if not path.exists():
            return np.zeros(0, np.int64), np.zeros(0)
        steps, rets, _ = read_episodes(path)
        if steps.size == 0:
            return steps, rets
        csum = np.cumsum(np.insert(rets, 0, 0.0))
        idx = np.arange(1, rets.size + 1)
        lo = np.maximum(0, idx - window)
        return steps, (csum[idx] - csum[lo]) / (idx - lo)
    path = folder / "metrics.csv"
    if not path.exists():
        return np.zeros(0, np.int64), np.zeros(0)
    return read_metrics(path).get(metric, (np.zeros(0, np.int64), np.zeros(0)))


def run_seed_curves(run_dir: str | Path, seeds, metric: str = RETURN, window: int = 20):
    """{seed: (steps, values, end)} for a run's seeds; `end` is the last step the seed reached."""
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
    starts = [c[0][0] for c in curves if c[0].size]
    ends = [(c[2] if len(c) > 2 else c[0][-1]) for c in curves if c[0].size]
    if not starts:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(min(starts), max(ends), points).round().astype(np.int64))


def aggregate_curves(
    curves: list[tuple], points: int = 100, reps: int = 2000, seed: int = 0, grid=None
) -> dict:
    """IQM across seeds with a 95% bootstrap band, on a grid of steps.

    `curves`: a list of (steps, values) or (steps, values, end). Returns lists (JSON-ready):
    {"step", "iqm", "low", "high", "n"} — `n` is how many seeds have a value at each step.
    """
    grid = make_grid(curves, points) if grid is None else np.asarray(grid)
    values = on_grid(curves, grid)
    iqm = np.full(grid.size, np.nan)
    low, high = iqm.copy(), iqm.copy()
    have = np.isfinite(values)
    rng = np.random.default_rng(seed)
    # columns with the same seeds present share one resampling (usually all columns at once)
    patterns = {}
    for col in range(grid.size):
        patterns.setdefault(have[:, col].tobytes(), []).append(col)
    for cols in patterns.values():
        rows = np.flatnonzero(have[:, cols[0]])
        if rows.size == 0:
            continue
        block = values[np.ix_(rows, cols)]  # (seeds, columns)
        iqm[cols] = stats.iqm_columns(block)
        if rows.size >= 2:
            idx = rng.integers(0, rows.size, size=(reps, rows.size))
            boot = stats.iqm_columns(block[idx])  # (reps, columns)
            low[cols] = np.quantile(boot, 0.025, axis=0)
            high[cols] = np.quantile(boot, 0.975, axis=0)
    return {
        "step": grid.tolist(),
        "iqm": _clean(iqm),
        "low": _clean(low),
        "high": _clean(high),
        "n": have.sum(0).tolist(),
    }


def _clean(a: np.ndarray) -> list:
    """NaN -> None, so the result is valid JSON for the web UI."""
    return [None if not np.isfinite(v) else float(v) for v in a]


def run_curve(
    run_dir: str | Path,
    metric: str = RETURN,
    points: int = 100,
    window: int = 20,
    seeds=None,
) -> dict:
    """The aggregate curve of one archived run (all its seeds, or `seeds`): `aggregate_curves`'s
    dict plus `metric` and `seeds` (those that logged it)."""
    from backflip.runs.archive import read_json

    run_dir = Path(run_dir)
    if seeds is None:
        seeds = read_json(run_dir / "run.json")["config"]["seeds"]
    per_seed = run_seed_curves(run_dir, seeds, metric, window)
    agg = aggregate_curves(list(per_seed.values()), points)
    return {**agg, "metric": metric, "seeds": list(per_seed)}
