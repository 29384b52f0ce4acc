"""Labelers. The synthetic one is an oracle on the true reward; the human one is a web page
(`backflip.prefs.web`) writing to the same database.

Labels: 1.0 = the left segment is better, 0.0 = the right one, 0.5 = equally good. "Can't tell"
is not a label: the pair is dropped from training (status `skipped`).
"""

from __future__ import annotations

import numpy as np

from backflip.prefs.db import Segment


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
    a, b = left.true_return, right.true_return
    if abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)):
        return 0.5
    return 1.0 if a > b else 0.0
