"""`backflip compare`: is one run really better than another, and was the comparison fair?

Each run is one side; its score per seed is the final greedy evaluation return. For every pair
the report gives the probability of improvement with its 95% CI and Welch's p-value, and a
one-line verdict (`stats.verdict`: B beats A only when P(B > A)'s interval lies above 0.5 *and*
Welch's p < 0.05; otherwise the evidence is insufficient). Fairness (Achiam: compare like with
like, and account for how much tuning each side got): parameter counts, step budgets, and the
tuning budget — how many runs of the same algorithm on the same env the archive holds from
before each run.
"""

from __future__ import annotations

import string
from pathlib import Path

from backflip import stats
from backflip.errors import UserError
from backflip.runs import index
from backflip.runs.archive import load_run, resolve_run


def tuning_budget(home: Path, record: dict) -> dict:
    """Runs (and seed-runs, env steps) of the same algorithm on the same env archived before it."""
    before = [
        r
        for r in index.query(home, env=record.get("env"), algo=record.get("algo"))
        if r["id"] < record["id"]
    ]
    return {
        "runs": len(before),
        "seed_runs": sum(r["n_seeds"] or 0 for r in before),
        "env_steps": sum((r["n_seeds"] or 0) * (r["steps"] or 0) for r in before),
    }


def side(home: Path, ref: str, label: str, metric: str = "return") -> dict:
    """One run as a side of a comparison: scores, summary, curve, fairness facts."""
    from backflip.curves import run_curve

    run_dir = resolve_run(home, ref)
    record = load_run(run_dir)
    seeds = record["seeds"]
    finals = [s.get("final_eval_return") for s in seeds]
    params = next((s["params"] for s in seeds if s.get("params")), None)
    cfg = record.get("config", {})
    return {
        "label": label,
        "id": record["id"],
        "dir": str(run_dir),
        "algo": record.get("algo"),
        "env": record.get("env"),
        "message": record.get("message", ""),
        "status": record.get("status"),
        "seeds": [s["seed"] for s in seeds],
        "finals": finals,
        "missing": [s["seed"] for s in seeds if s.get("final_eval_return") is None],
        "summary": stats.summarize(finals),
        "params": params,
        "steps_per_seed": cfg.get("steps"),
        "step_budget": (cfg.get("steps") or 0) * len(seeds),
        "tuning": tuning_budget(home, record),
        "curve": run_curve(run_dir, metric),
    }


def fairness_notes(sides: list[dict]) -> list[str]:
    """What makes this comparison unfair or weak, in plain words."""
    notes = []
    envs = {s["env"] for s in sides}
    if len(envs) > 1:
        notes.append(f"different envs ({', '.join(sorted(envs))}): scores are not comparable")
    for key, what in (("steps_per_seed", "step budgets"), ("params", "parameter counts")):
        values = {s[key] for s in sides if s[key] is not None}
        if len(values) > 1:
            each = ", ".join(f"{s['label']} {s[key]:,}" for s in sides if s[key] is not None)
            notes.append(f"unequal {what}: {each}")
    tuning = [s["tuning"]["runs"] for s in sides]
    if max(tuning) > 2 * min(tuning) + 2:
        each = ", ".join(f"{s['label']} {s['tuning']['runs']}" for s in sides)
        notes.append(
            f"unequal tuning: earlier runs of the same algo/env: {each} — the more tuned side "
            "has had more chances to look good"
        )
    for s in sides:
        n = s["summary"].get("n", 0)
        if s["missing"]:
            notes.append(
                f"{s['label']}: seeds {', '.join(map(str, s['missing']))} have no final "
                f"evaluation ({s['status']}); compared on the {n} that do"
            )
        if n < stats.MIN_TRUSTWORTHY_SEEDS:
            notes.append(
                f"{s['label']} has {n} seed(s): fewer than {stats.MIN_TRUSTWORTHY_SEEDS}, "
                "intervals are not trustworthy"
            )
    return notes


def compare_runs(
    home: Path, refs: list[str], metric: str = "return", plot: str | Path | None = None
) -> dict:
    """The full comparison of 2+ runs: sides, pairwise statistics, verdicts, fairness, plot."""
    if len(refs) < 2:
        raise UserError("compare needs at least two runs")
    if len(refs) > len(string.ascii_uppercase):
        raise UserError("compare at most 26 runs at once")
    sides = [side(home, ref, string.ascii_uppercase[i], metric) for i, ref in enumerate(refs)]
    if len({s["id"] for s in sides}) < len(sides):
        raise UserError("the same run is given twice")
    pairs = []
    for i, a in enumerate(sides):
        for b in sides[i + 1 :]:
            sa = [x for x in a["finals"] if x is not None]
            sb = [x for x in b["finals"] if x is not None]
            if not sa or not sb:
                pairs.append({"a": a["label"], "b": b["label"], "verdict": _no_scores(a, b)})
                continue
            cmp = stats.compare_pair(sa, sb)
            cmp.update(
                a=a["label"], b=b["label"], verdict=stats.verdict(a["label"], b["label"], cmp)
            )
            pairs.append(cmp)
    report = {
        "metric": "final greedy evaluation return",
        "curve_metric": metric,
        "sides": sides,
        "pairs": pairs,
        "verdicts": [p["verdict"] for p in pairs if p["a"] == "A"],
        "fairness": fairness_notes(sides),
    }
    if plot:
        from backflip.plots import comparison_figure

        report["plot"] = str(comparison_figure(sides, plot, metric))
    return report


def _no_scores(a: dict, b: dict) -> str:
    empty = [s["label"] for s in (a, b) if not any(x is not None for x in s["finals"])]
    return f"no verdict for {a['label']} vs {b['label']}: {', '.join(empty)} has no final scores"


def table_text(table) -> str:
    """A rich table as plain text (no terminal needed)."""
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.file.getvalue().rstrip()


def format_report(report: dict) -> str:
    """The terminal report: table, pairwise statistics, verdicts, fairness, plot path."""
    from rich.table import Table

    from backflip.summary import fmt

    sides = report["sides"]
    table = Table(box=None, header_style="bold", pad_edge=False)
    cols = ["", "run", "algo", "env", "seeds", "steps/seed", "params", "tuning runs"]
    cols += ["final return IQM [95% CI]", "mean", "min", "max"]
    for c in cols:
        table.add_column(c, no_wrap=True)
    for s in sides:
        r = s["summary"]
        iqm = (
            "-" if not r.get("n") else f"{fmt(r['iqm'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        )
        table.add_row(
            s["label"],
            s["id"],
            s["algo"],
            s["env"],
            f"{r.get('n', 0)}/{len(s['seeds'])}",
            f"{s['steps_per_seed'] or 0:,}",
            f"{s['params']:,}" if s["params"] else "?",
            str(s["tuning"]["runs"]),
            iqm,
            fmt(r.get("mean")),
            fmt(r.get("min")),
            fmt(r.get("max")),
        )
    lines = [table_text(table)]
    for s in sides:
        if s["message"]:
            lines.append(f"{s['label']}: {s['message']}")
    lines.append("")
    lines.append("pairwise (P(second > first) with 95% CI; Welch's t-test on the means):")
    for p in report["pairs"]:
        if "poi" not in p:
            lines.append(f"  {p['verdict']}")
            continue
        w = p["welch"]
        lo, hi = p["poi_ci"]
        lines.append(
            f"  {p['a']} vs {p['b']}: P({p['b']}>{p['a']}) = {p['poi']:.2f} [{lo:.2f}, {hi:.2f}], "
            f"mean difference {fmt(w['diff'])}, Welch p = {stats._p(w['p'])}"
        )
    lines.append("")
    for v in report["verdicts"]:
        lines.append(f"verdict: {v}")
    if report["fairness"]:
        lines.append("fairness:")
        lines += [f"  - {n}" for n in report["fairness"]]
    else:
        lines.append("fairness: same env, step budget and parameter count; similar tuning")
    if report.get("plot"):
        lines.append(f"plot: {report['plot']}")
    return "\n".join(lines)
