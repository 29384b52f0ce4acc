"""JSON out: the one encoder behind every JSON backflip writes or serves.

Archive files (`run.json`, `status.json`, `findings.json`, studies, plans, batteries), `--json`
output, the web UI's `/api/*` responses and the data embedded in its pages and static reports
all go through `dumps`. JSON has no NaN or Infinity: Python's `json` module writes them as the
bare tokens `NaN` and `Infinity`, which a browser's `JSON.parse` rejects — one NaN in a page's
data once left every chart of the page blank, silently. Here a non-finite float becomes `null`
(a missing value: an interval that one seed cannot give, a metric that blew up), NumPy and torch
values become plain numbers and lists, and anything else unknown is written as its `str()`.
"""

from __future__ import annotations

import json
import math


def _default(x):
    """NumPy arrays and scalars, torch tensors -> lists and numbers; sets -> lists; else str."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, set | frozenset):
        return sorted(x, key=str)
    return str(x)


def clean(x):
    """`x` with every non-finite float replaced by None and every value JSON can hold natively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if x is None or isinstance(x, str | bool | int):
        return x
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    converted = _default(x)
    return converted if isinstance(converted, str) else clean(converted)


def dumps(obj, **kwargs) -> str:
    """`json.dumps` that never writes NaN or Infinity (they become null). Keyword arguments are
    `json.dumps`'s (`indent`, `separators`, ...); `default` and `allow_nan` are this module's."""
    kwargs.pop("default", None)
    kwargs.pop("allow_nan", None)
    try:  # most data has no non-finite float: one pass in C
        return json.dumps(obj, allow_nan=False, default=_default, **kwargs)
    except ValueError:  # "Out of range float values are not JSON compliant"
        return json.dumps(clean(obj), allow_nan=False, default=_default, **kwargs)
