"""Statistics over seeds: aggregates with stratified bootstrap intervals, and comparisons.

Deep RL results vary so much across seeds that two groups of five seeds of the same code can
differ "significantly" (Henderson et al. 2017). The tools here follow Agarwal et al. (2021,
"Deep RL at the Edge of the Statistical Precipice", the `rliable` library):

- aggregates over runs: mean, median and the interquartile mean (IQM: the mean of the middle
  50% of runs, robust to one outlier seed yet more efficient than the median), each with a
  **stratified bootstrap** 95% confidence interval — runs are resampled with replacement
  *within* each task (env), never across, so an easy task cannot stand in for a hard one;
- the **probability of improvement** P(X > Y): the chance that a random run of X beats a
  random run of Y on the same task (the Mann–Whitney U statistic divided by n_x·n_y, averaged
  over tasks), with a CI from resampling both sides independently within each task;
- **Welch's t-test** (unequal variances) on the difference of means;
- the **success fraction**: the share of runs reaching a threshold, with a Wilson interval;
- the **optimality gap** (how far runs fall short of a target score, 1 on normalized scores:
  gamma - mean(min(x, gamma))) and **performance profiles** (score distributions: the fraction
  of runs scoring above each threshold tau, with a stratified bootstrap band) — the rest of
  rliable's toolkit, for scores across tasks normalized by `backflip.references`.

Scores are arrays of shape (runs,) for one task or (runs, tasks), or a list of one 1-D array per
task when tasks have different numbers of runs (a seed that failed): each task's runs are then
resampled within the task and the statistic pools every run (with equal counts that is exactly
the (runs, tasks) case, and rliable's definition). The statistics use SciPy
(`trim_mean`, `mannwhitneyu`, `ttest_ind`, `binomtest`); the stratified bootstrap itself is a
few lines of NumPy because SciPy has no stratified resampler and rliable's needs `arch` and
pandas < 3 — `tests/test_stats.py` checks that both give the same intervals on the same scores.
The bootstrap draws from a fixed seed, so a summary printed twice is the same summary.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _sps():
    """scipy.stats, imported when a statistic needs it (1-2 s; `backflip runs` never does)."""
    from scipy import stats

    return stats


scipy_stats = _sps  # the same for other modules: the doctor's rules (`backflip show` needs none)


MIN_TRUSTWORTHY_SEEDS = 5
REPS = 10_000  # bootstrap resamples: CI endpoints stable to ~1% of the score range
LEVEL = 0.95


def _as_2d(scores) -> np.ndarray:
    """(runs,) or (runs, tasks) -> float64 (runs, tasks)."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"scores must be (runs,) or (runs, tasks), got shape {x.shape}")
    return x


# --- aggregate statistics; each takes (..., runs, tasks) and reduces the last two axes ---------


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(*x.shape[:-2], -1)


def iqm(x) -> float | np.ndarray:
    """Interquartile mean over all runs and tasks: scipy's 25%-trimmed mean."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return float("nan")
    if x.ndim <= 2:
        return float(_sps().trim_mean(x.reshape(-1), 0.25))
    return _sps().trim_mean(_flat(x), 0.25, axis=-1)


def iqm_columns(x) -> np.ndarray:
    """IQM over the runs axis (-2) of (..., runs, columns): one value per column (curve step)."""
    return _sps().trim_mean(np.asarray(x, dtype=np.float64), 0.25, axis=-2)


def mean(x) -> float | np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()) if x.ndim <= 2 else _flat(x).mean(-1)


def median(x) -> float | np.ndarray:
    """The median over all runs and tasks (rliable's `aggregate_median` is instead the median of
    per-task means; with one task that would be the mean, which is not what a reader expects)."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.median(x)) if x.ndim <= 2 else np.median(_flat(x), -1)


def optimality_gap(x, gamma: float = 1.0) -> float | np.ndarray:
    """gamma - mean(min(x, gamma)) over all runs and tasks (rliable's `aggregate_optimality_gap`):
    how far the runs fall short of gamma, a run above gamma counting as gamma. On normalized
    scores gamma = 1 is the reference score; lower is better."""
    x = np.asarray(x, dtype=np.float64)
    clipped = np.minimum(x, gamma)
    return float(gamma - clipped.mean()) if x.ndim <= 2 else gamma - _flat(clipped).mean(-1)


STATISTICS: dict[str, Callable] = {"iqm": iqm, "mean": mean, "median": median}
# across tasks on normalized scores: the four aggregates of rliable's figures
NORMALIZED_STATISTICS: dict[str, Callable] = {**STATISTICS, "optimality_gap": optimality_gap}


def stratified_resample(x: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """(reps, runs, tasks): each task's runs resampled with replacement, independently per task."""
    n, m = x.shape
    idx = rng.integers(0, n, size=(reps, n, m))
    return x[idx, np.arange(m)]


def stratified_bootstrap_ci(
    scores, statistic=iqm, reps: int = REPS, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of `statistic` over stratified bootstrap resamples of the runs."""
    x = _as_2d(scores)
    if x.shape[0] < 2:
        return (float("nan"), float("nan"))
    values = statistic(stratified_resample(x, reps, np.random.default_rng(seed)))
    alpha = (1 - level) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def tasks_of(scores) -> list[np.ndarray]:
    """Scores as one 1-D float array per task: from (runs,), (runs, tasks) or a list of arrays."""
    if isinstance(scores, list | tuple) and scores and np.ndim(scores[0]) == 1:
        return [np.asarray(t, dtype=np.float64).reshape(-1) for t in scores]
    x = _as_2d(scores)
    return [x[:, j] for j in range(x.shape[1])]


def _stacked(tasks: list[np.ndarray]) -> np.ndarray:
    """(runs, tasks) when every task has as many runs, else every run pooled as (runs, 1)."""
    if len({t.size for t in tasks}) == 1:
        return np.stack(tasks, axis=1)
    return np.concatenate(tasks)[:, None]


def resample_tasks(tasks: list[np.ndarray], reps: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified bootstrap resamples: (reps, runs, tasks), or (reps, all runs, 1) when tasks have
    different numbers of runs (each task's runs still resampled within the task)."""
    if len({t.size for t in tasks}) == 1:
        return stratified_resample(np.stack(tasks, axis=1), reps, rng)
    parts = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in tasks]
    return np.concatenate(parts, axis=1)[..., None]


def fewest_runs(tasks: list[np.ndarray]) -> int:
    """The smallest number of runs on any task: an interval needs 2 or more on every task."""
    return min((t.size for t in tasks), default=0)


# kept for callers of the first version: a 1-D percentile bootstrap is the one-task special case
bootstrap_ci = stratified_bootstrap_ci


def aggregate(
    scores,
    reps: int = REPS,
    level: float = LEVEL,
    seed: int = 0,
    statistics: dict[str, Callable] | None = None,
) -> dict:
    """Point estimate and CI of each statistic (default: mean, median and IQM; across tasks on
    normalized scores, `NORMALIZED_STATISTICS` adds the optimality gap):
    {"iqm": (value, low, high), ...}. Every statistic is computed on the same resamples."""
    statistics = statistics or STATISTICS
    tasks = tasks_of(scores)
    x = _stacked(tasks)
    rng = np.random.default_rng(seed)
    samples = resample_tasks(tasks, reps, rng) if fewest_runs(tasks) >= 2 else None
    alpha = (1 - level) / 2
    out = {}
    for name, fn in statistics.items():
        low = high = float("nan")
        if samples is not None:
            values = fn(samples)
            low, high = float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))
        out[name] = (fn(x), low, high)
    return out


def performance_profile(
    scores, taus=None, reps: int = 2000, level: float = LEVEL, seed: int = 0, points: int = 101
) -> dict:
    """rliable's score distribution: the fraction of runs (over all runs and tasks) scoring
    strictly above each threshold tau, with a stratified bootstrap band (2,000 resamples, as
    rliable's `create_performance_profile`). `taus` defaults to `points` thresholds evenly spread
    over the scores' range. JSON-ready lists: {"tau", "fraction", "low", "high", "n"}."""
    tasks = tasks_of(scores)
    x = _stacked(tasks).reshape(-1)
    if taus is None:
        taus = profile_taus([x], points)
    taus = np.asarray(taus, dtype=np.float64)
    frac = np.array([(x > t).mean() for t in taus])
    low = np.full(taus.size, np.nan)
    high = low.copy()
    if fewest_runs(tasks) >= 2:
        flat = resample_tasks(tasks, reps, np.random.default_rng(seed)).reshape(reps, -1)
        flat = np.sort(flat, axis=1)
        alpha = (1 - level) / 2
        for i, t in enumerate(taus):  # fraction above t in each resample, from its sorted runs
            above = 1.0 - (flat <= t).sum(1) / flat.shape[1]
            low[i], high[i] = np.quantile(above, alpha), np.quantile(above, 1 - alpha)
    clean = lambda a: [float(v) if np.isfinite(v) else None for v in a]  # noqa: E731
    return {
        "tau": taus.tolist(),
        "fraction": frac.tolist(),
        "low": clean(low),
        "high": clean(high),
        "n": int(x.size),
    }


def profile_taus(score_sets, points: int = 101, include=()) -> np.ndarray:
    """`points` thresholds evenly spread from the lowest to the highest of all these scores (and
    of `include`, e.g. (0, 1) on normalized scores), so several profiles share one axis."""
    values = [float(v) for s in score_sets for v in np.ravel(np.asarray(s, float))]
    values = [v for v in values if np.isfinite(v)] + [float(v) for v in include]
    if not values:
        return np.zeros(0)
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, points)


def summarize(values) -> dict:
    """Per-seed final scores of one run -> IQM [95% CI], mean [CI], median [CI], min, max, n.

    Missing values (a seed that failed before its evaluation) are dropped here; callers that
    must report every run (preregistered plans) count them separately.
    """
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return {"n": 0}
    return {"n": int(x.size), **_summary(aggregate(x), x, int(x.size))}


def _summary(agg: dict, x: np.ndarray, n: int) -> dict:
    """The keys `summarize` and `summarize_tasks` share, from `aggregate`'s (point, low, high)
    triples and the pooled scores `x`; `n` seeds decide whether it is `trustworthy`."""
    return {
        "iqm": agg["iqm"][0],
        "ci_low": agg["iqm"][1],
        "ci_high": agg["iqm"][2],
        "mean": agg["mean"][0],
        "mean_ci": [agg["mean"][1], agg["mean"][2]],
        "median": agg["median"][0],
        "median_ci": [agg["median"][1], agg["median"][2]],
        "min": float(x.min()),
        "max": float(x.max()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "trustworthy": bool(n >= MIN_TRUSTWORTHY_SEEDS),
    }


def summarize_tasks(tasks: list) -> dict:
    """`summarize` across tasks on normalized scores (one list per task, None for a seed without
    a score): the IQM, mean and median pool every run, resampled within its task; adds the
    optimality gap (`og`, `og_ci`) and `tasks`."""
    clean = [
        np.asarray([v for v in t if v is not None and np.isfinite(v)], np.float64) for t in tasks
    ]
    if not clean or min(t.size for t in clean) == 0:
        return {"n": 0, "tasks": len(tasks)}
    agg = aggregate(clean, statistics=NORMALIZED_STATISTICS)
    x = np.concatenate(clean)
    n = fewest_runs(clean)
    return {
        "n": n,
        "runs": int(x.size),
        "tasks": len(clean),
        **_summary(agg, x, n),
        "og": agg["optimality_gap"][0],
        "og_ci": [agg["optimality_gap"][1], agg["optimality_gap"][2]],
    }


# --- comparisons ----------------------------------------------------------------------------------


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + 0.5 P(X = Y) per task, averaged over tasks; x (..., n_x, tasks), y (..., n_y,
    tasks). SciPy's U statistic for x counts the pairs where x wins (ties count one half)."""
    u = _sps().mannwhitneyu(x, y, axis=-2, method="asymptotic").statistic
    return (u / (x.shape[-2] * y.shape[-2])).mean(-1)


def probability_of_improvement(
    x, y, reps: int = REPS, level: float = LEVEL, seed: int = 0
) -> tuple[float, float, float]:
    """(P(X > Y), low, high): Mann–Whitney based, averaged over tasks, with a stratified
    bootstrap interval that resamples X's and Y's runs independently within each task. X and Y
    are (runs,) / (runs, tasks) arrays, or lists of one array per task (runs may differ)."""
    xt, yt = tasks_of(x), tasks_of(y)
    if len(xt) != len(yt):
        raise ValueError("x and y must have the same number of tasks")
    rectangular = len({t.size for t in xt}) == 1 and len({t.size for t in yt}) == 1
    if rectangular:
        x, y = np.stack(xt, axis=1), np.stack(yt, axis=1)
        point = float(_poi(x, y))
    else:
        point = float(np.mean([_poi(a[:, None], b[:, None]) for a, b in zip(xt, yt, strict=True)]))
    if min(fewest_runs(xt), fewest_runs(yt)) < 2:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if rectangular:
        values = _poi(stratified_resample(x, reps, rng), stratified_resample(y, reps, rng))
    else:
        per_task = []
        for a, b in zip(xt, yt, strict=True):
            ra = a[rng.integers(0, a.size, size=(reps, a.size))][..., None]
            rb = b[rng.integers(0, b.size, size=(reps, b.size))][..., None]
            per_task.append(_poi(ra, rb))
        values = np.mean(per_task, axis=0)
    alpha = (1 - level) / 2
    return point, float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def welch(x, y) -> dict:
    """Welch's t-test of mean(X) - mean(Y) on all scores of each side (one task)."""
    x, y = np.ravel(np.asarray(x, float)), np.ravel(np.asarray(y, float))
    if min(x.size, y.size) < 2:
        return {"t": float("nan"), "p": float("nan"), "diff": float(x.mean() - y.mean())}
    if x.std() == 0 and y.std() == 0:  # two constant samples: no variance to test against
        same = x[0] == y[0]
        return {"t": float("nan"), "p": 1.0 if same else 0.0, "diff": float(x[0] - y[0])}
    res = _sps().ttest_ind(x, y, equal_var=False)
    ci = res.confidence_interval(LEVEL)
    return {
        "t": float(res.statistic),
        "p": float(res.pvalue),
        "df": float(res.df),
        "diff": float(x.mean() - y.mean()),
        "diff_ci": [float(ci.low), float(ci.high)],
    }


def success_fraction(scores, threshold: float, level: float = LEVEL) -> dict:
    """Share of runs scoring >= threshold, with a Wilson score interval."""
    x = np.ravel(np.asarray(scores, float))
    k, n = int((x >= threshold).sum()), int(x.size)
    if n == 0:
        return {"k": 0, "n": 0, "fraction": float("nan"), "ci": [float("nan"), float("nan")]}
    ci = _sps().binomtest(k, n).proportion_ci(level, method="wilson")
    return {"k": k, "n": n, "fraction": k / n, "ci": [float(ci.low), float(ci.high)]}


def compare_pair(a, b, reps: int = REPS) -> dict:
    """Everything needed to judge "does B beat A?" on per-seed scores of one task."""
    p, lo, hi = probability_of_improvement(b, a, reps=reps)
    return {"poi": p, "poi_ci": [lo, hi], "welch": welch(b, a), "n_a": len(a), "n_b": len(b)}


def compare_tasks(a_tasks: list, b_tasks: list, reps: int = REPS) -> dict:
    """`compare_pair` across tasks, on normalized scores (one list of runs per task, the same
    tasks in the same order on both sides): P(B > A) averaged over tasks with its stratified
    interval, and Welch's test on every run's normalized score pooled — the same verdict rule.
    With one task this is `compare_pair`."""
    if len(a_tasks) == 1:
        return compare_pair(list(a_tasks[0]), list(b_tasks[0]), reps)
    p, lo, hi = probability_of_improvement(b_tasks, a_tasks, reps=reps)
    pooled = lambda ts: np.concatenate([np.asarray(t, float) for t in ts])  # noqa: E731
    return {
        "poi": p,
        "poi_ci": [lo, hi],
        "welch": welch(pooled(b_tasks), pooled(a_tasks)),
        "n_a": min(len(t) for t in a_tasks),
        "n_b": min(len(t) for t in b_tasks),
        "tasks": len(a_tasks),
    }


def winner(cmp: dict, alpha: float = 0.05) -> str | None:
    """The verdict rule on a `compare_pair` result: "b" when P(B > A)'s 95% interval lies above
    0.5 *and* Welch's p < alpha, "a" the other way round, else None (insufficient evidence)."""
    lo, hi = cmp["poi_ci"]
    w = cmp["welch"]["p"]
    if not _finite(w) or w >= alpha:
        return None
    if _finite(lo) and lo > 0.5:
        return "b"
    if _finite(hi) and hi < 0.5:
        return "a"
    return None


def verdict(name_a: str, name_b: str, cmp: dict, alpha: float = 0.05) -> str:
    """One line: who beats whom, with the numbers; or that the evidence is insufficient.

    B beats A when P(B > A)'s 95% interval lies above 0.5 *and* Welch's p < alpha (and the other
    way round); anything else is "insufficient evidence" — which is not evidence of no difference.
    """
    p, (lo, hi) = cmp["poi"], cmp["poi_ci"]
    n = f"{cmp['n_a']} vs {cmp['n_b']} seeds"
    if cmp.get("tasks", 1) > 1:  # n_a, n_b: the fewest seeds on any task
        n = f"{cmp['n_a']} seeds" if cmp["n_a"] == cmp["n_b"] else n
        n += f" per task, {cmp['tasks']} tasks, normalized scores"
    elif cmp["n_a"] == cmp["n_b"]:
        n = f"{cmp['n_a']} seed{'s' * (cmp['n_a'] != 1)} each"
    poi_ci = interval(lo, hi, min(cmp["n_a"], cmp["n_b"]), digits=2)
    nums = f"P({name_b}>{name_a})={p:.2f} {poi_ci}, Welch p={_p(cmp['welch']['p'])}, {n}"
    who = winner(cmp, alpha)
    if who == "b":
        return f"{name_b} beats {name_a}: {nums}"
    if who == "a":
        return f"{name_a} beats {name_b}: {nums}"
    return f"insufficient evidence that {name_a} and {name_b} differ: {nums}"


def _p(p: float | None) -> str:
    if not _finite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


# --- words for numbers ----------------------------------------------------------------------------


def _finite(x) -> bool:
    """A number that is not NaN or infinite (None, from an archived JSON file, is not one)."""
    return isinstance(x, int | float | np.number) and bool(np.isfinite(x))


def no_interval(n: int | None) -> str:
    """Why an interval is missing: "no interval: 1 seed" (a bootstrap needs 2 or more)."""
    if n is not None and n < 2:
        return f"no interval: {n} seed{'s' * (n != 1)}"
    return "no interval"


def interval(low, high, n: int | None = None, digits: int = 1, prefix: str = "") -> str:
    """An interval as text: "[487.2, 500.0]" ("[95% CI 487.2, 500.0]" with `prefix`), or why
    there is none: "[no interval: 1 seed]" — never "[nan, nan]". `n`: the seeds behind it.

    The one place every summary, verdict, table and page formats an interval."""
    if _finite(low) and _finite(high):
        return f"[{prefix}{low:,.{digits}f}, {high:,.{digits}f}]"
    return f"[{no_interval(n)}]"
