"""Seed statistics agree with rliable (Agarwal et al. 2021) and behave as their definitions say."""

from pathlib import Path

import numpy as np
import pytest
from rliable import library as rly  # a test dependency (extra: test)
from rliable import metrics as rly_metrics

from backflip import stats
from backflip.curves import aggregate_curves, aggregate_task_curves

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # arch's RandomState notice

REPS = 20_000


@pytest.fixture
def scores():
    rng = np.random.default_rng(7)
    # 10 runs on 3 tasks of different difficulty, with one outlier run on task 0
    x = rng.normal([100.0, 300.0, 20.0], [30.0, 50.0, 5.0], size=(10, 3))
    x[0, 0] = 900.0
    y = rng.normal([130.0, 320.0, 22.0], [30.0, 50.0, 5.0], size=(8, 3))
    return x, y


def _rliable_interval(score_dict, func, reps=REPS):
    point, interval = rly.get_interval_estimates(
        score_dict, func, reps=reps, random_state=np.random.RandomState(3)
    )
    return point, interval


def test_aggregates_and_their_intervals_agree_with_rliable(scores):
    x, _ = scores
    ours = stats.aggregate(x, reps=REPS)
    point, interval = _rliable_interval(
        {"x": x},
        lambda s: np.array(
            [rly_metrics.aggregate_iqm(s), rly_metrics.aggregate_mean(s), np.median(s)]
        ),
    )
    scale = x.max() - x.min()
    for i, name in enumerate(("iqm", "mean", "median")):
        value, low, high = ours[name]
        assert value == pytest.approx(point["x"][i], rel=1e-12), name
        # different random draws: the endpoints agree to Monte Carlo error
        assert low == pytest.approx(interval["x"][0][i], abs=0.01 * scale), name
        assert high == pytest.approx(interval["x"][1][i], abs=0.01 * scale), name
        assert low < value < high


def test_probability_of_improvement_agrees_with_rliable(scores):
    x, y = scores
    p, low, high = stats.probability_of_improvement(y, x, reps=REPS)
    # rliable calls SciPy once per resample and task: 2,000 resamples take seconds, not minutes
    point, interval = _rliable_interval(
        {"y>x": [y, x]}, rly_metrics.probability_of_improvement, reps=2000
    )
    assert p == pytest.approx(point["y>x"], rel=1e-12)
    assert low == pytest.approx(interval["y>x"][0], abs=0.03)
    assert high == pytest.approx(interval["y>x"][1], abs=0.03)


def test_probability_of_improvement_counts_pairs_and_ties():
    assert stats.probability_of_improvement([2, 3], [1, 1])[0] == 1.0
    assert stats.probability_of_improvement([1, 1], [2, 3])[0] == 0.0
    # identical samples: every pair is a tie, worth one half
    p, low, high = stats.probability_of_improvement([5, 5, 5], [5, 5, 5])
    assert (p, low, high) == (0.5, 0.5, 0.5)
    # 2 of 4 pairs won, 1 tied: (2 + 0.5) / 4
    assert stats.probability_of_improvement([1, 3], [1, 2])[0] == pytest.approx(0.625)


def test_iqm_ignores_one_outlier_seed_where_the_mean_does_not():
    x = [100.0] * 7 + [10_000.0]
    assert stats.iqm(x) == 100.0 and stats.mean(x) > 1000


def test_welch_matches_scipy_and_handles_constant_samples():
    from scipy.stats import ttest_ind

    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0, 11.0]
    w = stats.welch(b, a)
    ref = ttest_ind(b, a, equal_var=False)
    assert w["p"] == pytest.approx(ref.pvalue) and w["t"] == pytest.approx(ref.statistic)
    assert w["diff"] == pytest.approx(np.mean(b) - np.mean(a))
    assert w["diff_ci"][0] < w["diff"] < w["diff_ci"][1]
    assert stats.welch([500.0] * 5, [500.0] * 5)["p"] == 1.0  # CartPole solved on every seed
    assert stats.welch([500.0] * 5, [200.0] * 5)["p"] == 0.0


def test_success_fraction_has_a_wilson_interval():
    sf = stats.success_fraction([500, 500, 480, 120, 60], 475)
    assert (sf["k"], sf["n"], sf["fraction"]) == (3, 5, 0.6)
    assert 0.2 < sf["ci"][0] < 0.6 < sf["ci"][1] < 0.95


def test_verdict_states_the_numbers_or_insufficient_evidence():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 10, 10), rng.normal(150, 10, 10)
    v = stats.verdict("A", "B", stats.compare_pair(a, b))
    assert v.startswith("B beats A: P(B>A)=1.00 [1.00, 1.00], Welch p=") and "10 seeds each" in v
    v = stats.verdict("A", "B", stats.compare_pair(b, a))
    assert v.startswith("A beats B")
    same = stats.verdict("A", "B", stats.compare_pair(a[:5], rng.normal(100, 10, 5)))
    assert same.startswith("insufficient evidence") and "5 seeds each" in same


def test_summarize_flags_fewer_than_five_seeds_as_untrustworthy():
    assert stats.summarize([1, 2, 3])["trustworthy"] is False
    s = stats.summarize([1, 2, 3, 4, 5, None])
    assert s["trustworthy"] is True and s["n"] == 5
    assert s["ci_low"] <= s["iqm"] <= s["ci_high"]
    assert s["mean_ci"][0] <= s["mean"] <= s["mean_ci"][1]


def test_learning_curve_aggregate_has_a_band_and_handles_a_seed_that_stopped_early():
    steps = np.arange(100, 1100, 100)
    curves = [(steps, steps / 10.0 + k) for k in range(5)]
    curves.append((steps[:4], steps[:4] / 10.0 + 100, 400))  # crashed at step 400
    agg = aggregate_curves(curves, points=10)
    assert agg["step"][0] == 100 and agg["step"][-1] == 1000
    assert agg["n"][0] == 6 and agg["n"][-1] == 5
    for lo, mid, hi in zip(agg["low"], agg["iqm"], agg["high"], strict=True):
        assert lo <= mid <= hi
    # at the end only the five healthy seeds count: IQM of k + 100 for k = 0..4 is 102
    assert agg["iqm"][-1] == pytest.approx(102.0)


def test_an_interval_says_why_it_is_missing_instead_of_nan():
    assert stats.interval(487.25, 500.0, 5, prefix="95% CI ") == "[95% CI 487.2, 500.0]"
    assert stats.interval(0.125, 0.5, 3, digits=2) == "[0.12, 0.50]"
    one = stats.summarize([41.3])
    assert stats.interval(one["ci_low"], one["ci_high"], one["n"]) == "[no interval: 1 seed]"
    assert stats.interval(None, None, 1) == "[no interval: 1 seed]"  # as archived in JSON
    assert stats.interval(float("nan"), float("nan"), 0) == "[no interval: 0 seeds]"
    assert stats.interval(None, 2.0, 4) == "[no interval]"
    pair = stats.compare_pair([41.3], [47.2])
    assert stats._p(pair["welch"]["p"]) == "n/a" and stats._p(None) == "n/a"
    assert stats.verdict("A", "B", pair) == (
        "insufficient evidence that A and B differ: P(B>A)=1.00 [no interval: 1 seed], "
        "Welch p=n/a, 1 seed each"
    )


# --- the rest of rliable: optimality gap, performance profiles, sample-efficiency curves -------


@pytest.fixture
def normalized():
    """Normalized scores of two algorithms: 10 runs on 3 tasks, some runs above the reference."""
    rng = np.random.default_rng(11)
    x = rng.normal([0.4, 0.9, 0.7], [0.3, 0.2, 0.4], size=(10, 3))
    y = rng.normal([0.6, 1.0, 0.8], [0.3, 0.2, 0.4], size=(10, 3))
    return x, y


def test_optimality_gap_and_its_interval_agree_with_rliable(normalized):
    x, _ = normalized
    ours = stats.aggregate(x, reps=REPS, statistics=stats.NORMALIZED_STATISTICS)
    point, interval = _rliable_interval(
        {"x": x}, lambda s: np.array([rly_metrics.aggregate_optimality_gap(s)])
    )
    value, low, high = ours["optimality_gap"]
    assert value == pytest.approx(point["x"][0], rel=1e-12)
    assert 0 < value < 1 and low < value < high
    assert low == pytest.approx(interval["x"][0][0], abs=0.01)
    assert high == pytest.approx(interval["x"][1][0], abs=0.01)
    # every run at or above the reference: no gap at all
    assert stats.optimality_gap(np.ones((5, 2)) * 1.3) == 0.0


def test_performance_profile_and_its_band_agree_with_rliable(normalized):
    x, y = normalized
    taus = np.linspace(-0.5, 2.0, 26)
    points, bands = rly.create_performance_profile({"x": x, "y": y}, taus, reps=5000)
    for name, scores in (("x", x), ("y", y)):
        ours = stats.performance_profile(scores, taus, reps=5000)
        assert ours["tau"] == pytest.approx(taus.tolist())
        assert ours["fraction"] == pytest.approx(points[name].tolist(), abs=1e-12)
        # a fraction of 30 runs moves in steps of 1/30: the bands agree to about one step
        assert ours["low"] == pytest.approx(bands[name][0].tolist(), abs=0.035)
        assert ours["high"] == pytest.approx(bands[name][1].tolist(), abs=0.035)
        assert ours["fraction"][0] == 1.0 and ours["fraction"][-1] == 0.0
        band = zip(ours["low"], ours["fraction"], ours["high"], strict=True)
        assert all(lo <= f <= hi for lo, f, hi in band)


def test_probability_of_improvement_across_tasks_agrees_with_rliable(normalized):
    x, y = normalized
    p, low, high = stats.probability_of_improvement(y, x, reps=REPS)
    point, interval = _rliable_interval(
        {"y>x": [y, x]}, rly_metrics.probability_of_improvement, reps=2000
    )
    assert p == pytest.approx(point["y>x"], rel=1e-12)
    assert low == pytest.approx(interval["y>x"][0], abs=0.03)
    assert high == pytest.approx(interval["y>x"][1], abs=0.03)
    # the same scores as one list per task: the same numbers
    as_lists = stats.probability_of_improvement(list(y.T), list(x.T), reps=REPS)
    assert as_lists == pytest.approx((p, low, high))


def test_tasks_with_different_seed_counts_are_resampled_within_each_task():
    a = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    b = np.array([0.9, 1.0, 1.1])  # a task where two seeds failed
    agg = stats.aggregate([a, b], statistics=stats.NORMALIZED_STATISTICS)
    pooled = np.concatenate([a, b])
    assert agg["iqm"][0] == pytest.approx(stats.iqm(pooled))
    assert agg["optimality_gap"][0] == pytest.approx(1 - np.minimum(pooled, 1).mean())
    assert agg["iqm"][1] < agg["iqm"][0] < agg["iqm"][2]
    # a resample keeps each task's runs: never fewer than 3 runs at or above 0.9
    tasks = stats.tasks_of([a, b])
    samples = stats.resample_tasks(tasks, 500, np.random.default_rng(0))
    assert samples.shape == (500, 8, 1) and ((samples[:, 5:, 0]) >= 0.9).all()
    assert (samples[:, :5, 0] <= 0.5).all()
    p, lo, hi = stats.probability_of_improvement([b, a], [a, a])
    assert p == pytest.approx(0.75)  # task 0: every b beats every a; task 1: a vs a, one half
    assert lo <= p <= hi
    one = stats.aggregate([a, b[:1]])
    assert np.isnan(one["iqm"][1])  # a task with one run: no interval


def test_two_identical_runs_logged_at_different_steps_give_the_same_curve():
    """y = x logged every 10 steps and every 7 steps: on the common grid the IQM is y = x (the
    wrong answer a tracker gives when it takes each run's last value, or groups by exact step)."""
    a = np.arange(0, 101, 10)
    b = np.append(np.arange(0, 100, 7), 100)
    curves = [(a, a.astype(float)), (b, b.astype(float))]
    agg = aggregate_curves(curves, points=1000)
    grid = np.asarray(agg["step"])
    assert set(a) | set(b) == set(grid.tolist())  # every logged step of either run
    assert agg["iqm"] == pytest.approx(grid.astype(float).tolist())
    assert agg["n"] == [2] * grid.size
    assert agg["low"] == pytest.approx(agg["iqm"]) and agg["high"] == pytest.approx(agg["iqm"])
    # the same across tasks: two tasks, each with the two runs
    across = aggregate_task_curves([curves, curves], points=1000)
    assert across["step"] == agg["step"] and across["iqm"] == pytest.approx(agg["iqm"])
    assert across["x"] == "steps" and across["tasks"] == 2


def test_sample_efficiency_curve_agrees_with_rliable():
    rng = np.random.default_rng(5)
    steps = np.arange(1, 11) * 1000
    # (runs, tasks, steps): 6 runs on 2 tasks learning at different speeds
    scores = np.cumsum(rng.uniform(0, 0.2, size=(6, 2, 10)), axis=-1)
    tasks = [[(steps, scores[r, t]) for r in range(6)] for t in range(2)]
    ours = aggregate_task_curves(tasks, points=10, reps=REPS)
    assert ours["step"] == steps.tolist() and ours["n"] == [12] * 10

    def iqm_per_step(s):
        return np.array([rly_metrics.aggregate_iqm(s[..., i]) for i in range(s.shape[-1])])

    point, interval = _rliable_interval({"x": scores}, iqm_per_step, reps=5000)
    assert ours["iqm"] == pytest.approx(point["x"].tolist(), rel=1e-12)
    assert ours["low"] == pytest.approx(interval["x"][0].tolist(), abs=0.02)
    assert ours["high"] == pytest.approx(interval["x"][1].tolist(), abs=0.02)


def test_tasks_with_different_budgets_share_an_axis_of_budget_fractions():
    short, long = np.arange(0, 1001, 100), np.arange(0, 3001, 300)
    tasks = [[(short, short / 1000.0)] * 3, [(long, long / 3000.0)] * 3]
    agg = aggregate_task_curves(tasks, budgets=[1000, 3000], points=11)
    assert agg["x"] == "fraction of budget"
    assert agg["step"] == pytest.approx(np.linspace(0, 1, 11).tolist())
    assert agg["iqm"] == pytest.approx(agg["step"])  # both tasks at the same fraction


def test_the_reference_table_in_the_docs_is_the_modules():
    from backflip.references import markdown_table

    text = (Path(__file__).parent.parent / "docs" / "experiments.md").read_text()
    begin, end = "<!-- references: begin -->\n", "\n<!-- references: end -->"
    assert text[text.index(begin) + len(begin) : text.index(end)] == markdown_table()


def test_the_random_scores_are_what_random_actions_score():
    from backflip.references import REFERENCES, normalize
    from benchmarks.random_scores import random_returns

    x = random_returns("CartPole-v1", 100)
    assert REFERENCES["CartPole-v1"].random == pytest.approx(x.mean(), abs=x.std() / 10)
    assert normalize("CartPole-v1", 475.0) == 1.0 and normalize("CartPole-v1", 25.0) == 0.0
    assert normalize("CartPole-v1", [500.0, None]) == [pytest.approx(475 / 450), None]
