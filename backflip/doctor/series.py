"""What the rules read: one training run's metric series, and small robust statistics over them.

A `RunData` is one seed of one run, whatever wrote it (backflip, Stable-Baselines3, CleanRL): its
series under backflip's metric names (docs/metrics.md; `sources.py` maps other libraries' names),
its finished episodes when the writer kept them, and what is known of its configuration. Rules
never assume a metric exists: `get` returns None and the rule says nothing.

Which series is "the return" is decided here, once (`RunData.returns`): the training episodes'
return, except on a preference run, where the policy trains on a learned reward r̂ and the rules
read the true return instead (`backflip/returns.py`). Every message then names what it read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from backflip.returns import EVAL_RETURN, LEARNED_NOTE, TRAINING_RETURN, TRUE_RETURN
from backflip.runs.layout import EPISODES, TRUE_EPISODES
from backflip.stats import scipy_stats

Series = tuple[np.ndarray, np.ndarray]  # (steps, values)


@dataclass(frozen=True)
class Returns:
    """Where a run's episode returns are logged, and what messages call them."""

    mean: str
    """a windowed mean of episode returns (the series every return rule can read)"""
    max: str | None
    """the window's maximum, when logged"""
    episodes: str | None
    """the `RunData` field holding these returns episode by episode (`RunData.episodes_of`):
    episodes (episodes.csv), true_episodes (a preference run's true_episodes.csv), or None"""
    name: str
    """how messages call them: 'return', 'true return (prefs/true_return_mean)'"""
    rewards: str
    """how messages call the per-step rewards behind them (plural)"""


TASK_RETURNS = Returns(TRAINING_RETURN, "rollout/ep_return_max", "episodes", "return", "rewards")
"""an ordinary run: the algorithm trains on the task's reward"""
LEARNED_RETURNS = Returns(
    TRAINING_RETURN,
    "rollout/ep_return_max",
    "episodes",
    f"learned-reward return ({TRAINING_RETURN}: {LEARNED_NOTE})",
    "learned rewards (r̂)",
)
"""a preference run's training returns: what the algorithm saw (episodes.csv holds these too)"""
TRUE_RETURNS = Returns(
    TRUE_RETURN, None, "true_episodes", f"true return ({TRUE_RETURN})", "true rewards"
)
"""a preference run's true return of training episodes"""
EVAL_RETURNS = Returns(
    EVAL_RETURN, "eval/return_max", None, f"true return ({EVAL_RETURN}, greedy)", "true rewards"
)
"""a preference run without prefs/true_return_mean: its greedy evaluations"""


CONSTANT_FROM = 10
"""the fewest returns (episodes and evaluations) that all equal one value make it constant"""


@dataclass
class RunData:
    """One training run (one seed) as the doctor sees it."""

    label: str
    """how messages name it: 'seed 0', 'PPO_1'"""
    metrics: dict[str, Series]
    """backflip metric name -> (env steps, values), in step order"""
    episodes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """every finished training episode: (step, return, length), when the writer kept them"""
    true_episodes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """a preference run's training episodes on the task's reward (`episodes` holds r̂ there)"""
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
    learned_reward: bool = False
    """the policy trained on a learned reward r̂ (a preference run: `backflip.returns.
    is_preference_run`); rollout/ep_return_*, env/reward_* and episodes.csv then hold r̂"""
    prefs: dict = field(default_factory=dict)
    """a preference run's settings (its config's prefs section), when known"""

    def get(self, name: str) -> Series | None:
        """A series with at least one point, or None."""
        s = self.metrics.get(name)
        return s if s is not None and len(s[0]) else None

    def episodes_of(self, r: Returns) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The episodes (step, return, length) behind returns `r`, when the writer kept them."""
        return getattr(self, r.episodes) if r.episodes else None

    def find(self, pattern: str) -> str | None:
        """The first metric name matching a regular expression (searched in sorted order)."""
        rx = re.compile(pattern)
        return next((k for k in sorted(self.metrics) if rx.search(k) and self.get(k)), None)

    @property
    def returns(self) -> Returns:
        """The task's return, which every rule asking "did the policy improve?" reads: the
        training episodes' return, or on a preference run the true return (its greedy
        evaluations when it logged no prefs/true_return_mean)."""
        if not self.learned_reward:
            return TASK_RETURNS
        if self.get(TRUE_RETURN) is None and self.get(EVAL_RETURN) is not None:
            return EVAL_RETURNS
        return TRUE_RETURNS

    @property
    def constant_return(self) -> tuple[float, int] | None:
        """(the value, how many episodes) when the task's return took one value in every episode
        and greedy evaluation this run logged (at least `CONSTANT_FROM`), else None: an env
        without a reward of its own, labeled by a person, whose true return measures nothing."""
        r = self.returns
        eps = self.episodes_of(r)
        seen = [eps[1]] if eps is not None and len(eps[1]) else []
        if not seen and (s := self.get(r.mean)) is not None:
            seen.append(s[1])
        if (s := self.get(EVAL_RETURN)) is not None:
            seen.append(s[1])
        values = np.concatenate(seen) if seen else np.zeros(0)
        if len(values) < CONSTANT_FROM or not np.isfinite(values).all() or np.ptp(values) > 0:
            return None
        return float(values[0]), len(values)

    @property
    def trained_returns(self) -> Returns:
        """The return the algorithm optimized: what its rewards, value targets and Q are
        about. The learned reward's on a preference run, else the task's."""
        return LEARNED_RETURNS if self.learned_reward else TASK_RETURNS

    @property
    def reward_switch(self) -> int | None:
        """The step at which the reward the policy trains on was replaced wholesale: where a
        preference run's exploration ended (`prefs/exploring` 1 -> 0: the novelty bonus gave way
        to r̂), else None."""
        s = self.get("prefs/exploring")
        if s is None:
            return None
        steps, v = s
        done = np.flatnonzero((v[:-1] > 0.5) & (v[1:] < 0.5))
        return int(steps[done[0] + 1]) if len(done) else None

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
    return float(scipy_stats().spearmanr(x, y).statistic)


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


def planned_steps(config: dict) -> int | None:
    """The env steps a seed was planned to train: its budget, or where `run.max_steps` stops it
    (its schedules keep the budget's length, but training ends there)."""
    steps, stop = config.get("steps"), (config.get("run") or {}).get("max_steps")
    return min(steps, stop) if steps and stop else steps


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
    name: str = "return"
    """what was read, as messages call it (`Returns.name`)"""
    metric: str = TRAINING_RETURN
    """the metric read ('episodes.csv' for per-episode returns)"""

    def describe(self) -> str:
        return f"{self.name} {fmt(self.early)} early, {fmt(self.late)} late"

    def evidence(self) -> dict:
        """What a finding built on this comparison records of it."""
        return {"return_metric": self.metric, "return_early": self.early, "return_late": self.late}


EARLY, LATE = 0.15, 0.2  # fractions of training compared by `progress`


def progress(d: RunData, returns: Returns | None = None) -> Progress | None:
    """Compare the return in the first 15% of training with the last 20%.

    `returns` defaults to the run's task return (`RunData.returns`: the true return on a
    preference run). With per-episode returns (backflip, CleanRL) "improved" means a one-sided
    Mann–Whitney test finds late returns larger (p < 0.01) and their mean larger by at least a
    fifth of the early spread (the interquartile range over 1.349: a normal's standard
    deviation, unmoved by a tail of failed episodes). With only a logged rolling mean (Stable-Baselines3's ep_rew_mean over 100 episodes,
    a preference run's prefs/true_return_mean over 20) it means the late mean exceeds the early
    one by 3 standard deviations of the early window's values around their linear trend, and by
    at least 5% of the early value's magnitude.
    """
    r = returns or d.returns
    end = d.horizon
    if (eps := d.episodes_of(r)) is not None and len(eps[0]) >= 20:
        steps, rets, _ = eps
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        if len(rets) < 20:
            return None
        n_early = max(int(np.sum(steps <= EARLY * end)), 10)
        n_late = max(int(np.sum(steps >= (1 - LATE) * end)), 10)
        early, late = rets[:n_early], rets[-n_late:]
        rest = rets[n_early:]
        noise = float(np.std(early))
        # the early spread as a normal's standard deviation from the interquartile range: a
        # tail of failures among the early episodes (CliffWalking's -1,000 walks beside -13s)
        # must not hide that they are gone late
        q1, q3 = np.quantile(early, [0.25, 0.75])
        improved = False
        if late.mean() > early.mean() + 0.2 * float(q3 - q1) / 1.349:
            try:
                p = scipy_stats().mannwhitneyu(late, early, alternative="greater").pvalue
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
            r.name,
            TRUE_EPISODES if r.episodes == "true_episodes" else EPISODES,
        )
    s = d.get(r.mean)
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
    if r.max is not None and (mx := d.get(r.max)) is not None:
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
        r.name,
        r.mean,
    )
