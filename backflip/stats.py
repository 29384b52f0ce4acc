"""Statistics over seeds: interquartile mean and bootstrap confidence intervals.

Deep RL results vary so much across seeds that a mean of three runs says little (Henderson et al.
2017). Summaries report the interquartile mean (IQM, Agarwal et al. 2021: the mean of the middle
50% of runs, robust to one outlier seed yet more efficient than the median) with a percentile
bootstrap 95% confidence interval, plus min, max and every seed's value.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

MIN_TRUSTWORTHY_SEEDS = 5


def iqm(x) -> float:
    """Interquartile mean: the mean of the middle 50% (scipy's 25%-trimmed mean)."""
    x = np.asarray(x, dtype=np.float64)
    return float(sps.trim_mean(x, 0.25)) if x.size else float("nan")


def bootstrap_ci(
    x, statistic=iqm, reps: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` over resamples of the seeds."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(reps, x.size))
    values = np.apply_along_axis(statistic, 1, x[idx])
    alpha = (1 - level) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def summarize(values) -> dict:
    """IQM [95% CI], mean, median, min, max and n of per-seed scores."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return {"n": 0}
    low, high = bootstrap_ci(x)
    return {
        "n": int(x.size),
        "iqm": iqm(x),
        "ci_low": low,
        "ci_high": high,
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "min": float(x.min()),
        "max": float(x.max()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "trustworthy": bool(x.size >= MIN_TRUSTWORTHY_SEEDS),
    }
