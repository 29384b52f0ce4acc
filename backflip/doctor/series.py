"""What the rules read: one training run's metric series, and small robust statistics over them.

A `RunData` is one seed of one run, whatever wrote it (backflip, Stable-Baselines3, CleanRL): its
series under backflip's metric names (docs/metrics.md; `sources.py` maps other libraries' names),
its finished episodes when the writer kept them, and what is known of its configuration. Rules
never assume a metric exists: `get` returns None and the rule says nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

Series = tuple[np.ndarray, np.ndarray]  # (steps, values)


@dataclass
class RunData:
    """One training run (one seed) as the doctor sees it."""

    label: str
    """how messages name it: 'seed 0', 'PPO_1'"""
    metrics: dict[str, Series]
    """backflip metric name -> (env steps, values), in step order"""
    episodes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """every finished training episode: (step, return, length), when the writer kept them"""
    source: str = "backflip"
    """backflip, sb3 or cleanrl"""
    algo: str | None = None
    env_id: str | None = None
    hp: dict = field(default_factory=dict)
    """the algorithm's hyperparameters, when known (backflip runs)"""
    env_opts: dict = field(default_factory=dict)
    budget: int | None = None
    """planned env steps (None: unknown, the last logged step is used)"""
    status: dict = field(default_factory=dict)
    """the seed's status.json (backflip runs): status, error"""
    action_n: int | None = None
    """number of discrete actions (None: unknown or continuous)"""

    def get(self, name: str) -> Series | None:
        """A series with at least one point, or None."""
        s = self.metrics.get(name)
        return s if s is not None and len(s[0]) else None

    def find(self, pattern: str) -> str | None:
        """The first metric name matching a regular expression (searched in sorted order)."""
        rx = re.compile(pattern)
        return next((k for k in sorted(self.metrics) if rx.search(k) and self.get(k)), None)

    @property
    def end(self) -> int:
        """The last step with any metric."""
        return max((int(s[-1]) for s, _ in self.metrics.values() if len(s)), default=0)

    @property
    def horizon(self) -> int:
        """The planned length of training (the budget, or the last step when unknown)."""
        return max(self.budget or 0, self.end)


# --- windows ----------------------------------------------------------------------------------


def finite(s: Series) -> Series:
    steps, values = s
    ok = np.isfinite(values)
    return steps[ok], values[ok]


def between(s: Series, lo: float, hi: float, end: float) -> Series:
    """The points with lo*end < step <= hi*end (lo=0 includes step 0)."""
    steps, values = s
    ok = (steps <= hi * end) & ((steps > lo * end) if lo > 0 else True)
    return steps[ok], values[ok]


def head(s: Series, frac: float, end: float, min_points: int = 3) -> Series:
    """The first `frac` of training by steps, at least `min_points` points."""
    steps, values = s
    n = max(int(np.sum(steps <= frac * end)), min(min_points, len(steps)))
    return steps[:n], values[:n]


def tail(s: Series, frac: float, end: float, min_points: int = 3) -> Series:
    """The last `frac` of training by steps, at least `min_points` points."""
    steps, values = s
    n = max(int(np.sum(steps >= (1 - frac) * end)), min(min_points, len(steps)))
    return steps[len(steps) - n :], values[len(values) - n :]


def after_warmup(s: Series, end: float, warmup: float = 0.2) -> Series:
    """Points after the first `warmup` fraction of training."""
    return between(s, warmup, 1.0, end)


def thirds(values: np.ndarray) -> tuple[float, float, float]:
    """Medians of the first, middle and last third of a series."""
    parts = np.array_split(np.asarray(values, np.float64), 3)
    return tuple(float(np.median(p)) if len(p) else math.nan for p in parts)


def spearman(x, y) -> float:
    """Rank correlation (monotone trend strength), NaN when undefined."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(sps.spearmanr(x, y).statistic)


def rolling_median(values: np.ndarray, window: int) -> np.ndarray:
    """Median of the `window` values *before* each point (NaN for the first)."""
    v = np.asarray(values, np.float64)
    out = np.full(len(v), np.nan)
    if len(v) < 2:
        return out
    padded = np.r_[np.full(window - 1, np.nan), v]
    # row j holds v[j - window + 1 .. j]: the window that ends just before point j + 1
    rows = np.lib.stride_tricks.sliding_window_view(padded, window)[: len(v) - 1]
    out[1:] = np.nanmedian(rows, axis=1)
    return out


def mad(values: np.ndarray) -> float:
    """Median absolute deviation scaled to match the standard deviation of a normal."""
    v = np.asarray(values, np.float64)
    return float(1.4826 * np.median(np.abs(v - np.median(v)))) if len(v) else math.nan


def fmt(x: float, digits: int = 3) -> str:
    """A compact number for messages: 0.0123, 1.2e-08, 4.5e+04, 500."""
    if x is None or not np.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.{max(digits - 1, 1)}e}"
    return f"{x:.{digits}g}"


def detrended_std(s: Series) -> float:
    """Standard deviation of a series around its least-squares line (0 for < 3 points)."""
    steps, values = np.asarray(s[0], np.float64), np.asarray(s[1], np.float64)
    if len(values) < 3 or np.ptp(steps) == 0:
        return float(np.std(values))
    slope, intercept = np.polyfit(steps, values, 1)
    return float(np.std(values - (slope * steps + intercept)))


# --- did the return improve? ------------------------------------------------------------------


@dataclass
class Progress:
    """Early vs late training return, and whether the difference is more than noise."""

    early: float
    late: float
    noise: float
    improved: bool
    early_max: float
    best: float
    """the best return (or window mean, for series-only sources) after the early window"""
    basis: str
    """'episodes' (per-episode returns) or 'series' (a logged rolling mean)"""
    step_late: int

    def describe(self) -> str:
        return f"return {fmt(self.early)} early, {fmt(self.late)} late"


EARLY, LATE = 0.15, 0.2  # fractions of training compared by `progress`


def progress(d: RunData) -> Progress | None:
    """Compare the return in the first 15% of training with the last 20%.

    With per-episode returns (backflip, CleanRL) "improved" means a one-sided Mann–Whitney test
    finds late returns larger (p < 0.01) by at least a fifth of the early spread. With only a
    logged rolling mean (Stable-Baselines3's ep_rew_mean over 100 episodes) it means the late
    mean exceeds the early one by 3 standard deviations of the early window's values around
    their linear trend, and by at least 5% of the early value's magnitude.
    """
    end = d.horizon
    if d.episodes is not None and len(d.episodes[0]) >= 20:
        steps, rets, _ = d.episodes
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        if len(rets) < 20:
            return None
        n_early = max(int(np.sum(steps <= EARLY * end)), 10)
        n_late = max(int(np.sum(steps >= (1 - LATE) * end)), 10)
        early, late = rets[:n_early], rets[-n_late:]
        rest = rets[n_early:]
        noise = float(np.std(early))
        improved = False
        if late.mean() > early.mean() + 0.2 * noise:
            try:
                p = sps.mannwhitneyu(late, early, alternative="greater").pvalue
            except ValueError:  # every value identical
                p = 1.0
            improved = bool(p < 0.01)
        return Progress(
            float(early.mean()),
            float(late.mean()),
            noise,
            improved,
            float(early.max()),
            float(rest.max()) if len(rest) else float(early.max()),
            "episodes",
            int(steps[-1]),
        )
    s = d.get("rollout/ep_return_mean")
    if s is None:
        return None
    s = finite(s)
    if len(s[0]) < 6:
        return None
    e, late_s = head(s, EARLY, end), tail(s, LATE, end)
    early_v, late_v = e[1], late_s[1]
    noise = detrended_std(e)
    margin = max(3 * noise, 0.05 * abs(float(np.mean(early_v))), 1e-9)
    rest = s[1][len(early_v) :]
    early_max = float(np.max(early_v))
    if (mx := d.get("rollout/ep_return_max")) is not None:
        mx = finite(mx)
        early_max = float(np.max(head(mx, EARLY, end)[1]))
        rest = mx[1][len(head(mx, EARLY, end)[1]) :]
    return Progress(
        float(np.mean(early_v)),
        float(np.mean(late_v)),
        noise,
        bool(np.mean(late_v) - np.mean(early_v) > margin),
        early_max,
        float(np.max(rest)) if len(rest) else early_max,
        "series",
        int(s[0][-1]),
    )
