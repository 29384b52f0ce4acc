"""The value function and Q: explained variance, the value's sign, Q divergence and stagnation (catalog entries 5, 7, 15)."""

from __future__ import annotations

import numpy as np

from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    ALPHA_PATTERN,
    JONES,
    MIN_ROWS,
    Q_PATTERN,
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
)

# --- entry 5: explained variance ------------------------------------------------------------------


@rule(
    "explained-variance",
    entry="5",
    reads=(
        "train/explained_var",
        "train/value_loss",
        "rollout/return_target_mean",
        "rollout/ep_return_mean",
        "env/reward_min",
        "env/reward_max",
        TRUE_READ,
    ),
    threshold="after warm-up: median ≤ 0.05 (≈ 0: no better than a constant) and 90th "
    "percentile < 0.2 (rows where the value loss is < 1e-4 × target² — targets nearly "
    "constant and fitted — are skipped, and rows whose rewards were all 0, env/reward_min = "
    "env/reward_max = 0: nothing to explain); error when the return does not improve either, warning "
    "otherwise",
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
    lo, hi = d.get("env/reward_min"), d.get("env/reward_max")
    if lo is not None and hi is not None and len(finite(lo)[1]) and len(finite(hi)[1]):
        # every reward of the rollout 0 (a sparse reward nobody has reached yet: FrozenLake's
        # true reward): the targets are the value net's own noise, nothing to explain
        keep &= (_at(lo, steps) != 0) | (_at(hi, steps) != 0)
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
