"""What the rule modules share: the sources they cite, the metric patterns, the test of what
the return says about a run (`Verdict`)."""

from __future__ import annotations

from dataclasses import dataclass

from backflip.doctor import tasks
from backflip.doctor.series import (
    Progress,
    RunData,
    fmt,
    progress,
)
from backflip.returns import TRUE_RETURN

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
