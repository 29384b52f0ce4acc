"""Findings and rules: the doctor's vocabulary.

A rule reads metric series of one run (`RunData`) and returns hits; each hit becomes a `Finding`
whose message says what was seen (values, step), what usually causes it, what to check next, and
where the advice comes from. Rules register themselves with `@rule(...)` in `rules/<topic>.py` and
`seeds.py`; `docs/doctor.md` lists them all (a test keeps it complete).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backflip.runs.layout import FINDINGS

SEVERITIES = ("info", "warning", "error")


@dataclass
class Finding:
    """One diagnosis. `to_dict` is the JSON contract of `backflip doctor --json`."""

    rule: str
    severity: str
    metric: str | None
    step: int | None
    message: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _jsonable(asdict(self))


@dataclass
class Hit:
    """What a rule's check returns: the observation; the rule adds cause, advice and source."""

    severity: str
    seen: str
    metric: str | None = None
    step: int | None = None
    evidence: dict = field(default_factory=dict)
    cause: str | None = None
    """overrides the rule's usual cause for this hit"""
    check_next: str | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    entry: str
    """the entry of the diagnostics catalog (docs/doctor.md) this rule implements"""
    reads: tuple[str, ...]
    threshold: str
    cause: str
    check_next: str
    source: str
    live: bool
    """also checked during training (on the rows so far)"""
    check: Callable


RULES: list[Rule] = []


def rule(
    id: str,
    *,
    entry: str,
    reads: tuple[str, ...],
    threshold: str,
    cause: str,
    check_next: str,
    source: str,
    live: bool = False,
):
    """Register a check function `fn(data) -> Hit | list[Hit] | None` as a rule."""

    def register(fn):
        if any(r.id == id for r in RULES):
            raise ValueError(f"duplicate rule id {id}")
        RULES.append(Rule(id, entry, reads, threshold, cause, check_next, source, live, fn))
        return fn

    return register


def make_finding(r: Rule, hit: Hit, label: str | None) -> Finding:
    where = f"{label}: " if label else ""
    cause = hit.cause or r.cause
    nxt = hit.check_next or r.check_next
    message = f"{where}{hit.seen}. Usually: {cause}. Check: {nxt}. ({r.source})"
    evidence = {"seen": hit.seen, **hit.evidence}
    if label:
        evidence.setdefault("series", label)
    return Finding(r.id, hit.severity, hit.metric, hit.step, message, evidence)


def worst(findings: list[Finding]) -> str | None:
    return max((f.severity for f in findings), key=SEVERITIES.index, default=None)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    return sorted(findings, key=lambda f: -SEVERITIES.index(f.severity))


def _jsonable(x):
    """Plain JSON values: numpy scalars to Python, non-finite floats to strings."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def read_findings(run_dir: Path) -> dict | None:
    """The doctor's `findings.json` ({"target", "findings": [...]}) or None when absent/unreadable.

    Each finding: rule, severity (error/warning/info), metric, step, message, evidence.
    """
    path = Path(run_dir) / FINDINGS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        return {"error": f"unreadable findings.json: {e}", "findings": []}
    items = data.get("findings", []) if isinstance(data, dict) else []
    order = {"error": 0, "warning": 1, "info": 2}
    clean = [f for f in items if isinstance(f, dict)]
    clean.sort(key=lambda f: (order.get(f.get("severity"), 3), str(f.get("metric") or "")))
    return {"target": data.get("target") if isinstance(data, dict) else None, "findings": clean}
