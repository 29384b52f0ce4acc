"""Seed-level rules (catalog entry 17): the seeds of one configuration, side by side.

Rahtz's tuned settings worked on one seed in three; Henderson et al. (2017) show two groups of
five seeds of the same code can look "significantly" different. Scores are normalized from the
random policy (each seed's early training return, averaged) to the best seed, so the tests are
scale-free: 0 = no better than random, 1 = as good as the best seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backflip.doctor.findings import Hit, Rule
from backflip.doctor.series import fmt
from backflip.returns import TRUE_RETURN

HENDERSON = "Henderson et al. 2017, 'Deep RL that Matters'"
RAHTZ = "Rahtz (2018): one seed in three"


@dataclass
class SeedSet:
    labels: list[str]
    finals: np.ndarray
    random: float | None
    """the random policy's return (mean early training return over seeds), if known"""
    threshold: float | None
    """the env's reward_threshold (Gymnasium spec), if it has one"""
    basis: str
    """what `finals` are: 'greedy evaluation' or 'final training return'"""

    def normalized(self) -> np.ndarray | None:
        best = float(self.finals.max())
        if self.random is None or best - self.random <= 1e-9 * max(abs(best), 1.0):
            return None
        return (self.finals - self.random) / (best - self.random)


SEED_RULES: list[Rule] = []


def seed_rule(id, **kw):
    def register(fn):
        SEED_RULES.append(Rule(id, live=False, check=fn, **kw))
        return fn

    return register


@seed_rule(
    "seed-success",
    entry="17",
    reads=(
        "eval/return_mean (final)",
        "rollout/ep_return_mean",
        f"{TRUE_RETURN} (preference runs)",
    ),
    threshold="success = the env's reward_threshold when it has one, else halfway from the "
    "random policy's return to the best seed's; warning when at most half the seeds succeed, "
    "info otherwise",
    cause="fragile hyperparameters: the configuration works only for some seeds",
    check_next="more seeds (≥ 5, Henderson; Agarwal et al.), then sensitivity to each "
    "hyperparameter; report the success fraction with the result",
    source=f"{RAHTZ}; {HENDERSON}",
)
def seed_success(s: SeedSet):
    n = len(s.finals)
    if n < 2:
        return None
    if s.threshold is not None:
        threshold, how = s.threshold, f"the env's reward threshold {fmt(s.threshold)}"
    elif s.random is not None and s.finals.max() > s.random:
        threshold = s.random + 0.5 * (s.finals.max() - s.random)
        how = (
            f"{fmt(threshold)}, halfway from the random policy ({fmt(s.random)}) to the best "
            f"seed ({fmt(float(s.finals.max()))})"
        )
    else:
        return None
    ok = s.finals >= threshold
    k = int(ok.sum())
    failed = [lab for lab, good in zip(s.labels, ok, strict=True) if not good]
    seen = f"{k} of {n} seeds succeed ({s.basis} ≥ {how})"
    if failed:
        seen += f"; not: {', '.join(failed[:6])}"
    sev = "warning" if k <= n / 2 else "info"
    return Hit(
        sev,
        seen,
        metric="eval/return_mean",
        evidence={
            "success_fraction": k / n,
            "threshold": threshold,
            "finals": dict(zip(s.labels, s.finals.tolist(), strict=True)),
        },
        cause=None if sev == "warning" else "n/a: reported for every multi-seed run",
        check_next=None if sev == "warning" else "report the success fraction with the result",
    )


@seed_rule(
    "seed-bimodal",
    entry="17",
    reads=("final returns of ≥ 3 seeds",),
    threshold="normalized final scores split by a gap ≥ 0.5 with each group's spread < half "
    "the gap",
    cause="two outcomes: some seeds find the solution, others get stuck (a local optimum, an "
    "early collapse)",
    check_next="compare a good and a bad seed's curves (entropy, KL, returns) to see where "
    "they part; `backflip diff` when it exists",
    source=f"{RAHTZ}; {HENDERSON}",
)
def seed_bimodal(s: SeedSet):
    z = s.normalized()
    if z is None or len(z) < 3:
        return None
    order = np.argsort(z)
    zs = z[order]
    gaps = np.diff(zs)
    i = int(np.argmax(gaps))
    g = float(gaps[i])
    low, high = zs[: i + 1], zs[i + 1 :]
    if g < 0.5 or max(np.ptp(low), np.ptp(high)) >= g / 2:
        return None
    labels = [s.labels[j] for j in order]
    return Hit(
        "warning",
        f"final returns split into two groups: {', '.join(labels[: i + 1])} "
        f"(≈{fmt(float(np.mean(s.finals[order][: i + 1])))}) vs "
        f"{', '.join(labels[i + 1 :])} (≈{fmt(float(np.mean(s.finals[order][i + 1 :])))})",
        metric="eval/return_mean",
        evidence={"normalized": dict(zip(s.labels, z.tolist(), strict=True)), "gap": g},
    )


@seed_rule(
    "seed-spread",
    entry="17",
    reads=("final returns of ≥ 3 seeds",),
    threshold="standard deviation of normalized final scores > 0.25 (not bimodal)",
    cause="high seed variance: results depend on luck as much as on the method",
    check_next="more seeds and confidence intervals before any comparison; sensitivity of "
    "the hyperparameters",
    source=f"{HENDERSON}; Agarwal et al. 2021",
)
def seed_spread(s: SeedSet):
    z = s.normalized()
    if z is None or len(z) < 3:
        return None
    sd = float(np.std(z, ddof=1))
    if sd <= 0.25 or seed_bimodal(s) is not None:
        return None
    return Hit(
        "warning",
        f"final returns are widely spread: {', '.join(fmt(x) for x in s.finals)}"
        f" (normalized std {sd:.2f})",
        metric="eval/return_mean",
        evidence={"normalized_std": sd},
    )
