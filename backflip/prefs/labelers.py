"""Labelers. The synthetic one is an oracle on the true reward; people answer on a web page
(`backflip.ui.label`, a page of `backflip ui`) writing to the same database.

Labels: 1.0 = the left segment is better, 0.0 = the right one, 0.5 = equally good. "Can't tell"
is not a label: the pair is dropped from training (status `skipped`).
"""

from __future__ import annotations

import numpy as np

from backflip.prefs.db import LABELS, Segment


def synthetic_label(
    left: Segment, right: Segment, error_rate: float = 0.0, rng: np.random.Generator | None = None
) -> float:
    """Prefer the segment with the higher sum of true reward; ties -> 0.5 (equal up to float
    rounding: a relative difference of 1e-9).

    With `error_rate` > 0, each answer is, with that probability, replaced by a uniformly random
    choice of left or right (the kind of mistake the reward model's 10% noise term assumes).
    """
    if error_rate > 0:
        rng = rng or np.random.default_rng()
        if rng.random() < error_rate:
            return float(rng.integers(0, 2))
    return LABELS[oracle_choice(left.true_return, right.true_return)]


def oracle_choice(left_return: float, right_return: float) -> str:
    """The oracle's answer for two true returns: left, right, or equal when they are equal up to
    float rounding (a relative difference of 1e-9)."""
    a, b = left_return, right_return
    if abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)):
        return "equal"
    return "left" if a > b else "right"
