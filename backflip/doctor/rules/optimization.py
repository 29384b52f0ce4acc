"""What the optimizer is fed and does: reward, value, advantage and observation scales, the reward normalizer, update sizes and gradients (catalog entries 6, 8, 9, 14)."""

from __future__ import annotations

import math

import numpy as np

from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    JONES,
    MIN_ROWS,
    Q_PATTERN,
    RAHTZ,
    SCHULMAN,
    _rows,
)
from backflip.doctor.series import (
    RunData,
    after_warmup,
    finite,
    fmt,
    rolling_median,
)

# --- entry 6: scales ------------------------------------------------------------------------------


@rule(
    "reward-scale",
    entry="6",
    reads=("env/reward_min", "env/reward_max", "rollout/ep_return_mean", "rollout/ep_len_mean"),
    threshold="typical |reward| per step > 100 (raw env/reward_*, else return / length; on a "
    "preference run these hold the learned reward the policy trains on, and the finding says so; "
    "under prefs.horizon=terminal they hold the end's value r̂_abs/(1 − γ), by design: quiet "
    "when the learner scales rewards, scale_reward=true)",
    cause="rewards on a scale networks and optimizers handle badly; value targets far outside ±10",
    check_next="scale rewards (backflip: scale_reward=true, divides by the running std of the "
    "return — scale, don't shift), or divide the env's reward by a constant",
    source=f"{SCHULMAN}; {JONES}",
    live=True,
)
def reward_scale(d: RunData):
    terminal = d.learned_reward and d.prefs.get("horizon") == "terminal"
    if terminal and d.hp.get("scale_reward"):
        return None  # the end's value is large by design, and scaled before the learner sees it
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
    if terminal:
        how += (
            " — the end's value r̂_abs/(1 − γ) under prefs.horizon=terminal, which the learner "
            "sees unscaled (scale_reward=false)"
        )
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


SWITCH_ROWS = 10  # rows after a reward switch whose gradient spikes are expected


@rule(
    "grad-spike",
    entry="14",
    reads=("train/grad_norm", "prefs/exploring (preference runs)"),
    threshold="a gradient norm > 100× the median of the 10 rows before it: info once, warning "
    "from 3 such spikes (healthy PPO runs showed single spikes of 40×); spikes in the 10 rows "
    "after a preference run's exploration ends are info (its reward changed from the novelty "
    "bonus to r̂ there: exploring CliffWalking runs spiked 5 times at it)",
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
    # the rows right after the reward itself was replaced: targets jump there by design
    switched = np.zeros(len(steps), bool)
    if (at := d.reward_switch) is not None:
        switched[np.searchsorted(steps, at) :][:SWITCH_ROWS] = True
    expected = spike & switched
    spike &= ~switched
    if not spike.any():
        i = int(np.argmax(expected))
        return Hit(
            "info",
            f"gradient norm spiked to {fmt(float(v[i]))} at step {int(steps[i]):,}, "
            f"{ratio[i]:.0f}× the median before it ({int(expected.sum())} spikes), right after "
            f"exploration ended at step {at:,}: the reward changed from the novelty bonus to r̂",
            metric="train/grad_norm",
            step=int(steps[i]),
            evidence={"value": float(v[i]), "ratio": float(ratio[i]), "spikes": 0},
        )
    i = int(np.argmax(spike))
    return Hit(
        "warning" if spike.sum() >= 3 else "info",
        f"gradient norm spiked to {fmt(float(v[i]))} at step {int(steps[i]):,}, "
        f"{ratio[i]:.0f}× the median before it ({int(spike.sum())} spikes)",
        metric="train/grad_norm",
        step=int(steps[i]),
        evidence={"value": float(v[i]), "ratio": float(ratio[i]), "spikes": int(spike.sum())},
    )
