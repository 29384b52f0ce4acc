"""The rules: one function per signal of the diagnostics catalog (docs/doctor.md), in one module
per topic — `system` (the run itself), `policy`, `value`, `optimization`, `returns`,
`preferences` — behind one registry (`findings.RULES`, filled as each module is imported here);
what they share is `common`. Each rule's stated threshold is checked against its code
(`tests/test_doctor_thresholds.py`).

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

from backflip.doctor.rules import (  # noqa: F401 — each module registers its rules
    optimization,
    policy,
    preferences,
    returns,
    system,
    value,
)
from backflip.doctor.rules.policy import reversals

__all__ = ["reversals"]
