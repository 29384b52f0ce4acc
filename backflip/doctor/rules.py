"""The rules: one function per signal of the diagnostics catalog (docs/doctor.md).

Each rule reads backflip metric names (docs/metrics.md) and says nothing when they are absent, so
one rule set serves every algorithm and every source (Stable-Baselines3 and CleanRL logs are
mapped to these names by `sources.py`). Conditions are scale-free where possible: normalized
entropy, ratios, rank trends, comparisons of a run with its own start. Thresholds marked (H) in
the catalog were calibrated on healthy and deliberately broken runs; the measurements are in
docs/doctor.md (`benchmarks/doctor_calibration.py` repeats them).

Metric names of algorithms still being written are matched by pattern (any `*/q_mean`,
`*/epsilon`, `*/alpha`, `*/action_*_frac`), listed in docs/doctor.md.

Returns: rules asking whether the policy improved read `RunData.returns` (through `progress`),
which on a preference run is the true return, not the learned reward the policy trained on;
rules about what the algorithm itself optimized (reward scale, value sign, Q bounds) read
`RunData.trained_returns` and call it the learned reward there. Messages name what they read.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from backflip.doctor import tasks
from backflip.doctor.findings import Hit, rule
from backflip.doctor.series import (
    EVAL_RETURNS,
    LEARNED_RETURNS,
    Progress,
    RunData,
    after_warmup,
    finite,
    fmt,
    head,
    progress,
    rolling_median,
    spearman,
    tail,
)
from backflip.returns import EVAL_RETURN, TRUE_RETURN
from backflip.runs.layout import EPISODES, STATUS

MIN_ROWS = 10  # trend rules need at least this many metric rows

RAHTZ = "Rahtz, 'Lessons Learned Reproducing a Deep RL Paper' (2018)"
SCHULMAN = "Schulman, 'Nuts and Bolts of Deep RL Research' (2017)"
JONES = "Jones, 'Debugging RL, Without the Agonizing Pain' (2021)"
ACHIAM = "Achiam, 'Spinning Up as a Deep RL Researcher' (2018)"

Q_PATTERN = r"(^|/)(q\d?_mean|q_values|qf\d?_values)$"
EPS_PATTERN = r"(^|/)(epsilon|exploration_rate)$"
ALPHA_PATTERN = r"(^|/)(alpha|ent_coef)$"
SATURATION_PATTERN = r"(^|/)action_(clip|sat\w*)_frac$"
TRUE_READ = f"{TRUE_RETURN} (preference runs)"  # what return rules read instead of rollout/*


def _rows(d: RunData) -> int:
    """Metric rows logged (points of the most frequently logged series)."""
    return max((len(s) for s, _ in d.metrics.values()), default=0)


def _gamma(d: RunData) -> float | None:
    g = d.hp.get("gamma")
    return float(g) if isinstance(g, int | float) else None


@dataclass
class Verdict:
    """What the return says about a run, for rules that read a health signal (entropy,
    explained variance): such a rule reaches `error` only when the return also says something
    is wrong, and says nothing of a collapse on a solved run."""

    p: Progress | None
    judged: bool
    """half of the planned training is seen (live, before that, the return can't be judged)"""
    threshold: float | None
    """the env's reward_threshold, when it has one"""

    @property
    def solved(self) -> bool:
        return self.p is not None and self.threshold is not None and self.p.late >= self.threshold

    @property
    def improved(self) -> bool:
        return self.p is not None and self.p.improved

    @property
    def wrong(self) -> bool:
        """The return says something is wrong: judged, not improved, not solved."""
        return self.judged and self.p is not None and not self.improved and not self.solved

    def describe(self) -> str:
        if self.p is None:
            return "no return logged"
        text = f"the {self.p.describe()}"
        if self.solved:
            return text + f", at or above the task's threshold {fmt(self.threshold)} (solved)"
        if not self.judged:
            return text + " so far (the return can't be judged before half of training)"
        return text

    def evidence(self) -> dict:
        ev = self.p.evidence() if self.p else {}
        return {**ev, "reward_threshold": self.threshold, "solved": self.solved}


def verdict(d: RunData) -> Verdict:
    p = progress(d)
    judged = p is not None and d.end >= 0.5 * d.horizon
    return Verdict(p, judged, tasks.reward_threshold(d.env_id))


# --- entry 1: non-finite values ---------------------------------------------------------------


@rule(
    "nonfinite",
    entry="1",
    reads=("every metric",),
    threshold="any NaN or ±inf at any step",
    cause="a numerical blow-up (exploding loss or learning rate), or NaN/inf coming from the "
    "environment (rewards, observations) and spreading into the update",
    check_next="the metric that went bad first: env/* means the environment produced it, "
    "train/* means the update did; lower the learning rate, clip gradients, check the reward",
    source="common practice; SB3 VecCheckNan",
    live=False,  # the seed process checks every row itself (doctor.stop_on_nan)
)
def nonfinite(d: RunData):
    first_step, names = None, []
    for name, (steps, values) in d.metrics.items():
        bad = ~np.isfinite(values)
        if bad.any():
            s = int(steps[np.argmax(bad)])
            if first_step is None or s < first_step:
                first_step, names = s, [name]
            elif s == first_step:
                names.append(name)
    stopped = "non-finite" in str(d.status.get("error", ""))
    if first_step is None and not stopped:
        return None
    if first_step is None:  # only the status knows (the row was not written)
        return Hit("error", f"the seed was stopped: {d.status['error']}", evidence={"stopped": 1})
    names.sort(key=lambda n: (not n.startswith("env/"), not n.startswith("rollout/"), n))
    first = names[0]
    if first.startswith("env/"):
        origin = "the environment (its raw rewards or observations)"
    elif d.learned_reward and first.startswith(("rollout/ep_return", "env/reward")):
        origin = "the learned reward (the reward model's output r̂)"
    elif first.startswith(("rollout/ep_return", "eval/return")):
        origin = "the rewards (episode returns became non-finite)"
    elif first.startswith("rollout/"):
        origin = "the value estimates or advantages"
    elif first.startswith("train/"):
        origin = "the update (losses, gradients or parameters)"
    else:
        origin = f"{first}"
    seen = (
        f"non-finite values first at step {first_step:,} in {', '.join(names[:5])}"
        + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        + f": it started in {origin}"
        + (" and the seed was stopped there" if stopped else "")
    )
    return Hit(
        "error",
        seen,
        metric=names[0],
        step=first_step,
        evidence={"first_step": first_step, "metrics": names, "stopped": stopped},
    )


@rule(
    "seed-failed",
    entry="-",
    reads=(STATUS,),
    threshold="the seed's process ended with an error",
    cause="an exception in the algorithm or the environment, or the process was killed",
    check_next="the seed's traceback.txt and stderr.log in the run directory",
    source="backflip archive",
)
def seed_failed(d: RunData):
    err = str(d.status.get("error") or "")
    if d.status.get("status") != "failed" or "non-finite" in err:
        return None
    return Hit("error", f"the seed failed: {err[:200]}", evidence={"error": err})


@rule(
    "short-run",
    entry="-",
    reads=("every metric",),
    threshold=f"fewer than {MIN_ROWS} metric rows",
    cause="a short budget or an early stop",
    check_next="train longer before trusting trend rules (they were skipped)",
    source="backflip",
)
def short_run(d: RunData):
    n = _rows(d)
    if 0 < n < MIN_ROWS:
        return Hit("info", f"only {n} metric rows: trend rules need {MIN_ROWS}")
    return None


@rule(
    "no-returns",
    entry="-",
    reads=("rollout/ep_return_mean", "episodes", TRUE_READ),
    threshold="metric rows but no episode return at all",
    cause="no episode finished within the budget, or the writer did not log returns: CleanRL's "
    "scripts under Gymnasium 1.x log none (they read infos['final_info'], which Gymnasium 1.0 "
    "removed)",
    check_next="the episodes' length against the budget; for CleanRL, Gymnasium 0.29 (the "
    "version its scripts declare). The rules about the return were skipped",
    source="backflip",
)
def no_returns(d: RunData):
    if not _rows(d) or d.get(d.returns.mean) is not None or d.episodes is not None:
        return None
    seen = f"{_rows(d)} metric rows up to step {d.end:,} and no episode {d.returns.name}"
    if d.source == "cleanrl":
        return Hit(
            "info",
            seen + " (no charts/episodic_return)",
            cause="CleanRL's scripts log episode returns from infos['final_info'], which "
            "Gymnasium 1.0 removed: under Gymnasium 1.x they log none",
        )
    return Hit("info", seen)


# --- entry 3: policy entropy -----------------------------------------------------------------


@rule(
    "entropy-flat",
    entry="3",
    reads=(
        "train/entropy_norm",
        "train/policy_std",
        "train/entropy",
        "rollout/ep_return_mean",
        TRUE_READ,
    ),
    threshold="normalized entropy > 0.95 after warm-up (Box actions: policy std within 5% and "
    "entropy within 0.05 nats of its start) while the return does not improve (and is not at "
    "the env's reward_threshold)",
    cause="the policy is not learning: learning rate far too small, gradients not reaching the "
    "policy, or an advantage that is always ~0",
    check_next="train/update_ratio and train/grad_norm (are weights moving?), the learning "
    "rate, and whether the loss depends on the policy's parameters",
    source=f"{SCHULMAN}; {RAHTZ}",
)
def entropy_flat(d: RunData):
    v_ = verdict(d)
    if _rows(d) < MIN_ROWS or (p := v_.p) is None or p.improved or v_.solved:
        return None
    end = d.horizon
    if (s := d.get("train/entropy_norm")) is not None:
        steps, v = after_warmup(finite(s), end)
        if len(v) < 3 or np.median(v) <= 0.95 or np.min(v) <= 0.9:
            return None
        seen = (
            f"normalized entropy stayed at {fmt(float(np.median(v)))} (min {fmt(float(v.min()))}) "
            f"after warm-up while the {p.describe()}"
        )
        return Hit(
            "error",
            seen,
            metric="train/entropy_norm",
            step=int(steps[-1]),
            evidence={"entropy_norm_median": float(np.median(v)), **p.evidence()},
        )
    std = d.get("train/policy_std")
    ent = d.get("train/entropy")
    if std is None and ent is None:
        return None
    changes = {}
    if std is not None:
        v = finite(std)[1]
        changes["policy_std_ratio"] = float(v[-1] / v[0]) if v[0] else math.nan
    if ent is not None:
        v = finite(ent)[1]
        changes["entropy_change_nats"] = float(v[-1] - v[0])
    flat = abs(changes.get("policy_std_ratio", 1.0) - 1) < 0.05 and (
        abs(changes.get("entropy_change_nats", 0.0)) < 0.05
    )
    if not flat:
        return None
    seen = (
        "the Gaussian policy did not change ("
        + ", ".join(f"{k} {fmt(v)}" for k, v in changes.items())
        + f") while the {p.describe()}"
    )
    metric = "train/policy_std" if std is not None else "train/entropy"
    return Hit(
        "error",
        seen,
        metric=metric,
        step=d.end,
        evidence={**changes, **p.evidence()},
    )


@rule(
    "entropy-collapse",
    entry="3",
    reads=("train/entropy_norm", "train/policy_std", "rollout/ep_return_mean", TRUE_READ),
    threshold="normalized entropy < 0.1 (Box: policy std < 5% of its start) within the first "
    "25% of training: error when the return does not improve (judged from half of training on), "
    "warning when it does or can't be judged yet, nothing when the return reached the env's "
    "reward_threshold (a solved task allows a deterministic policy) (catalog: < 0.05 in 20%; "
    "healthy runs measured never went below 0.15)",
    cause="premature collapse to one action: a negative or far too small entropy bonus, a "
    "learning rate too high, or rewards so large the first updates overshoot",
    check_next="the entropy coefficient's sign and size, the reward scale, the learning rate",
    source=f"{SCHULMAN}; {RAHTZ}",
    live=True,
)
def entropy_collapse(d: RunData):
    end = d.horizon
    if (s := d.get("train/entropy_norm")) is not None:
        steps, v = finite(s)
        low, limit, metric, what = v < 0.1, 0.1, "train/entropy_norm", "normalized entropy"
    elif (s := d.get("train/policy_std")) is not None:
        steps, v = finite(s)
        if not len(v) or v[0] <= 0:
            return None
        limit = 0.05 * v[0]
        low, metric, what = v < limit, "train/policy_std", "policy std"
    else:
        return None
    early = low & (steps <= 0.25 * end)
    if not early.any():
        return None
    i = int(np.argmax(early))
    ret = verdict(d)
    if ret.solved:  # a deterministic policy that solves the task is no collapse
        return None
    if ret.p is None:
        r = d.returns
        returns = d.get(r.mean)
        note = f"; {r.name} {fmt(float(returns[1][-1]))} so far" if returns is not None else ""
    else:
        note = f"; {ret.describe()}"
    seen = (
        f"{what} fell to {fmt(float(v[i]))} (< {fmt(limit)}) at step {int(steps[i]):,}, "
        f"{100 * steps[i] / end:.0f}% into training{note}"
    )
    if ret.improved:
        seen += " (it improved, but may be stuck where the collapse left it)"
    return Hit(
        "error" if ret.wrong else "warning",
        seen,
        metric=metric,
        step=int(steps[i]),
        evidence={
            "value": float(v[i]),
            "fraction_of_training": float(steps[i] / end),
            **ret.evidence(),
        },
    )


@rule(
    "entropy-oscillation",
    entry="3",
    reads=("train/entropy_norm",),
    threshold="after warm-up the normalized entropy (median of 5 rows) reverses direction by "
    "≥ 0.2 at least 4 times; info only on a preference run (its reward changes with every "
    "reward-model round, and the policy's entropy may follow it)",
    cause="a learning rate too high: each update overshoots and the next undoes it",
    check_next="lower the learning rate or the number of epochs; watch train/approx_kl",
    source=JONES,
)
def entropy_oscillation(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("train/entropy_norm")) is None:
        return None
    steps, v = after_warmup(finite(s), d.horizon)
    if len(v) < MIN_ROWS:
        return None
    smooth = np.array([np.median(v[max(0, i - 2) : i + 3]) for i in range(len(v))])
    n = reversals(smooth, 0.2)
    if n < 4:
        return None
    seen = (
        f"normalized entropy swung up and down by ≥ 0.2 {n} times after warm-up (between "
        f"{fmt(float(smooth.min()))} and {fmt(float(smooth.max()))})"
    )
    severity = "warning"
    if d.learned_reward:
        # healthy MovingDot preference runs (greedy 91 and 108, the preset's 500 labels) swung
        # 5 times: each reward-model round moves the reward, and the policy re-explores; whether
        # the run learns is for the rules on its true return to say
        severity, seen = "info", f"{seen}, on a learned reward that changes with every round"
    return Hit(
        severity,
        seen,
        metric="train/entropy_norm",
        step=int(steps[-1]),
        evidence={"reversals": n, "min": float(smooth.min()), "max": float(smooth.max())},
    )


def reversals(v: np.ndarray, delta: float) -> int:
    """Direction changes of at least `delta` (a zigzag with hysteresis)."""
    count, direction = 0, 0
    low = high = extreme = float(v[0])
    for x in map(float, v[1:]):
        if direction == 0:  # no move of delta yet: wait for the first one
            low, high = min(low, x), max(high, x)
            if x - low >= delta or high - x >= delta:
                direction, extreme = (1 if x - low >= delta else -1), x
        elif (x - extreme) * direction > 0:  # further in the same direction
            extreme = x
        elif (extreme - x) * direction >= delta:  # turned back by delta
            count += 1
            direction, extreme = -direction, x
    return count


# --- entry 4: KL between consecutive policies -----------------------------------------------------


@rule(
    "kl-negative",
    entry="4",
    reads=("train/approx_kl",),
    threshold="approx_kl < −1e-6 at any step (the estimator mean((r−1) − log r) is never negative)",
    cause="the KL is computed wrong: the wrong estimator (mean(−log r) can be negative), "
    "swapped old/new log-probabilities, or a mismatch between stored and recomputed actions",
    check_next="the KL code and that log-probabilities of the same actions are compared",
    source=JONES,
    live=True,
)
def kl_negative(d: RunData):
    if (s := d.get("train/approx_kl")) is None:
        return None
    steps, v = finite(s)
    neg = v < -1e-6
    if not neg.any():
        return None
    i = int(np.argmax(neg))
    return Hit(
        "error",
        f"approx_kl = {fmt(float(v[i]))} at step {int(steps[i]):,} "
        f"({int(neg.sum())} negative rows)",
        metric="train/approx_kl",
        step=int(steps[i]),
        evidence={"value": float(v[i]), "negative_rows": int(neg.sum())},
    )


@rule(
    "kl-large",
    entry="4",
    reads=("train/approx_kl",),
    threshold="error: KL > 3 once, or > 1 on ≥ 3 rows; warning: median KL after the first row "
    "> 0.1 (H), or 2 spikes > 1 that are 10× the median of the 10 rows before them (one "
    "such spike: info)",
    cause="updates too big: learning rate, epochs or minibatch count too high, or clipping off",
    check_next="lower the learning rate or epochs, enable clipping / target_kl, check "
    "train/clip_frac (PPO: ~0.05–0.3 is typical)",
    source=f"{SCHULMAN} (0.01 small, 10 too much); rlwatch; zen-rl",
    live=True,
)
def kl_large(d: RunData):
    if (s := d.get("train/approx_kl")) is None:
        return None
    steps, v = finite(s)
    if len(v) < 3:
        return None
    big = v > 1.0
    if v.max() > 3 or big.sum() >= 3:
        i = int(np.argmax(v > 3)) if v.max() > 3 else int(np.argmax(big))
        return Hit(
            "error",
            f"approx_kl reached {fmt(float(v.max()))}; above 1 on "
            f"{int(big.sum())} of {len(v)} rows, first at step {int(steps[i]):,}",
            metric="train/approx_kl",
            step=int(steps[i]),
            evidence={
                "rows_above_1": int(big.sum()),
                "max": float(v.max()),
                "median": float(np.median(v)),
            },
        )
    med = float(np.median(v[1:]))
    if med > 0.1:
        return Hit(
            "warning",
            f"median approx_kl {fmt(med)} (> 0.1) over {len(v)} rows",
            metric="train/approx_kl",
            step=int(steps[-1]),
            evidence={"median": med},
        )
    base = rolling_median(v, 10)
    spike = (v > 1.0) & (v > 10 * np.nan_to_num(base, nan=np.inf))
    if spike.any():
        i = int(np.argmax(spike))
        return Hit(
            "warning" if spike.sum() >= 2 else "info",
            f"approx_kl spiked to "
            f"{fmt(float(v[i]))} at step {int(steps[i]):,}, {v[i] / base[i]:.0f}× the "
            "median of the rows before",
            metric="train/approx_kl",
            step=int(steps[i]),
            evidence={"value": float(v[i]), "baseline": float(base[i]), "spikes": int(spike.sum())},
        )
    return None


# --- entry 5: explained variance ------------------------------------------------------------------


@rule(
    "explained-variance",
    entry="5",
    reads=(
        "train/explained_var",
        "train/value_loss",
        "rollout/return_target_mean",
        "rollout/ep_return_mean",
        TRUE_READ,
    ),
    threshold="after warm-up: median ≤ 0.05 (≈ 0: no better than a constant) and 90th "
    "percentile < 0.2 (rows where the value loss is < 1e-4 × target² — targets nearly "
    "constant and fitted — are skipped); error when the return does not improve either, "
    "warning otherwise",
    cause="the value function is not learning (value loss weight 0, no gradient reaching the "
    "value head, a wrong target) or does no better than a constant",
    check_next="the value-loss coefficient, that the value head receives gradients, the value "
    "targets (rollout/return_target_*), and the reward scale",
    source=f"{SCHULMAN}; CleanRL logs it",
)
def explained_variance(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("train/explained_var")) is None:
        return None
    steps, v = after_warmup(s, d.horizon)
    keep = np.isfinite(v)
    vl, tm = d.get("train/value_loss"), d.get("rollout/return_target_mean")
    if vl is not None and tm is not None and len(vl[0]) == len(s[0]):
        vl_v = after_warmup(vl, d.horizon)[1]
        tm_v = after_warmup(tm, d.horizon)[1]
        if len(vl_v) == len(v) == len(tm_v):
            keep &= ~(vl_v < 1e-4 * tm_v**2)  # a fitted, (nearly) constant target
    steps, v = steps[keep], v[keep]
    if len(v) < 5:
        return None
    med, p90 = float(np.median(v)), float(np.quantile(v, 0.9))
    if med > 0.05 or p90 >= 0.2:
        return None
    ret = verdict(d)
    return Hit(
        "error" if ret.wrong else "warning",
        f"explained variance stayed at or below ~0 after warm-up (median {fmt(med)}, 90th percentile "
        f"{fmt(p90)} over {len(v)} rows); {ret.describe()}",
        metric="train/explained_var",
        step=int(steps[-1]),
        evidence={"median": med, "p90": p90, "rows": len(v), **ret.evidence()},
    )


# --- entry 6: scales ------------------------------------------------------------------------------


@rule(
    "reward-scale",
    entry="6",
    reads=("env/reward_min", "env/reward_max", "rollout/ep_return_mean", "rollout/ep_len_mean"),
    threshold="typical |reward| per step > 100 (raw env/reward_*, else return / length; on a "
    "preference run these hold the learned reward the policy trains on, and the finding says so)",
    cause="rewards on a scale networks and optimizers handle badly; value targets far outside ±10",
    check_next="scale rewards (backflip: scale_reward=true, divides by the running std of the "
    "return — scale, don't shift), or divide the env's reward by a constant",
    source=f"{SCHULMAN}; {JONES}",
    live=True,
)
def reward_scale(d: RunData):
    lo, hi = d.get("env/reward_min"), d.get("env/reward_max")
    if lo is not None and hi is not None and len(lo[0]) == len(hi[0]):
        both = np.maximum(np.abs(lo[1]), np.abs(hi[1]))
        both = both[np.isfinite(both)]
        if not len(both):
            return None
        mag, typical = float(both.max()), float(np.median(both))
        metric, step = "env/reward_max", int(hi[0][-1])
        how = (
            f"raw per-step {d.trained_returns.rewards} reach |r| = {fmt(float(mag))} "
            f"(typical max {fmt(typical)})"
        )
    else:
        r, n = d.get(d.trained_returns.mean), d.get("rollout/ep_len_mean")
        if r is None or n is None or len(r[0]) != len(n[0]):
            return None
        ok = np.isfinite(r[1]) & np.isfinite(n[1]) & (n[1] > 0)
        if not ok.any():
            return None
        per_step = np.abs(r[1][ok] / n[1][ok])
        typical = float(np.median(per_step))
        metric, step = d.trained_returns.mean, int(r[0][ok][-1])
        how = (
            f"{d.trained_returns.name} per step of episode is {fmt(typical)} in magnitude (median)"
        )
    if typical <= 100:
        return None
    return Hit("warning", how, metric=metric, step=step, evidence={"typical_abs_reward": typical})


@rule(
    "value-scale",
    entry="6",
    reads=("rollout/return_target_absmax", "rollout/value_mean", "train/value_loss"),
    threshold="value targets (or values, or Q) beyond ±1000 after warm-up (100× Schulman's ±10, "
    "H) or a value loss > 1e6",
    cause="rewards not scaled: value targets far outside ±10 make the value loss dominate "
    "and its gradients huge",
    check_next="scale rewards (scale_reward=true) and check env/reward_* for the raw scale",
    source=f"{SCHULMAN}; {JONES}",
    live=True,
)
def value_scale(d: RunData):
    end = d.horizon
    for name in ("rollout/return_target_absmax", "rollout/value_mean", d.find(Q_PATTERN)):
        if name and (s := d.get(name)) is not None:
            steps, v = after_warmup(finite(s), end)
            if len(v) and (med := float(np.median(np.abs(v)))) > 1000:
                return Hit(
                    "warning",
                    f"{name} is {fmt(med)} in magnitude (median after warm-up)",
                    metric=name,
                    step=int(steps[-1]),
                    evidence={"median_abs": med},
                )
            if name == "rollout/return_target_absmax" and len(v):
                return None  # the targets are the best evidence; they are fine
    if (s := d.get("train/value_loss")) is not None:
        steps, v = after_warmup(finite(s), end)
        if len(v) and (med := float(np.median(v))) > 1e6:
            return Hit(
                "warning",
                f"value loss {fmt(med)} (median after warm-up): value errors "
                f"of ~{fmt(math.sqrt(med))}",
                metric="train/value_loss",
                step=int(steps[-1]),
                evidence={"median": med},
            )
    return None


@rule(
    "advantage-bias",
    entry="6",
    reads=("rollout/adv_mean", "rollout/adv_std", "rollout/return_target_mean"),
    threshold="after warm-up, median |adv_mean| / (|return_target_mean| + adv_std) > 0.5",
    cause="advantages (before normalization) persistently one-signed: the value function is "
    "not tracking the return (not trained, wrong target) or the advantage/GAE code is wrong",
    check_next="the value loss and explained variance, then the GAE code (probe 3 of "
    "`backflip probe`)",
    source=JONES,
)
def advantage_bias(d: RunData):
    a, sd, t = (
        d.get("rollout/adv_mean"),
        d.get("rollout/adv_std"),
        d.get("rollout/return_target_mean"),
    )
    if _rows(d) < MIN_ROWS or a is None or sd is None or t is None:
        return None
    if not len(a[0]) == len(sd[0]) == len(t[0]):
        return None
    end = d.horizon
    steps, av = after_warmup(a, end)
    sv, tv = after_warmup(sd, end)[1], after_warmup(t, end)[1]
    ratio = np.abs(av) / (np.abs(tv) + sv + 1e-12)
    ratio = ratio[np.isfinite(ratio)]
    if len(ratio) < 5 or (med := float(np.median(ratio))) <= 0.5:
        return None
    return Hit(
        "warning",
        f"the advantage mean is {fmt(med)} of the target scale (median after "
        f"warm-up; mean advantage {fmt(float(np.median(av)))})",
        metric="rollout/adv_mean",
        step=int(steps[-1]),
        evidence={"median_ratio": med},
    )


# --- entry 7: value sign --------------------------------------------------------------------------

ENTROPY_CAP = 5.0
"""nats per step assumed for the entropy of a soft-Q agent (SAC) that logs its α but not its
policy's entropy (CleanRL): its Q values may then hold up to ±γ·α·5/(1−γ) of entropy bonus"""


def _at(s, steps: np.ndarray) -> np.ndarray:
    """A series' value at each of `steps` (the last point at or before it; the first before)."""
    st, v = finite(s)
    i = np.searchsorted(st, steps, side="right") - 1
    return v[np.clip(i, 0, len(v) - 1)]


def soft_bonus(d: RunData, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(low, high) of the entropy part of a soft Q value at `steps`: SAC's Q(s, a) holds, besides
    the discounted rewards, the discounted entropy bonus α·H of every later step, γ·α·H/(1−γ),
    which has the sign of H (positive for a wide policy, negative for a narrow one). Exact when
    the run logs its policy's entropy (train/entropy), bounded by ENTROPY_CAP nats when not;
    None for an agent without a temperature α."""
    name = d.find(ALPHA_PATTERN)
    if name is None or not len(steps) or len(finite(d.get(name))[0]) == 0:
        return None
    gamma = _gamma(d) or 0.99
    k = gamma / (1 - gamma) if gamma < 1 else 1e6
    alpha = np.abs(_at(d.get(name), steps))
    if (ent := d.get("train/entropy")) is not None and len(finite(ent)[0]):
        b = k * alpha * _at(ent, steps)
        return b, b
    b = k * alpha * ENTROPY_CAP
    return -b, b


@rule(
    "value-sign",
    entry="7",
    reads=(
        "rollout/value_mean",
        "env/reward_min",
        "env/reward_max",
        "*/q_mean",
        "*/alpha",
        "train/entropy",
    ),
    threshold="every raw reward ≥ 0 but the value (or Q) mean < 0 on most rows after warm-up, "
    "by more than 5% of its magnitude (or the mirror case); a soft Q (SAC: a temperature α is "
    "logged) is judged after its entropy part γ·α·H/(1−γ) (H: train/entropy, else ±5 nats)",
    cause="a reward-to-go or bootstrap bug: a sign error, or a terminal value bootstrapped "
    "from garbage",
    check_next="the return/target computation; probes 1–3 of `backflip probe`",
    source=JONES,
)
def value_sign(d: RunData):
    lo, hi = d.get("env/reward_min"), d.get("env/reward_max")
    name = "rollout/value_mean" if d.get("rollout/value_mean") is not None else d.find(Q_PATTERN)
    if _rows(d) < MIN_ROWS or lo is None or hi is None or name is None:
        return None
    rmin, rmax = np.nanmin(lo[1]), np.nanmax(hi[1])
    steps, v = after_warmup(finite(d.get(name)), d.horizon)
    if len(v) < 5:
        return None
    scale = float(np.max(np.abs(v))) or 1.0
    bonus = soft_bonus(d, steps) if name != "rollout/value_mean" else None
    b_lo, b_hi = bonus if bonus is not None else (np.zeros(len(v)), np.zeros(len(v)))
    if rmin >= 0 and rmax > 0:  # the reward part of Q is >= 0: Q >= its entropy part
        wrong, sign = v - b_lo < -0.05 * scale, "negative"
    elif rmax <= 0 and rmin < 0:
        wrong, sign = v - b_hi > 0.05 * scale, "positive"
    else:
        return None
    if wrong.mean() <= 0.5:
        return None
    note = ""
    if bonus is not None:
        exact = bool(np.array_equal(b_lo, b_hi))
        note = (
            f", beyond its entropy bonus γ·α·H/(1−γ) (median {fmt(float(np.median(b_lo)))})"
            if exact
            else f", beyond any entropy bonus within ±{fmt(float(np.median(b_hi)))}"
        )
    return Hit(
        "warning",
        f"{name} is {sign} on {wrong.mean():.0%} of rows after warm-up "
        f"(median {fmt(float(np.median(v)))}){note} although the {d.trained_returns.rewards} are "
        f"all {'≥ 0' if sign == 'negative' else '≤ 0'}",
        metric=name,
        step=int(steps[-1]),
        evidence={
            "fraction_wrong_sign": float(wrong.mean()),
            "reward_min": float(rmin),
            "reward_max": float(rmax),
            "entropy_bonus_median": float(np.median(b_lo)) if bonus is not None else None,
        },
    )


# --- entry 8: observation scale -------------------------------------------------------------------


@rule(
    "obs-scale",
    entry="8",
    reads=("env/obs_absmean_max", "env/obs_std_max"),
    threshold="median over rows of the largest raw per-dimension |mean| or std > 5 (H), without "
    "observation normalization",
    cause="unnormalized inputs: large or offset observations saturate tanh units and make "
    "the first layer's effective learning rate tiny or huge",
    check_next="normalize observations (backflip: norm_obs=true, running mean/std over all "
    "data) or rescale them in the env; `backflip preflight ENV` shows each dimension",
    source=f"{SCHULMAN}; {RAHTZ}",
    live=True,
)
def obs_scale(d: RunData):
    worst = None
    for name in ("env/obs_absmean_max", "env/obs_std_max"):
        if (s := d.get(name)) is not None:
            v = finite(s)[1]
            if len(v) and (med := float(np.median(v))) > 5 and (worst is None or med > worst[1]):
                worst = (name, med)
    if worst is None:
        return None
    normalized = bool(d.hp.get("norm_obs"))
    what = "|mean|" if "absmean" in worst[0] else "std"
    seen = f"raw observations have a dimension with {what} {fmt(worst[1])} (median over rows)"
    if normalized:
        return Hit(
            "info",
            seen + ", normalized by the agent (norm_obs=true)",
            metric=worst[0],
            evidence={"median": worst[1], "normalized": True},
            cause="a raw scale the agent's normalizer takes care of",
            check_next="nothing, unless evaluation or another consumer sees raw inputs",
        )
    return Hit(
        "warning",
        seen + " and no observation normalization",
        metric=worst[0],
        step=int(d.get(worst[0])[0][-1]),
        evidence={"median": worst[1]},
    )


# --- entry 9: reward normalizer -------------------------------------------------------------------


@rule(
    "reward-normalizer",
    entry="9",
    reads=("env/reward_scale", "config scale_reward"),
    threshold="the run scaled rewards and backflip's RewardScaler fails the audit (it must "
    "never shift, and must restart its return accumulator at every episode end)",
    cause="a reward normalizer that subtracts a mean (changes the objective: the 'will to "
    "live') or carries the discounted return across episodes",
    check_next="backflip/normalize.py: RewardScaler; `backflip probe ALGO` runs the same audit",
    source=f"{SCHULMAN}; OpenAI baselines #538 and PR #556",
)
def reward_normalizer(d: RunData):
    if not (d.hp.get("scale_reward") or d.get("env/reward_scale") is not None):
        return None
    if d.source != "backflip":
        return None
    from backflip.doctor.audits import audit_reward_scaler

    failures = [a for a in audit_reward_scaler() if not a.passed]
    if not failures:
        return None
    return Hit(
        "error",
        "the reward scaler used by this run fails its audit: "
        + "; ".join(f"{a.name}: {a.detail}" for a in failures),
        evidence={"failed": [a.name for a in failures]},
    )


# --- entry 10: episode length ---------------------------------------------------------------------


@rule(
    "ep-len-collapse",
    entry="10",
    reads=("rollout/ep_len_mean", "rollout/ep_len_min", "rollout/ep_return_mean", TRUE_READ),
    threshold="late mean length < 0.6× early and within 25% of the shortest episode seen, "
    "while the return does not improve",
    cause="a degenerate policy that ends episodes as fast as possible (often after an "
    "entropy collapse), or an environment that terminates immediately",
    check_next="the policy's entropy and actions (watch a video: `backflip watch`), the "
    "termination condition",
    source=f"{SCHULMAN}; {JONES}",
)
def ep_len_collapse(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("rollout/ep_len_mean")) is None:
        return None
    if (p := progress(d)) is None or p.improved:
        return None
    end = d.horizon
    early = float(np.mean(head(finite(s), 0.15, end)[1]))
    late_steps, late = tail(finite(s), 0.2, end)
    late_m = float(np.mean(late))
    shortest = (
        float(np.nanmin(d.get("rollout/ep_len_min")[1]))
        if d.get("rollout/ep_len_min") is not None
        else float(np.nanmin(s[1]))
    )
    if not (late_m < 0.6 * early and late_m <= 1.25 * shortest):
        return None
    return Hit(
        "warning",
        f"episodes shrank from {fmt(early)} to {fmt(late_m)} steps (the "
        f"shortest seen: {fmt(shortest)}) while the {p.describe()}",
        metric="rollout/ep_len_mean",
        step=int(late_steps[-1]),
        evidence={"early": early, "late": late_m, "shortest": shortest, **p.evidence()},
    )


@rule(
    "ep-len-constant",
    entry="10",
    reads=("rollout/ep_len_min", "rollout/ep_len_max"),
    threshold="every episode has the same length",
    cause="a fixed horizon (fine when the task is built so, e.g. Pendulum's 200 steps), or an "
    "environment that never terminates before its time limit",
    check_next="whether the task can end early; with a fixed horizon, episode length carries "
    "no signal about the policy",
    source=f"{SCHULMAN}; {JONES}",
)
def ep_len_constant(d: RunData):
    if d.episodes is not None and len(d.episodes[2]) >= 10:
        lens = d.episodes[2]
        if lens.min() == lens.max():
            return Hit(
                "info",
                f"all {len(lens)} episodes lasted exactly {int(lens[0])} steps",
                metric="rollout/ep_len_mean",
                evidence={"length": int(lens[0])},
            )
        return None
    lo, hi = d.get("rollout/ep_len_min"), d.get("rollout/ep_len_max")
    if lo is None or hi is None or len(lo[0]) < MIN_ROWS:
        return None
    if np.nanmin(lo[1]) == np.nanmax(hi[1]):
        return Hit(
            "info",
            f"every episode lasted exactly {fmt(float(lo[1][0]))} steps",
            metric="rollout/ep_len_mean",
            evidence={"length": float(lo[1][0])},
        )
    return None


@rule(
    "losing-slower",
    entry="10",
    reads=("rollout/ep_len_mean", "rollout/ep_return_mean", TRUE_READ),
    threshold="return not improving while mean episode length grows > 1.5×",
    cause="the agent learns to postpone the end ('losing slower') rather than to win",
    check_next="watch episodes; whether the reward pays for survival",
    source=SCHULMAN,
)
def losing_slower(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("rollout/ep_len_mean")) is None:
        return None
    if (p := progress(d)) is None or p.improved:
        return None
    end = d.horizon
    early = float(np.mean(head(finite(s), 0.15, end)[1]))
    late = float(np.mean(tail(finite(s), 0.2, end)[1]))
    if early <= 0 or late <= 1.5 * early:
        return None
    return Hit(
        "info",
        f"episodes grew from {fmt(early)} to {fmt(late)} steps while the {p.describe()}",
        metric="rollout/ep_len_mean",
        step=d.end,
        evidence={"early": early, "late": late, **p.evidence()},
    )


# --- entry 11: return vs the random policy --------------------------------------------------------


@rule(
    "never-better",
    entry="11",
    reads=("rollout/ep_return_max", "rollout/ep_return_mean", "episodes", TRUE_READ),
    threshold="the return does not improve, and after the first 15% of training no window "
    "beats the best of the first 15% by more than noise (per-episode data: the late 90th "
    "percentile does not beat the early maximum)",
    cause="the policy never does the right thing more often than the initial (near-random) "
    "policy did: if random exploration never finds reward, RL likely won't either",
    check_next="`backflip preflight ENV` (does a random policy ever succeed?), reward shaping, "
    "and the learning signals (entropy, KL, update size)",
    source=SCHULMAN,
)
def never_better(d: RunData):
    if _rows(d) < MIN_ROWS or (p := progress(d)) is None or p.improved:
        return None
    if p.basis == "episodes":
        steps, rets, _ = d.episodes
        late = rets[steps >= 0.85 * d.horizon]
        late = late[np.isfinite(late)]
        if len(late) < 10:
            return None
        p90 = float(np.quantile(late, 0.9))
        if p90 > p.early_max:
            return None
        seen = (
            f"the late episodes' 90th-percentile {p.name} {fmt(p90)} never beats the best "
            f"early episode ({fmt(p.early_max)})"
        )
        return Hit(
            "warning",
            seen,
            metric=d.returns.max or d.returns.mean,
            step=int(steps[-1]),
            evidence={"late_p90": p90, "early_max": p.early_max, **p.evidence()},
        )
    margin = max(3 * p.noise, 0.05 * abs(p.early_max), 1e-9)
    if p.best > p.early_max + margin:
        return None
    return Hit(
        "warning",
        f"the best {p.name} after the first 15% ({fmt(p.best)}) never beats the "
        f"early best ({fmt(p.early_max)}) by more than noise",
        metric=p.metric,
        step=p.step_late,
        evidence={"best": p.best, "early_max": p.early_max, **p.evidence()},
    )


@rule(
    "trivial-policy",
    entry="11",
    reads=("episodes", "rollout/ep_return_mean", TRUE_READ, "env id"),
    threshold="the last 20% of training's mean return sits at the level of a policy that does "
    "nothing (the zero action, or one constant action; the env's own episodes, seeds 0-2) — "
    "within 2 of its standard deviations or 5% of the way to the optimum, and nearer to it than "
    "halfway to the random policy's level — on a task where that is not the optimum: error when "
    "the env's reward_threshold says so, warning when only a better return seen in the run does",
    cause="the policy converged to a trivial behaviour (actions at zero or at one constant): "
    "exploration never found the reward (sparse rewards: MountainCar's flag), an action cost "
    "made doing nothing the safe local optimum, an entropy bonus or action noise too small, or "
    "a collapse of the policy",
    check_next="exploration (entropy bonus, action noise, gSDE, a longer random phase), reward "
    "shaping or the reward scale against the action cost; watch episodes (`backflip watch`)",
    source=f"{SCHULMAN}; issue 23 (MountainCarContinuous runs that learned to stand still)",
)
def trivial_policy(d: RunData):
    levels = tasks.trivial_returns(d.env_id)
    if _rows(d) < MIN_ROWS or not levels or d.end < 0.5 * d.horizon:
        return None
    r = d.returns
    if r.episodes and d.episodes is not None and len(d.episodes[1]) >= 10:
        steps, rets, _ = d.episodes
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        late = rets[steps >= 0.8 * d.horizon]
        late = late if len(late) >= 10 else rets[-10:]
        best = float(np.max(rets)) if len(rets) else -math.inf
        metric = EPISODES
    elif (s := d.get(r.mean)) is not None and len(finite(s)[0]) >= 3:
        late = tail(finite(s), 0.2, d.horizon)[1]
        mx = d.get(r.max) if r.max else None
        best = float(np.nanmax((mx or s)[1]))
        metric = r.mean
    else:
        return None
    if not len(late):
        return None
    m = float(np.mean(late))
    threshold = tasks.reward_threshold(d.env_id)
    rand = levels.get("uniformly random actions")
    for what, (mu, sd) in levels.items():
        if what == "uniformly random actions":
            continue
        top = threshold if threshold is not None else best
        gap = top - mu
        if not gap > 0 or (threshold is None and gap <= 2 * sd + 0.05 * abs(mu)):
            continue  # doing nothing may be the optimum, or nothing better was seen
        tol = max(2 * sd, 0.05 * gap)
        if rand is not None and abs(rand[0] - mu) > 0:
            tol = max(min(tol, 0.5 * abs(rand[0] - mu)), 2 * sd)
        if abs(m - mu) > tol + 1e-9 * max(abs(mu), 1.0):
            continue
        against = (
            f"the task's threshold is {fmt(threshold)}"
            if threshold is not None
            else f"the run's best was {fmt(best)}"
        )
        rnd = f"; uniformly random actions: {fmt(rand[0])}" if rand is not None else ""
        return Hit(
            "error" if threshold is not None else "warning",
            f"the {r.name} over the last 20% of training ({fmt(m)}) sits at the level of "
            f"{what} ({fmt(mu)} ± {fmt(sd)}{rnd}), and {against}",
            metric=metric if metric != EPISODES else r.mean,
            step=d.end,
            evidence={
                "late_mean": m,
                "trivial": what,
                "trivial_return": mu,
                "random_return": rand[0] if rand else None,
                "reward_threshold": threshold,
                "best": best,
            },
        )
    return None


GREEDY_GAP_SHARE = 0.25  # of the training return's scale: a gap that changes a verdict
GREEDY_GAP_Z = 2.5  # standard errors: one-sided p ~ 0.006 per run when the policies are alike


@rule(
    "greedy-gap",
    entry="11",
    reads=(EVAL_RETURN, "eval/return_std", "episodes", "rollout/ep_return_mean", TRUE_READ),
    threshold="the final greedy evaluation's mean return is below training's at its end (the "
    "last 10% of steps, at least the last 10 episodes) "
    "by more than a quarter of max(|training mean|, its per-episode std) and by more than 2.5 "
    "standard errors of the difference (per-episode spreads of both, at least 5 evaluation "
    "episodes); a warning",
    cause="the deterministic policy (argmax, or the Gaussian's mean) is not the policy that "
    "learned: where two actions are close in probability the argmax can pick one that goes "
    "nowhere (a no-op, a push into a wall, two states whose best actions point at each other), "
    "and a greedy episode then stays there to the end, where sampling stumbles out",
    check_next="the per-episode greedy returns (several exactly equal, such as 0: stuck); watch "
    "greedy episodes (`backflip watch`); the policy's entropy at the end; more training, an "
    "entropy bonus, or an encoder that separates the states (cnn=keypoints for small objects)",
    source="issue 22 (MovingDot84: PPO's greedy 44 against a training return of ~90; 10 of 20 "
    "greedy episodes a no-op from the first step)",
)
def greedy_gap(d: RunData):
    ev, sd = d.get(EVAL_RETURN), d.get("eval/return_std")
    r = d.returns
    if ev is None or r is EVAL_RETURNS or d.end < 0.5 * d.horizon:
        return None
    step, g = int(ev[0][-1]), float(ev[1][-1])
    n_eval = len(d.status.get("final_eval_returns") or []) or int(d.hp.get("eval_episodes", 0))
    if not math.isfinite(g) or step < 0.9 * d.end or n_eval < 5:
        return None
    if r.episodes and d.episodes is not None:
        steps, rets, _ = d.episodes
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        late = rets[steps >= 0.9 * d.horizon]
        late = late if len(late) >= 10 else rets[-10:]
        if len(late) < 10:
            return None
        m, s_train, n_train = float(np.mean(late)), float(np.std(late, ddof=1)), len(late)
    elif (series := d.get(r.mean)) is not None and len(finite(series)[0]) >= 3:
        late = tail(finite(series), 0.1, d.horizon)[1]
        # means over episodes, whose own spread is unknown: the evaluation's stands in for it
        m, s_train, n_train = float(np.mean(late)), math.nan, None
    else:
        return None
    s_eval = float(sd[1][-1]) if sd is not None and sd[0][-1] == step else math.nan
    spread = s_train if math.isfinite(s_train) else s_eval
    if not math.isfinite(spread):
        return None
    s_eval = s_eval if math.isfinite(s_eval) else spread
    se = math.sqrt(s_eval**2 / n_eval + (spread**2 / n_train if n_train else 0.0))
    gap = m - g
    if gap <= GREEDY_GAP_SHARE * max(abs(m), spread) or gap <= GREEDY_GAP_Z * se:
        return None
    return Hit(
        "warning",
        f"the final greedy evaluation's mean {r.name} ({fmt(g)} over {n_eval} episodes) is "
        f"{fmt(gap)} below training's at its end ({fmt(m)})",
        metric=EVAL_RETURN,
        step=step,
        evidence={"greedy": g, "training": m, "gap": gap, "std_error": se, "n_eval": n_eval},
    )


# --- entry 12: throughput ----------------------------------------------------------------------


def _first_update(d: RunData) -> float | None:
    """The step of the first logged loss (any metric named like `*loss*`: backflip's `loss/*`,
    SB3's `train/*_loss`, CleanRL's `losses/*`), or None: before it an off-policy agent only
    acts (learning_starts), several times faster than once it also updates."""
    firsts = [s[0][0] for k in d.metrics if "loss" in k and (s := d.get(k)) is not None]
    return float(min(firsts)) if firsts else None


def _throughput(d: RunData, name: str):
    """(steps, values) of a throughput series without evaluation rows, rows before the first
    update, startup and zeros."""
    s = d.get(name)
    if s is None:
        return None
    steps, v = s
    ok = np.isfinite(v) & (v > 0)
    if (first := _first_update(d)) is not None:
        ok &= steps >= first
    ev = d.get("time/eval_s")
    if ev is not None:
        ok &= ~np.isin(steps, ev[0])
    steps, v = steps[ok], v[ok]
    return after_warmup((steps, v), d.horizon, 0.1)


def _decline(steps, v) -> dict | None:
    """A steady decline: five consecutive segments whose medians never rise by more than 15%,
    and either the last < 0.7× the first with a rank trend ρ < −0.8, or the last < 0.5× the
    first with ρ < −0.6. A machine that gets busy for a while makes bumps, not a staircase."""
    if len(v) < MIN_ROWS:
        return None
    medians = [float(np.median(p)) for p in np.array_split(np.asarray(v, np.float64), 5)]
    rho = spearman(steps, v)
    steady = all(b <= 1.15 * a for a, b in itertools.pairwise(medians))
    ratio = medians[-1] / medians[0] if medians[0] > 0 else 1.0
    if steady and ((ratio < 0.7 and rho < -0.8) or (ratio < 0.5 and rho < -0.6)):
        return {"segment_medians": medians, "spearman": rho, "last_over_first": ratio}
    return None


@rule(
    "throughput-decline",
    entry="12",
    reads=("time/sps_cpu", "time/sps", "sys/load_avg"),
    threshold="steady decline: medians of five consecutive segments never rise by > 15%, and "
    "the last is < 0.7× the first with Spearman ρ(step, steps/s) < −0.8, or < 0.5× with "
    "ρ < −0.6 (evaluation rows, rows before the first logged loss — an off-policy agent's "
    "learning_starts — and the first 10% excluded). Warning when steps per CPU-second decline (the process's own work grows) "
    "and the machine's load average did not rise by > 25%; info otherwise",
    cause="a leak or growing per-step work (a list that grows, a buffer scanned each step, "
    "a thread that blocks more and more — Rahtz missed one for months)",
    check_next="profile two points of the run (py-spy dump), look for structures that grow "
    "with steps",
    source=f"{RAHTZ}; {JONES}",
    live=True,
)
def throughput_decline(d: RunData):
    cpu = _throughput(d, "time/sps_cpu")
    wall = _throughput(d, "time/sps")
    load_note, busier, load_ev = "", False, {}
    if (load := d.get("sys/load_avg")) is not None:
        parts = np.array_split(finite(after_warmup(load, d.horizon, 0.1))[1], 5)
        if len(parts[0]) and len(parts[-1]):
            la, lc = float(np.median(parts[0])), float(np.median(parts[-1]))
            busier = lc > 1.25 * la
            load_note = f"; the machine's load average went from {la:.1f} to {lc:.1f}"
            load_ev = {"load_first": la, "load_last": lc}
    for name, series in (("time/sps_cpu", cpu), ("time/sps", wall)):
        decl = _decline(*series) if series is not None else None
        if not decl:
            continue
        m = decl["segment_medians"]
        what = "steps per CPU-second" if name == "time/sps_cpu" else "steps/s"
        seen = f"{what} fell steadily from {fmt(m[0])} to {fmt(m[-1])} (ρ = {decl['spearman']:.2f})"
        ev = {**decl, **load_ev}
        if name == "time/sps" and cpu is not None and len(cpu[1]) >= MIN_ROWS:
            return Hit(
                "info",
                seen + " but steps per CPU-second did not" + load_note,
                metric=name,
                step=int(series[0][-1]),
                evidence=ev,
                cause="other processes competing for the CPU, or waiting (I/O, locks, a "
                "blocked thread)",
                check_next="the machine's load; if it was idle, look for waits that grow",
            )
        if busier:
            return Hit(
                "info",
                seen + load_note,
                metric=name,
                step=int(series[0][-1]),
                evidence=ev,
                cause="the machine got busier (other processes share the "
                "CPU), or growing work per step",
                check_next="rerun on a quiet machine before hunting a leak",
            )
        if name == "time/sps":
            seen += " (wall clock; without CPU time, competition from other processes can't be "
            seen += "ruled out)"
        return Hit("warning", seen + load_note, metric=name, step=int(series[0][-1]), evidence=ev)
    return None


# --- entry 13: memory -----------------------------------------------------------------------------


@rule(
    "memory-growth",
    entry="13",
    reads=("sys/rss_mb",),
    threshold="after warm-up RSS grows by > 100 MiB and > 25% with Spearman ρ > 0.8",
    cause="a leak (tensors kept with their graphs, lists of episodes) or a replay buffer "
    "filling up (then it stops at capacity — check it fits in memory)",
    check_next="what grows with steps; for off-policy runs the buffer size × observation size",
    source=f"{RAHTZ}; {SCHULMAN}",
    live=True,
)
def memory_growth(d: RunData):
    if (s := d.get("sys/rss_mb")) is None:
        return None
    steps, v = after_warmup(finite(s), d.horizon)
    if len(v) < MIN_ROWS:
        return None
    growth = float(v[-1] - v[0])
    rho = spearman(steps, v)
    if growth <= 100 or growth <= 0.25 * v[0] or not rho > 0.8:
        return None
    rate = growth / max(int(steps[-1] - steps[0]), 1) * 1e6
    return Hit(
        "warning",
        f"resident memory grew from {v[0]:.0f} to {v[-1]:.0f} MiB after warm-up "
        f"(ρ = {rho:.2f}, {rate:.0f} MiB per million steps)",
        metric="sys/rss_mb",
        step=int(steps[-1]),
        evidence={"start_mb": float(v[0]), "end_mb": float(v[-1]), "mb_per_million_steps": rate},
    )


# --- entry 14: update size and gradients ----------------------------------------------------------


@rule(
    "update-size",
    entry="14",
    reads=("train/update_ratio", "train/lr"),
    threshold="median ‖Δθ‖/‖θ‖ per update after warm-up < 1e-5 or > 0.5 (rows where the "
    "annealed learning rate is < 10% of its peak are skipped; Jones: ~1e-3 per optimizer step)",
    cause="a learning rate far too small (nothing moves) or far too large (weights jump)",
    check_next="the learning rate and its schedule, gradient clipping, the optimizer's eps",
    source=JONES,
    live=True,
)
def update_size(d: RunData):
    if (s := d.get("train/update_ratio")) is None:
        return None
    steps, v = s
    ok = np.isfinite(v)
    if (lr := d.get("train/lr")) is not None and len(lr[0]) == len(steps):
        ok &= lr[1] >= 0.1 * np.nanmax(lr[1])
    steps, v = after_warmup((steps[ok], v[ok]), d.horizon)
    if len(v) < 5:
        return None
    med = float(np.median(v))
    if 1e-5 <= med <= 0.5:
        return None
    which = "small" if med < 1e-5 else "large"
    return Hit(
        "warning",
        f"updates change the weights by {fmt(med)} of their norm (median after "
        f"warm-up): far too {which}",
        metric="train/update_ratio",
        step=int(steps[-1]),
        evidence={"median": med},
    )


@rule(
    "grad-spike",
    entry="14",
    reads=("train/grad_norm",),
    threshold="a gradient norm > 100× the median of the 10 rows before it: info once, warning "
    "from 3 such spikes (healthy PPO runs showed single spikes of 40×)",
    cause="an exploding gradient: a bad batch, a learning rate too high, a value target jump",
    check_next="gradient clipping (max_grad_norm), the learning rate, what changed at that step",
    source=f"{JONES}; rlwatch",
    live=True,
)
def grad_spike(d: RunData):
    if (s := d.get("train/grad_norm")) is None:
        return None
    steps, v = finite(s)
    if len(v) < MIN_ROWS:
        return None
    base = rolling_median(v, 10)
    ratio = v / np.where(base > 0, base, np.nan)
    spike = np.nan_to_num(ratio, nan=0.0) > 100
    spike[:5] = False
    if not spike.any():
        return None
    i = int(np.argmax(spike))
    return Hit(
        "warning" if spike.sum() >= 3 else "info",
        f"gradient norm spiked to {fmt(float(v[i]))} at step {int(steps[i]):,}, "
        f"{ratio[i]:.0f}× the median before it ({int(spike.sum())} spikes)",
        metric="train/grad_norm",
        step=int(steps[i]),
        evidence={"value": float(v[i]), "ratio": float(ratio[i]), "spikes": int(spike.sum())},
    )


# --- entry 15: Q values ---------------------------------------------------------------------------


@rule(
    "q-divergence",
    entry="15",
    reads=("*/q_mean", "*/q_max", "env/reward_*", "rollout/ep_return_max", "config gamma"),
    threshold="Q after warm-up above the largest achievable discounted return (max|r|/(1−γ), "
    "else the best episode return; plus, for a soft Q, its largest entropy bonus γ·α·H/(1−γ)) "
    "by 2×: warning; growing > 10× over the second half while above that bound: error",
    cause="overestimation or divergence: no target network (or updated too often), a missing "
    "terminal mask, a learning rate too high",
    check_next="the target-network update, the done/terminated mask in the TD target, "
    "double-Q / clipped double-Q, the learning rate",
    source="common practice (van Hasselt et al. 2016; Fujimoto et al. 2018)",
    live=True,
)
def q_divergence(d: RunData):
    name = d.find(Q_PATTERN)
    if name is None:
        return None
    steps, q = after_warmup(finite(d.get(name)), d.horizon)
    if len(q) < 5:
        return None
    bound, how = None, ""
    gamma = _gamma(d)
    lo, hi = d.get("env/reward_min"), d.get("env/reward_max")
    if gamma is not None and gamma < 1 and lo is not None and hi is not None:
        rmax = max(abs(np.nanmin(lo[1])), abs(np.nanmax(hi[1])))
        bound, how = rmax / (1 - gamma), f"max|r|/(1−γ) = {fmt(rmax / (1 - gamma))}"
    elif (r := d.get("rollout/ep_return_max") or d.get("rollout/ep_return_mean")) is not None:
        bound = float(np.nanmax(np.abs(r[1])))
        how = f"the best episode {d.trained_returns.name} {fmt(bound)}"
    if not bound:
        return None
    if (bonus := soft_bonus(d, steps)) is not None:  # SAC: Q holds the entropy bonus too
        extra = float(np.max(np.maximum(np.abs(bonus[0]), np.abs(bonus[1]))))
        bound, how = bound + extra, how + f" plus the entropy bonus γ·α·H/(1−γ) ≤ {fmt(extra)}"
    top = float(np.max(np.abs(q)))
    if top <= 2 * bound:
        return None
    half = q[len(q) // 2 :]
    growing = abs(half[-1]) > 10 * max(abs(half[0]), 1e-9)
    sev = "error" if growing else "warning"
    return Hit(
        sev,
        f"{name} reached {fmt(top)}, above {how}" + (" and still growing" if growing else ""),
        metric=name,
        step=int(steps[np.argmax(np.abs(q))]),
        evidence={"max_abs_q": top, "bound": bound, "growing": growing},
    )


def _step_reward(d: RunData) -> float | None:
    """The typical magnitude of one step's reward: raw env/reward_* when logged, else the
    median |return| / length of the logged episodes."""
    lo, hi = d.get("env/reward_min"), d.get("env/reward_max")
    if lo is not None and hi is not None and len(lo[0]) == len(hi[0]):
        both = np.maximum(np.abs(lo[1]), np.abs(hi[1]))
        both = both[np.isfinite(both)]
        return float(np.median(both)) if len(both) else None
    if d.episodes is not None and len(d.episodes[1]):
        _, rets, lens = d.episodes
        ok = np.isfinite(rets) & np.isfinite(lens) & (lens > 0)
        return float(np.median(np.abs(rets[ok] / lens[ok]))) if ok.any() else None
    r, n = d.get(d.trained_returns.mean), d.get("rollout/ep_len_mean")
    if r is None or n is None or len(r[0]) != len(n[0]):
        return None
    ok = np.isfinite(r[1]) & np.isfinite(n[1]) & (n[1] > 0)
    return float(np.median(np.abs(r[1][ok] / n[1][ok]))) if ok.any() else None


@rule(
    "q-stuck",
    entry="15",
    reads=("*/q_mean", "env/reward_*", "rollout/ep_return_mean", "rollout/ep_len_mean"),
    threshold="over the rows after the first 20%, Q moves by less than a tenth of one step's "
    "typical reward and never reaches one step's reward (on ≥ 10 rows, rewards not ~0)",
    cause="the Q-network is not learning: a learning rate far too small, gradients not reaching "
    "it, or targets that never change; the policy is whatever the initial network's argmax "
    "happens to be (it may still beat a random policy as ε decays)",
    check_next="the learning rate, train/update_ratio and train/grad_norm, the TD loss (does "
    "it fall?), the target-network update",
    source=f"{JONES}; common practice",
)
def q_stuck(d: RunData):
    name = d.find(Q_PATTERN)
    if name is None or (rho := _step_reward(d)) is None or not rho > 1e-6:
        return None
    steps, q = finite(d.get(name))
    if len(q) < MIN_ROWS:
        return None
    late = q[len(q) // 5 :]
    spread, top = float(np.ptp(late)), float(np.max(np.abs(late)))
    if spread >= 0.1 * rho or top >= rho:
        return None
    return Hit(
        "warning",
        f"{name} stayed between {fmt(float(late.min()))} and {fmt(float(late.max()))} over the "
        f"last 80% of its rows while one step's reward is ~{fmt(rho)}",
        metric=name,
        step=int(steps[-1]),
        evidence={"q_min": float(late.min()), "q_max": float(late.max()), "step_reward": rho},
    )


# --- entry 16: exploration ---------------------------------------------------------------------


@rule(
    "epsilon-stuck",
    entry="16",
    reads=("*/epsilon", "rollout/exploration_rate"),
    threshold="ε starts ≥ 0.5 and never decreases over ≥ 10 rows",
    cause="the exploration schedule is not applied (wrong step counter, a fraction of 0 steps, "
    "final ε equal to the initial one)",
    check_next="the ε schedule settings and the step counter that drives them",
    source=f"{ACHIAM}; common practice",
)
def epsilon_stuck(d: RunData):
    name = d.find(EPS_PATTERN)
    if name is None:
        return None
    steps, v = finite(d.get(name))
    if len(v) < MIN_ROWS or v[0] < 0.5 or v.min() < v[0] - 1e-9:
        return None
    return Hit(
        "warning",
        f"{name} stayed at {fmt(float(v[0]))} for the whole run",
        metric=name,
        step=int(steps[-1]),
        evidence={"value": float(v[0])},
    )


@rule(
    "alpha-collapse",
    entry="16",
    reads=("*/alpha", "train/ent_coef"),
    threshold="SAC's temperature α < 1e-3× its first value within the first 20% of training",
    cause="automatic entropy tuning with a target entropy too low, or a sign error in the α loss",
    check_next="the target entropy (usually −dim(A)) and the α loss sign",
    source="Haarnoja et al. 2018; common practice",
    live=True,
)
def alpha_collapse(d: RunData):
    name = d.find(ALPHA_PATTERN)
    if name is None:
        return None
    steps, v = finite(d.get(name))
    if len(v) < 3 or v[0] <= 0:
        return None
    low = (v < 1e-3 * v[0]) & (steps <= 0.2 * d.horizon)
    if not low.any():
        return None
    i = int(np.argmax(low))
    return Hit(
        "warning",
        f"{name} fell from {fmt(float(v[0]))} to {fmt(float(v[i]))} by step {int(steps[i]):,}",
        metric=name,
        step=int(steps[i]),
        evidence={"first": float(v[0]), "value": float(v[i])},
    )


@rule(
    "action-saturation",
    entry="16",
    reads=("env/action_clip_frac", "*/action_*_frac"),
    threshold="median fraction of actions at/beyond the bounds > 0.8 after warm-up",
    cause="the policy pushes against the action bounds: an unbounded Gaussian mean, a tanh "
    "squashing missing or applied twice, actions not rescaled to the env's range",
    check_next="action scaling and squashing, the policy's mean and std",
    source="common practice",
    live=True,
)
def action_saturation(d: RunData):
    name = d.find(SATURATION_PATTERN)
    if name is None:
        return None
    steps, v = after_warmup(finite(d.get(name)), d.horizon)
    if len(v) < 5 or (med := float(np.median(v))) <= 0.8:
        return None
    return Hit(
        "warning",
        f"{med:.0%} of actions were at or beyond the bounds (median after warm-up)",
        metric=name,
        step=int(steps[-1]),
        evidence={"median": med},
    )


@rule(
    "discount-horizon",
    entry="16b",
    reads=("config gamma", "rollout/ep_len_mean", "env render_fps"),
    threshold="1/(1−γ) more than 20× the longest episode, or less than 1% of the median "
    "episode length",
    cause="a discount mis-set for the task's timescale: far longer than episodes (high-variance "
    "targets, nothing gained), or far shorter than the delay between action and reward",
    check_next="γ against how many steps (and seconds, at the env's frame rate) separate an "
    "action from its consequence",
    source=SCHULMAN,
)
def discount_horizon(d: RunData):
    gamma = _gamma(d)
    if gamma is None:
        return None
    if d.episodes is not None and len(d.episodes[2]):
        lens = d.episodes[2]
        longest, median = float(lens.max()), float(np.median(lens))
    elif (s := d.get("rollout/ep_len_mean")) is not None:
        longest, median = float(np.nanmax(s[1])), float(np.nanmedian(s[1]))
    else:
        return None
    horizon = math.inf if gamma >= 1 else 1 / (1 - gamma)
    fps = tasks.render_fps(d.env_id)
    secs = f" ≈ {horizon / fps:.2g} s at {fps:g} fps" if fps and math.isfinite(horizon) else ""
    ev = {
        "gamma": gamma,
        "horizon_steps": horizon,
        "longest_episode": longest,
        "median_episode": median,
        "render_fps": fps,
    }
    if horizon > 20 * longest:
        return Hit(
            "info",
            f"γ = {gamma:g} gives a horizon of {fmt(horizon)} steps{secs}, "
            f"over 20× the longest episode ({fmt(longest)} steps)",
            evidence=ev,
        )
    if horizon < 0.01 * median:
        return Hit(
            "info",
            f"γ = {gamma:g} gives a horizon of {fmt(horizon)} steps{secs}, under "
            f"1% of the median episode ({fmt(median)} steps)",
            evidence=ev,
        )
    return None


# --- entries 19–20: learning from preferences ------------------------------------------------------


def _starved(d: RunData, name: str):
    s = d.get(name)
    if s is None:
        return None
    steps, v = finite(s)
    if len(v) < 5 or not (v > 0).any():
        return None
    last_pos = int(np.flatnonzero(v > 0)[-1])
    zeros = len(v) - 1 - last_pos
    span = steps[-1] - steps[last_pos]
    if zeros >= 3 and span >= 0.1 * max(d.end, 1):
        return steps[last_pos], zeros, span
    return None


@rule(
    "prefs-starved",
    entry="19",
    reads=("prefs/labels_per_s", "prefs/segments_per_s", "prefs/label_debt"),
    threshold="labels/s or segments/s was positive, then 0 on ≥ 3 rows spanning ≥ 10% of "
    "training while training went on (for labels: only while labels are owed, "
    "prefs/label_debt > 0, when it is logged, and only from a synthetic labeler: a person's "
    "pace, or labeling a person ended, is not a starved queue)",
    cause="a starved queue: the segment store or query queue stopped delivering (Rahtz: once "
    "a database filled, no new segments reached the labeler)",
    check_next="prefs/queue_depth and prefs/seconds_since_label; the segment store's capacity "
    "and whether the labeler process is alive",
    source=RAHTZ,
    live=True,
)
def prefs_starved(d: RunData):
    person = d.prefs.get("labeler") == "human"
    for name in ("prefs/labels_per_s", "prefs/segments_per_s"):
        if person and name == "prefs/labels_per_s":
            continue  # a person answers at their pace; the seed waits for them (status waiting)
        hit = _starved(d, name)
        if hit is None:
            continue
        debt = d.get("prefs/label_debt")
        if name == "prefs/labels_per_s" and debt is not None and debt[1][-1] <= 0:
            continue  # the schedule asks for no more labels: a pause, not starvation
        last, zeros, span = hit
        return Hit(
            "error",
            f"{name} dropped to 0 after step {int(last):,} and stayed there for "
            f"{zeros} rows ({int(span):,} steps) while training continued",
            metric=name,
            step=int(last),
            evidence={"last_positive_step": int(last), "zero_rows": zeros},
        )
    return None


@rule(
    "reward-model-fit",
    entry="20",
    reads=("reward_model/val_train_loss_ratio",),
    threshold="median validation/training loss ratio over the second half outside 1.1–1.5",
    cause="> 1.5: the reward model overfits its labels (too little regularization); < 1.1: "
    "over-regularized (too much L2/dropout), it could fit the labels better",
    check_next="the adaptive L2 strength and the number of labels",
    source="Christiano et al. 2017",
    live=True,
)
def reward_model_fit(d: RunData):
    if (s := d.get("reward_model/val_train_loss_ratio")) is None:
        return None
    steps, v = finite(s)
    if len(v) < 6:
        return None
    med = float(np.median(v[len(v) // 2 :]))
    if 1.1 <= med <= 1.5:
        return None
    which = "overfitting (> 1.5)" if med > 1.5 else "over-regularized (< 1.1)"
    return Hit(
        "warning",
        f"validation/training loss ratio {fmt(med)} over the second half: {which}",
        metric="reward_model/val_train_loss_ratio",
        step=int(steps[-1]),
        evidence={"median": med},
    )


@rule(
    "reward-model-corr",
    entry="20",
    reads=("reward_model/segment_corr", "reward_model/return_corr"),
    threshold="correlation between predicted and true return < 0.5 over the last quarter, or "
    "fallen by > 0.3 from its best: of the policy's segments (what the model is trained to "
    "rank) where the run logs it, else of its episodes; info only while the true return "
    "improved (the test of 'did the return improve?' above), or when only the episodes' "
    "correlation is low",
    cause="the reward model does not track the task: too few or noisy labels, segments that "
    "don't cover what the policy now does, a normalization mismatch on its input",
    check_next="label accuracy, the query selection, observation normalization of the reward "
    "model's input",
    source="Christiano et al. 2017",
    live=True,
)
def reward_model_corr(d: RunData):
    def verdict(metric):  # (late, best, step) when the correlation is low or fell, else None
        if (s := d.get(metric)) is None:
            return None
        steps, v = finite(s)
        if len(v) < 6:
            return None
        late, best = float(np.median(v[-max(len(v) // 4, 2) :])), float(np.max(v))
        return (late, best, int(steps[-1])) if late < 0.5 or best - late > 0.3 else ()

    segments, episodes = verdict("reward_model/segment_corr"), verdict("reward_model/return_corr")
    if segments == () and episodes:  # segments ranked: the episodes' returns are alike
        late, best, step = episodes
        return Hit(
            "info",
            f"predicted-vs-true episode return correlation is {fmt(late)} late (best "
            f"{fmt(best)}), while the model still ranks the policy's segments: the episodes' "
            "true returns differ too little for their sums to be ranked",
            metric="reward_model/return_corr",
            step=step,
            evidence={"late": late, "best": best},
        )
    unit = "segment" if segments is not None else "episode"
    if not (low := segments if segments is not None else episodes):
        return None
    late, best, step = low
    metric = "reward_model/segment_corr" if unit == "segment" else "reward_model/return_corr"
    seen = f"predicted-vs-true {unit} return correlation is {fmt(late)} late (best {fmt(best)})"
    true = progress(d) if d.learned_reward else None
    if true is not None and true.improved:
        # Over the last 20 episodes (or segments), each summed under the model of its day: when
        # the policy has learned, their true returns differ by little more than where they
        # started, and r̂'s sums need not rank them although r̂ ranks the actions (a MovingDot84
        # run at 1.13 of PPO ended at 0.20). Said, not warned, while the task improves.
        return Hit(
            "info",
            f"{seen}, while the {true.describe()} improved",
            metric=metric,
            step=step,
            evidence={"late": late, "best": best, **true.evidence()},
        )
    return Hit("warning", seen, metric=metric, step=step, evidence={"late": late, "best": best})


@rule(
    "reward-model-gamed",
    entry="20",
    reads=("rollout/ep_return_mean", "episodes", TRUE_RETURN, EVAL_RETURN),
    threshold="preference runs: the learned-reward return improves (the test of 'did the "
    "return improve?' above, on rollout/ep_return_* or episodes.csv) while the true return "
    "does not",
    cause="the policy games the reward model: it found behaviour that r̂ rewards and the task "
    "does not (labels that don't cover the states the policy now visits, a reward model that "
    "stopped tracking the task)",
    check_next="reward_model/return_corr over training (does r̂ still track the true return of "
    "new episodes?), watch episodes (`backflip watch`), labels asked while the policy trains "
    "rather than up front, prefs.selection=disagreement",
    source="Christiano et al. 2017 (with offline labels the policy exploits the reward "
    "predictor); docs/preferences.md",
)
def reward_model_gamed(d: RunData):
    if not d.learned_reward or _rows(d) < MIN_ROWS:
        return None
    learned, true = progress(d, LEARNED_RETURNS), progress(d)
    if learned is None or true is None or not learned.improved or true.improved:
        return None
    return Hit(
        "warning",
        f"the {learned.describe()}, but the {true.describe()}",
        metric=true.metric,
        step=true.step_late,
        evidence={
            **true.evidence(),
            "learned_metric": learned.metric,
            "learned_early": learned.early,
            "learned_late": learned.late,
        },
    )


@rule(
    "labels-one-sided",
    entry="20",
    reads=("prefs/labeled_segments", "prefs/labeled_gains", "prefs/labeled_losses"),
    threshold="at the last row: >= 100 labeled segments, >= 10% of them with a true return of "
    "exactly 0 (a sparse reward), one sign of true return on < 2% of them but at least one (so "
    "the env does give it: a reward that is never negative, or an absorbing state's 0, is not "
    "one-sided) and the other on >= 20%",
    cause="the clips asked about come from the policy (and the random one before it), which "
    "seldom gains reward (or seldom loses it): the model is shown one side of the task and "
    "learns it alone: to avoid losing, not to win (Pong from preferences: 13 of 2,582 labeled "
    "segments won a point, 1,218 lost one; longer rallies, every point still lost)",
    check_next="backflip prefs check-reward RUN --policy RUN2 with a policy that does the task "
    "(does r̂ pay for what it was hardly shown?); more labels early, from more exploratory play",
    source="Christiano et al. 2017 (the reward model learns only what its clips show); "
    "docs/benchmarks.md (Pong)",
)
def labels_one_sided(d: RunData):
    counts = [d.get(f"prefs/labeled_{k}") for k in ("segments", "gains", "losses")]
    if any(c is None for c in counts):
        return None
    series = [finite(c) for c in counts]
    if any(len(v) == 0 for _, v in series):
        return None
    shown, gains, losses = (float(v[-1]) for _, v in series)
    if shown < 100 or (shown - gains - losses) < 0.1 * shown:
        return None
    rare, common = sorted([("gained", gains), ("lost", losses)], key=lambda x: x[1])
    if rare[1] >= 0.02 * shown or common[1] < 0.2 * shown or rare[1] == 0:
        return None
    return Hit(
        "warning",
        f"of {int(shown):,} labeled segments, {int(gains):,} gained true reward and "
        f"{int(losses):,} lost it: the reward model was hardly shown what the task "
        f"{'rewards' if rare[0] == 'gained' else 'punishes'}",
        metric="prefs/labeled_segments",
        step=int(series[0][0][-1]),
        evidence={"labeled_segments": shown, "gains": gains, "losses": losses},
    )


@rule(
    "labels-uninformative",
    entry="20",
    reads=("prefs/labels", "prefs/labels_equal"),
    threshold="at the last row: >= 50 labels, >= 80% of them 'equally good' (0.5), and the true "
    "return did not improve (a policy that does the task well is shown clips alike too)",
    cause="the clips asked about never differ in what the task rewards: a sparse reward that "
    "neither the random policy nor the policy reached (Acrobot's goal, CliffWalking's far "
    "corner), so the reward model learns nothing and the policy follows its noise; or a "
    "labeler who cannot tell the clips apart",
    check_next="prefs/labeled_gains and labeled_losses; exploration that reaches the reward "
    "(an entropy bonus, more random clips: prefs.random_envs, prefs.initial_frac); a denser "
    "task, or a person who can say which clip came nearer",
    source="Christiano et al. 2017 (labels carry information only where clips differ); "
    "docs/preferences.md",
)
def labels_uninformative(d: RunData):
    labels, equal = d.get("prefs/labels"), d.get("prefs/labels_equal")
    if labels is None or equal is None:
        return None
    (steps, n), (_, e) = finite(labels), finite(equal)
    if not len(n) or not len(e) or n[-1] < 50:
        return None
    share = float(e[-1]) / float(n[-1])
    true = progress(d) if d.learned_reward else None
    if share < 0.8 or (true is not None and true.improved):
        return None
    return Hit(
        "warning",
        f"{int(e[-1]):,} of {int(n[-1]):,} labels were 'equally good' ({share:.0%}): the clips "
        "shown hardly ever differed in what the task rewards",
        metric="prefs/labels_equal",
        step=int(steps[-1]),
        evidence={"labels": float(n[-1]), "equal": float(e[-1]), "share": share},
    )


KOSTRIKOV = "Kostrikov et al. 2019, 'Discriminator-Actor-Critic' (absorbing states)"


@rule(
    "prefs-variable-horizon",
    entry="20",
    reads=("prefs/env_terminations", "prefs/terminated_frac"),
    threshold="a preference run with prefs.horizon=variable whose env ended at least one "
    "training episode early (terminated, before its time limit)",
    cause="episodes that end when the env ends them have a length that carries reward: a "
    "learned reward standardized to mean 0 pays for staying alive where it is mostly "
    "positive (survival bias: an env that ends at failure is 'solved' by surviving whatever "
    "r̂ says) and for ending early where it is mostly negative (the mirror: an env that ends "
    "at success learns never to finish); the reward model never sees the end",
    check_next="prefs.horizon=restart (the default: a fixed horizon, the end an absorbing state "
    "the reward model values, then a fresh start) or absorb; prefs/len_return_corr",
    source=f"Christiano et al. 2017 (termination removed); {KOSTRIKOV}",
    live=True,
)
def prefs_variable_horizon(d: RunData):
    if not d.learned_reward or d.prefs.get("horizon") != "variable":
        return None
    if (s := d.get("prefs/env_terminations")) is None:
        return None
    steps, ends = finite(s)
    if not len(ends) or ends[-1] < 1:
        return None
    frac = d.get("prefs/terminated_frac")
    share = f" ({fmt(100 * float(frac[1][-1]), 0)}% of the last episodes)" if frac else ""
    return Hit(
        "warning",
        f"the env ended {int(ends[-1]):,} training episodes early{share} while episodes were "
        "variable (prefs.horizon=variable): their length can carry the learned reward",
        metric="prefs/env_terminations",
        step=int(steps[-1]),
        evidence={"terminations": float(ends[-1])},
    )


@rule(
    "prefs-length-bias",
    entry="20",
    reads=("prefs/len_return_corr", "reward_model/segment_corr"),
    threshold="preference runs: |correlation of episode length with learned return| >= 0.8 "
    "(median over the last quarter of rows, >= 6 rows) while the reward model's segment "
    "correlation with the true reward is < 0.5 there; an error when the true return did not "
    "improve, else a warning",
    cause="the episode's length, not the reward model, decides what the policy is paid: "
    "survival bias when longer episodes earn more learned return (the agent is paid for "
    "staying alive), its mirror when shorter ones do (paid for ending the episode)",
    check_next="prefs.horizon=restart or absorb (a fixed horizon, the end an absorbing state "
    "the reward model values); prefs/terminated_frac, backflip prefs check-reward RUN",
    source=f"{KOSTRIKOV}; Christiano et al. 2017",
    live=True,
)
def prefs_length_bias(d: RunData):
    if not d.learned_reward or (s := d.get("prefs/len_return_corr")) is None:
        return None
    steps, corr = finite(s)
    if len(corr) < 6:
        return None
    late = float(np.median(corr[-max(len(corr) // 4, 3) :]))
    if abs(late) < 0.8:
        return None
    seg = d.get("reward_model/segment_corr")
    seg_late = None
    if seg is not None:
        _, sv = finite(seg)
        if len(sv):
            seg_late = float(np.median(sv[-max(len(sv) // 4, 3) :]))
            if seg_late >= 0.5:
                return None
    survival = late > 0
    what = (
        "survival bias: longer episodes earn more learned return, so the agent is paid for "
        "staying alive whatever the reward model judges"
        if survival
        else "its mirror: shorter episodes earn more learned return, so the agent is paid for "
        "ending the episode"
    )
    true = progress(d)
    wrong = true is not None and not true.improved and d.end >= 0.5 * d.horizon
    seen_seg = f", segment correlation {fmt(seg_late)}" if seg_late is not None else ""
    return Hit(
        "error" if wrong else "warning",
        f"episode length and learned return correlate at {fmt(late)}{seen_seg}: {what}"
        + (f"; the {true.describe()}" if true is not None else ""),
        metric="prefs/len_return_corr",
        step=int(steps[-1]),
        evidence={"len_return_corr": late, "segment_corr": seg_late, "survival": survival},
    )


@rule(
    "stale-replay-rewards",
    entry="20",
    reads=("prefs/replay_reward_lag",),
    threshold="an off-policy learner on a learned reward whose replay buffer's rewards were "
    "≥ 2 reward-model versions behind the newest model on ≥ 3 rows",
    cause="the replay buffer keeps the rewards of the reward model that was current when each "
    "transition was stored: the learner fits Q-values to judgements the model has since "
    "revised, a moving target no label can correct (prefs.relabel=false, or an algorithm that "
    "does not show its buffer to run.register_replay)",
    check_next="prefs.relabel (true by default) and whether the algorithm calls "
    "run.register_replay; prefs/relabels should grow with reward_model/updates",
    source="Lee, Smith & Abbeel 2021, 'PEBBLE' (relabel the replay buffer after each reward "
    "update); docs/preferences.md",
    live=True,
)
def stale_replay_rewards(d: RunData):
    if (s := d.get("prefs/replay_reward_lag")) is None:
        return None
    steps, lag = finite(s)
    stale = lag >= 2
    if stale.sum() < 3:
        return None
    first = int(steps[np.argmax(stale)])
    return Hit(
        "warning",
        f"the replay buffer's rewards were up to {int(lag.max())} reward-model versions old "
        f"(from step {first:,}, on {int(stale.sum())} rows): the learner trains on stale "
        "judgements",
        metric="prefs/replay_reward_lag",
        step=first,
        evidence={"max_lag": float(lag.max()), "stale_rows": int(stale.sum())},
    )
