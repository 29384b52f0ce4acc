"""The doctor: reads a run's metrics and says what looks wrong, why, and what to check next.

    findings = diagnose(run_data)                 # one seed / one TensorBoard run
    target, findings = diagnose_target("last")    # anything `backflip doctor` accepts
    findings = diagnose_run_dir(run_dir)          # after `backflip train`; writes findings.json

Rules (`rules/`, one module per topic: system, policy, value, optimization, returns, preferences;
and `seeds.py` across seeds) implement the diagnostics catalog (docs/doctor.md). `live.py`
checks the same rules while a seed trains; `preflight.py` checks an environment before training,
`probes.py` an algorithm on Jones's probe environments.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np

from backflip.doctor import rules as _rules  # noqa: F401 — registers the rules
from backflip.doctor import tasks
from backflip.doctor.findings import RULES, Finding, Hit, Rule, make_finding, sort_findings
from backflip.doctor.seeds import SEED_RULES, SeedSet
from backflip.doctor.series import RunData, progress
from backflip.doctor.sources import Target, resolve_target
from backflip.runs.layout import FINDINGS

__all__ = [
    "RULES",
    "SEED_RULES",
    "Finding",
    "RunData",
    "Target",
    "diagnose",
    "diagnose_run_dir",
    "diagnose_target",
    "examine",
]


def _run_rule(r: Rule, arg, label: str | None) -> list[Finding]:
    try:
        hits = r.check(arg)
    except Exception as e:  # noqa: BLE001 — a rule's bug must not hide the other findings
        return [
            Finding(
                "doctor-error",
                "info",
                None,
                None,
                f"{label + ': ' if label else ''}rule {r.id} failed: {type(e).__name__}: {e}",
                {"traceback": traceback.format_exc(limit=3)},
            )
        ]
    if hits is None:
        return []
    hits = hits if isinstance(hits, list) else [hits]
    return [make_finding(r, h, label) for h in hits if isinstance(h, Hit)]


def diagnose(d: RunData, live: bool = False) -> list[Finding]:
    """Every rule on one run's series (`live`: only the rules marked safe during training). On a
    preference run whose true return never varied, the rules that read it are skipped
    (`true-return-constant` says why)."""
    from backflip.doctor.rules.preferences import CONSTANT_SKIPS, no_true_reward

    skip = no_true_reward(d) is not None
    out = []
    for r in RULES:
        if live and not r.live:
            continue
        if skip and r.id != "true-return-constant" and set(r.reads) & set(CONSTANT_SKIPS):
            continue
        out += _run_rule(r, d, d.label)
    return out


def seed_set(target: Target) -> SeedSet | None:
    """The seeds of a multi-run target with their final scores, for the seed-level rules."""
    labels, finals, early = [], [], []
    evals = sum(f is not None for f in target.finals)
    for d, final in zip(target.runs, target.finals, strict=True):
        if evals == len(target.runs):
            score = final
        else:
            from backflip.doctor.sources import tail_score

            score = tail_score(d)
        if score is None or not np.isfinite(score):
            continue
        labels.append(d.label)
        finals.append(float(score))
        if (p := progress(d)) is not None:
            early.append(p.early)
    if len(finals) < 2:
        return None
    threshold = tasks.reward_threshold(target.env_id)
    if evals == len(target.runs):
        basis = "greedy evaluation"
    else:  # `tail_score` read each run's task return (the true return on a preference run)
        names = sorted({d.returns.name for d in target.runs})
        basis = "final training " + " / ".join(names)
    return SeedSet(
        labels, np.array(finals), float(np.mean(early)) if early else None, threshold, basis
    )


def examine(target: Target) -> list[Finding]:
    """All findings for a resolved target: per series, then across seeds."""
    findings = []
    for d in target.runs:
        findings += diagnose(d)
    if len(target.runs) >= 2 and (s := seed_set(target)) is not None:
        for r in SEED_RULES:
            findings += _run_rule(r, s, None)
    return sort_findings(findings)


def diagnose_target(target: str, home: Path) -> tuple[Target, list[Finding]]:
    t = resolve_target(target, home)
    return t, examine(t)


def diagnose_run_dir(run_dir: Path) -> list[Finding]:
    """The end-of-training diagnosis of a backflip run; stored as findings.json."""
    from backflip.runs.archive import is_enospc, now_iso, write_json

    t = resolve_target(str(run_dir), run_dir.parent)
    findings = examine(t)
    try:
        write_json(
            Path(run_dir) / FINDINGS,
            {
                "target": str(run_dir),
                "created": now_iso(),
                "findings": [f.to_dict() for f in findings],
            },
        )
    except OSError as e:  # a full disk: the findings are still shown (`backflip doctor` later)
        if not is_enospc(e):
            raise
    return findings
