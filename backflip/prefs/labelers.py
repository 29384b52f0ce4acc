"""Labelers. Synthetic ones are teachers simulated on the true reward; people answer on a web page
(`backflip.ui.label`, a page of `backflip ui`) writing to the same database.

Labels: 1.0 = the left segment is better, 0.0 = the right one, 0.5 = equally good. "Can't tell"
is not a label: the pair is dropped from training (status `skipped`).

**Teachers** (`Teacher`) follow B-Pref (Lee, Smith, Dragan, Abbeel 2021, "B-Pref: Benchmarking
Preference-Based Reinforcement Learning"), whose simulated teachers are irrational in five
composable ways. For two segments with true rewards r¹, r² of H steps each:

- **myopic** (γ ≤ 1): the teacher judges the discounted returns R^γ = Σ_t γ^(H−t) r_t (t = 1..H),
  so the end of a clip weighs more than its beginning;
- **stochastic** (β): Bradley–Terry on those returns, P(left) = σ(β (R¹ − R²)); β → ∞ (`None`)
  is perfectly rational: the higher return wins, and equal returns (up to float rounding) are
  called equal, as the original oracle did;
- **mistake** (ε): the answer is flipped with probability ε (B-Pref's ε-mistake);
- **skip** (ε_skip): the query is skipped ("can't tell") when both segments' returns are below
  δ_skip, i.e. max(R¹, R²) < δ_skip;
- **equal** (ε_equal): the answer is "equally good" when |R¹ − R²| < δ_equal.

Skip and equal use undiscounted returns and thresholds that adapt to the task's reward scale, as
in B-Pref: δ = ε · R̄ where R̄ is the return of an average segment of recent experience (B-Pref:
the mean return of the last 10 training episodes times H / episode length; here the mean true
return of the segments in the query store). B-Pref's rewards are non-negative; so that the
thresholds also mean something for negative rewards (Pendulum), they are measured from a floor
F = min(0, P10), P10 the 10th percentile of recent segment returns: skip when max(R¹, R²) − F <
ε_skip (R̄ − F), equal when |R¹ − R²| < ε_equal (R̄ − F). With non-negative rewards F = 0 and
this is B-Pref's definition. (The floor was the lowest return; on Pendulum a few segments far
below the rest put it under almost every pair and the skip teacher never skipped: 0 of 5,250
queries. A percentile is not moved by such a tail.) On tasks whose every segment earns a share
of the average (CartPole: returns 3-25, mean ~19), B-Pref's skip rarely or never fires: that is
its definition, not a bug.
(B-Pref's code multiplies the margin by ε twice after its first feedback round; the paper's
definition, used here, has ε once.)

`error_rate` is backflip's original noise, kept as it was: with that probability the answer is a
uniformly random left or right, i.e. a flip with probability error_rate / 2.

The order in which a teacher answers: skip, then equal, then the random answer of `error_rate`,
then the rational or stochastic choice on the (discounted) returns, then the mistake flip. The
plain oracle (`Teacher()`, with or without `error_rate`) draws exactly the random numbers
`synthetic_label` always drew, so synthetic runs are unchanged by the richer teachers.

B-Pref's named teachers (`BPREF_TEACHERS`, `prefs.labeler=bpref-NAME`): oracle; stoc (β = 1);
mistake (ε = 0.1); skip (ε_skip = 0.1); equal (ε_equal = 0.1); myopic (γ = 0.9). β is per unit of
true return, so how stochastic β = 1 is depends on the task's reward scale (B-Pref's tasks have
rewards in [0, 1] per step).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import numpy as np

from backflip.config import BPREF_TEACHER_NAMES, PrefsConfig
from backflip.prefs.db import LABELS, Segment

# B-Pref's named teachers' parameters, by the names `prefs.labeler=bpref-NAME` takes (config)
BPREF_TEACHERS: dict[str, dict[str, float]] = {
    "oracle": {},
    "stoc": {"beta": 1.0},
    "mistake": {"mistake": 0.1},
    "skip": {"skip": 0.1},
    "equal": {"equal": 0.1},
    "myopic": {"gamma": 0.9},
}
assert tuple(BPREF_TEACHERS) == BPREF_TEACHER_NAMES


# the floor of the skip and equal thresholds for negative rewards: a low percentile of recent
# segment returns, not their minimum (module docstring)
SKIP_FLOOR_PERCENTILE = 10


class Thresholds(NamedTuple):
    """The skip and equal teachers' thresholds on undiscounted segment returns."""

    skip_below: float = -math.inf
    """skip when max(R¹, R²) is below this"""
    equal_within: float = 0.0
    """answer "equal" when |R¹ − R²| is below this"""


@dataclass(frozen=True)
class Teacher:
    """A simulated labeler (the module docstring defines each parameter)."""

    beta: float | None = None
    """rationality of Bradley–Terry choices on the returns; None: perfectly rational (β → ∞)"""
    gamma: float = 1.0
    """myopia: step t of H weighs γ^(H−t) in the return the teacher judges"""
    mistake: float = 0.0
    """probability that the answer is flipped"""
    skip: float = 0.0
    """ε_skip: skip when both returns are below ε_skip times the average segment return"""
    equal: float = 0.0
    """ε_equal: "equal" when the returns differ by less than ε_equal times the average return"""
    error_rate: float = 0.0
    """probability of a uniformly random left/right answer (backflip's original noise)"""

    @classmethod
    def named(cls, name: str, **overrides) -> Teacher:
        """B-Pref's teacher `name` (oracle, stoc, mistake, skip, equal, myopic), with overrides."""
        return cls(**{**BPREF_TEACHERS[name], **overrides})

    @property
    def spec(self) -> str:
        """What is stored with each label: "synthetic" for the oracle, else the parameters that
        differ from it, e.g. "synthetic(beta=2, mistake=0.1)" (`parse` reads it back)."""
        default = Teacher()
        parts = [
            f"{k}={v:.12g}"
            for k, v in asdict(self).items()
            if v != getattr(default, k) and v is not None
        ]
        return f"synthetic({', '.join(parts)})" if parts else "synthetic"

    @classmethod
    def parse(cls, spec: str | None) -> Teacher | None:
        """The teacher of a stored `spec`, or None when `spec` is not a synthetic teacher's."""
        m = re.fullmatch(r"synthetic(?:\((.*)\))?", (spec or "").strip())
        if m is None:
            return None
        names = {f.name for f in fields(cls)}
        values = {}
        for part in filter(None, (p.strip() for p in (m.group(1) or "").split(","))):
            key, _, value = part.partition("=")
            if key not in names:
                return None
            values[key] = float(value)
        return cls(**values)

    @property
    def needs_reference(self) -> bool:
        """Do the answers depend on recent segment returns (the skip and equal thresholds)?"""
        return self.skip > 0 or self.equal > 0

    def thresholds(self, returns) -> Thresholds:
        """δ_skip and δ_equal from the undiscounted returns of recent segments (module
        docstring): with floor F = min(0, 10th percentile) and scale R̄ − F."""
        returns = np.asarray(returns, np.float64)
        if not self.needs_reference or returns.size == 0:
            return Thresholds()
        floor = min(0.0, float(np.percentile(returns, SKIP_FLOOR_PERCENTILE)))
        scale = float(returns.mean()) - floor
        return Thresholds(
            floor + self.skip * scale if self.skip > 0 else -math.inf, self.equal * scale
        )

    def judged_return(self, rewards: np.ndarray) -> float:
        """The return the teacher judges: Σ γ^(H−t) r_t (the plain sum for γ = 1)."""
        if self.gamma == 1.0:
            return float(np.sum(rewards))
        h = len(rewards)
        return float(np.sum(np.asarray(rewards) * self.gamma ** np.arange(h - 1, -1, -1)))

    def answer(
        self,
        left_rewards: np.ndarray,
        right_rewards: np.ndarray,
        rng: np.random.Generator | None = None,
        thresholds: Thresholds | None = None,
    ) -> str:
        """left, right, equal or skip for two segments' true rewards (the order in the module
        docstring). Random numbers come from `rng`, and only as many as the behaviours need."""
        if self.skip > 0 or self.equal > 0:
            thresholds = thresholds or Thresholds()
            r1, r2 = float(np.sum(left_rewards)), float(np.sum(right_rewards))
            if self.skip > 0 and max(r1, r2) < thresholds.skip_below:
                return "skip"
            if self.equal > 0 and abs(r1 - r2) < thresholds.equal_within:
                return "equal"
        if self.error_rate > 0 or self.mistake > 0 or self.beta is not None:
            rng = rng or np.random.default_rng()
        if self.error_rate > 0 and rng.random() < self.error_rate:
            return "left" if rng.integers(0, 2) else "right"
        r1, r2 = self.judged_return(left_rewards), self.judged_return(right_rewards)
        if self.beta is None:
            choice = oracle_choice(r1, r2)
        else:
            choice = (
                "left" if rng.random() < preference_probability(self.beta, r1 - r2) else "right"
            )
        if self.mistake > 0 and rng.random() < self.mistake:
            choice = {"left": "right", "right": "left"}.get(choice, choice)
        return choice

    def label(
        self,
        left: Segment,
        right: Segment,
        rng: np.random.Generator | None = None,
        thresholds: Thresholds | None = None,
    ) -> float | None:
        """The label of a pair (1 left, 0 right, 0.5 equal), or None when the teacher skips."""
        choice = self.answer(left.rewards, right.rewards, rng, thresholds)
        return None if choice == "skip" else LABELS[choice]


def preference_probability(beta: float, diff):
    """Bradley–Terry: P(left) = σ(β · (R_left − R_right)), without overflow for large β·diff."""
    z = beta * np.asarray(diff, np.float64)
    out = np.exp(-np.logaddexp(0.0, -z))
    return float(out) if out.ndim == 0 else out


def synthetic_label(
    left: Segment, right: Segment, error_rate: float = 0.0, rng: np.random.Generator | None = None
) -> float:
    """The oracle: prefer the segment with the higher sum of true reward; ties -> 0.5 (equal up to
    float rounding: a relative difference of 1e-9).

    With `error_rate` > 0, each answer is, with that probability, replaced by a uniformly random
    choice of left or right (the kind of mistake the reward model's 10% noise term assumes).
    """
    return Teacher(error_rate=error_rate).label(left, right, rng)


def oracle_choice(left_return: float, right_return: float) -> str:
    """The oracle's answer for two true returns: left, right, or equal when they are equal up to
    float rounding (a relative difference of 1e-9)."""
    a, b = left_return, right_return
    if abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)):
        return "equal"
    return "left" if a > b else "right"


def teacher_for(pcfg: PrefsConfig) -> Teacher:
    """The simulated teacher of a synthetic labeler: B-Pref's named one (`prefs.labeler=bpref-NAME`,
    or the oracle) with the `prefs.teacher_*` that are set, and `prefs.error_rate`."""
    label = pcfg.labeler
    name = label.removeprefix("bpref-") if label.startswith("bpref-") else "oracle"
    overrides = {
        key: value
        for key in ("beta", "gamma", "mistake", "skip", "equal")
        if (value := getattr(pcfg, f"teacher_{key}")) is not None
    }
    return Teacher.named(name, **overrides, error_rate=pcfg.error_rate)
