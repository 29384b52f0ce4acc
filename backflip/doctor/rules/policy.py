"""The policy: its entropy, the KL between consecutive policies, exploration (catalog entries 3, 4, 16)."""

from __future__ import annotations

import math

import numpy as np

from backflip.doctor import tasks
from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    ACHIAM,
    ALPHA_PATTERN,
    EPS_PATTERN,
    JONES,
    MIN_ROWS,
    RAHTZ,
    SATURATION_PATTERN,
    SCHULMAN,
    TRUE_READ,
    _gamma,
    _rows,
    verdict,
)
from backflip.doctor.series import (
    RunData,
    after_warmup,
    finite,
    fmt,
    rolling_median,
)

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
    reads=("config gamma", "rollout/ep_len_mean", "env steps per second"),
    threshold="1/(1−γ) more than 20× the longest episode, or less than 1% of the median "
    "episode length",
    cause="a discount mis-set for the task's timescale: far longer than episodes (high-variance "
    "targets, nothing gained), or far shorter than the delay between action and reward",
    check_next="γ against how many steps (and seconds, at the env's real speed) separate an "
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
    fps = tasks.steps_per_second(d.env_id)
    secs = f" ≈ {horizon / fps:.2g} s at {fps:g} steps/s" if fps and math.isfinite(horizon) else ""
    ev = {
        "gamma": gamma,
        "horizon_steps": horizon,
        "longest_episode": longest,
        "median_episode": median,
        "steps_per_s": fps,
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
