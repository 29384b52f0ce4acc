"""The people who label: their pace, how often they agree with the true reward and with each
other, and how long they take. Read from the answers in a seed's `prefs.sqlite`.

- **agreement with the true reward**: on the pairs whose true returns differ, the share of a
  person's answers (not "can't tell") that pick the clip with the higher true return
  (`labelers.oracle_choice`). Pairs the true reward calls equal are left out: on tasks with
  integer rewards (MovingDot) ties are common and say nothing about the person. None when no
  answered pair's true returns differ (an env whose true reward is constant has no opinion).
- **agreement between two people**, on the queries both answered ("can't tell" dropped): the
  share of identical answers and Cohen's κ over left / right / equal, which discounts the
  agreement two people would reach by chance with their own answer frequencies.
- **latency**: seconds from when the page showed the pair to the answer (median).
- **pace**: answers per minute over the person's recent answers, and the time the rest of the
  labels would take at that pace.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import numpy as np

from backflip.prefs.labelers import oracle_choice

RECENT = 20  # answers the pace is measured over


def oracle_agreement(answers: list[dict]) -> dict | None:
    """{"agree": k, "n": n, "rate": k / n} of these answers against the true reward, on the
    pairs it tells apart; None when there are none."""
    graded = [
        (a["choice"], oracle_choice(a["left_true"], a["right_true"]))
        for a in answers
        if a["choice"] != "skip"
    ]
    graded = [(choice, oracle) for choice, oracle in graded if oracle != "equal"]
    if not graded:
        return None
    agree = sum(choice == oracle for choice, oracle in graded)
    return {"agree": agree, "n": len(graded), "rate": agree / len(graded)}


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's κ of two raters' answers to the same items; None when it is undefined (no items,
    or both always gave one and the same answer)."""
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ca) / n**2
    return None if expected >= 1 else (observed - expected) / (1 - expected)


def pace(answers: list[dict], now: float | None = None) -> float | None:
    """Answers per minute over the last `RECENT` answers (None before two answers)."""
    times = sorted(a["answered_at"] for a in answers)[-RECENT:]
    if len(times) < 2:
        return None
    now = time.time() if now is None else now
    # a person who stopped answering slows down: the span runs to now, not to their last answer
    span = max(times[-1], now) - times[0]
    return 60.0 * (len(times) - 1) / span if span > 0 else None


def person_summary(answers: list[dict], person: str, now: float | None = None) -> dict:
    """What the labeling page shows a person about themselves."""
    mine = [a for a in answers if a["person"] == person]
    return {
        "answers": len(mine),
        "per_minute": pace(mine, now),
        "true_reward": oracle_agreement(mine),
    }


def labeler_table(answers: list[dict]) -> dict:
    """Per person (answers, skipped, median latency, agreement with the true reward) and per
    pair of people (queries both answered, agreement, κ): the run page's labeling section."""
    by_person: dict[str, list[dict]] = {}
    for a in answers:
        by_person.setdefault(a["person"], []).append(a)
    people = []
    for person, mine in sorted(by_person.items()):
        latencies = [
            a["answered_at"] - a["shown_at"] for a in mine if a.get("shown_at") is not None
        ]
        people.append(
            {
                "person": person,
                "answers": len(mine),
                "skipped": sum(a["choice"] == "skip" for a in mine),
                "latency_s": float(np.median(latencies)) if latencies else None,
                "per_minute": pace(mine, now=max(a["answered_at"] for a in mine)),
                "true_reward": oracle_agreement(mine),
            }
        )
    pairs = []
    for p, q in itertools.combinations(sorted(by_person), 2):
        a_of = {a["query"]: a["choice"] for a in by_person[p]}
        both = [
            (a_of[a["query"]], a["choice"])
            for a in by_person[q]
            if a["query"] in a_of and "skip" not in (a_of[a["query"]], a["choice"])
        ]
        if not both:
            continue
        x, y = zip(*both, strict=True)
        pairs.append(
            {
                "people": [p, q],
                "queries": len(both),
                "agreement": sum(u == v for u, v in both) / len(both),
                "kappa": cohen_kappa(list(x), list(y)),
            }
        )
    return {"people": people, "pairs": pairs}
