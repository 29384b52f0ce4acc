"""`backflip compare`: is one run really better than another, and was the comparison fair?

Each run is one side; its score per seed is the final greedy evaluation return. For every pair
the report gives the probability of improvement with its 95% CI and Welch's p-value, and a
one-line verdict (`stats.verdict`: B beats A only when P(B > A)'s interval lies above 0.5 *and*
Welch's p < 0.05; otherwise the evidence is insufficient). Fairness (Achiam: compare like with
like, and account for how much tuning each side got): parameter counts, step budgets, and the
tuning budget — how many runs of the same algorithm on the same env the archive holds from
before each run.

Scores are compared only when they measure the same thing: the same env, and the same `env.*`
settings that change the evaluation return itself (`SCORE_SETTINGS`: a reward scale, a time
limit). Otherwise the pair gets no statistics and no verdict, only the reason. The web UI and
the static reports show this same report (`backflip.ui.data.compare`), so the terminal and the
browser never give two answers to one question.
"""

from __future__ import annotations

import string
from pathlib import Path

from backflip import stats
from backflip.errors import UserError
from backflip.runs import index
from backflip.runs.archive import load_run
from backflip.runs.index import resolve_run

# env.* settings that change what a final evaluation return measures (evaluation envs get them)
SCORE_SETTINGS = ("reward_scale", "max_episode_steps")


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


def score_definition(record: dict) -> dict:
    """What a run's final evaluation return measures: its env and the `SCORE_SETTINGS`."""
    env = record.get("config", {}).get("env") or {}
    return {"env": record.get("env")} | {f"env.{k}": env.get(k) for k in SCORE_SETTINGS}


def incomparable(a: dict, b: dict) -> str | None:
    """Why the final scores of sides `a` and `b` can't be compared, or None when they can."""
    da, db = a["score_definition"], b["score_definition"]
    if da["env"] != db["env"]:
        return (
            f"{a['label']} ran on {da['env']} and {b['label']} on {db['env']}: returns on "
            "different envs are not comparable"
        )
    differ = [k for k in da if da[k] != db[k]]
    if differ:
        each = "; ".join(f"{k}: {a['label']} {da[k]}, {b['label']} {db[k]}" for k in differ)
        return (
            f"{a['label']} and {b['label']} measure their returns differently ({each}): "
            "the scores are not comparable"
        )
    return None


def curve_metrics(run_dirs: list[Path]) -> list[str]:
    """The curves every one of these runs can show: "return" (from training episodes) and each
    metrics.csv name that every run logged."""
    from backflip.curves import RETURN, metric_names

    common = None
    for d in run_dirs:
        names = metric_names(d, load_run(d)["config"]["seeds"])
        common = names if common is None else common & names
    return [RETURN, *sorted(common or ())]


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
        "score_definition": score_definition(record),
        "curve": run_curve(run_dir, metric),
    }


def fairness_notes(sides: list[dict]) -> list[str]:
    """What makes this comparison unfair or weak, in plain words."""
    notes = []
    envs = {s["env"] for s in sides}
    if len(envs) > 1:
        notes.append(f"different envs ({', '.join(sorted(envs))}): scores are not comparable")
    for key in SCORE_SETTINGS:
        values = {s["score_definition"][f"env.{key}"] for s in sides}
        if len(envs) == 1 and len(values) > 1:
            each = ", ".join(f"{s['label']} {s['score_definition'][f'env.{key}']}" for s in sides)
            notes.append(f"different env.{key} ({each}): scores are not comparable")
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
        if n == 1:
            notes.append(f"{s['label']} has 1 seed: no interval (a quick look, not a result)")
        elif n < stats.MIN_TRUSTWORTHY_SEEDS:
            notes.append(
                f"{s['label']} has {n} seed(s): fewer than {stats.MIN_TRUSTWORTHY_SEEDS}, "
                "intervals are not trustworthy"
            )
    return notes


def compare_runs(
    home: Path,
    refs: list[str],
    metric: str = "return",
    plot: str | Path | None = None,
    at_least: int = 2,
) -> dict:
    """The full comparison of 2+ runs: sides, pairwise statistics, verdicts, fairness, plot.

    `metric` is the curve drawn for each side; every run must have logged it. `at_least=1` lets
    the web UI show one run before a second is picked."""
    if len(refs) < at_least:
        raise UserError("compare needs at least two runs")
    if len(refs) > len(string.ascii_uppercase):
        raise UserError("compare at most 26 runs at once")
    dirs = [resolve_run(home, ref) for ref in refs]
    if len(set(dirs)) < len(dirs):
        raise UserError("the same run is given twice")
    if metric != "return":
        missing = [
            (string.ascii_uppercase[i], d.name)
            for i, d in enumerate(dirs)
            if metric not in curve_metrics([d])
        ]
        if missing:
            who = ", ".join(f"{label} ({run_id})" for label, run_id in missing)
            raise UserError(
                f"metric {metric!r} is not logged by {who}: its curves can't be compared "
                f"(metrics every run logged: {', '.join(curve_metrics(dirs)[:8])}, ...)"
            )
    sides = [side(home, str(d), string.ascii_uppercase[i], metric) for i, d in enumerate(dirs)]
    if len({s["id"] for s in sides}) < len(sides):
        raise UserError("the same run is given twice")
    pairs = []
    for i, a in enumerate(sides):
        for b in sides[i + 1 :]:
            sa = [x for x in a["finals"] if x is not None]
            sb = [x for x in b["finals"] if x is not None]
            why = incomparable(a, b)
            if why:
                pairs.append(
                    {
                        "a": a["label"],
                        "b": b["label"],
                        "comparable": False,
                        "decided": False,
                        "verdict": f"no verdict for {a['label']} vs {b['label']}: {why}",
                    }
                )
                continue
            if not sa or not sb:
                pairs.append(
                    {
                        "a": a["label"],
                        "b": b["label"],
                        "decided": False,
                        "verdict": _no_scores(a, b),
                    }
                )
                continue
            cmp = stats.compare_pair(sa, sb)
            cmp.update(
                a=a["label"],
                b=b["label"],
                comparable=True,
                decided=stats.winner(cmp) is not None,
                verdict=stats.verdict(a["label"], b["label"], cmp),
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


def interval_of(summary: dict) -> str:
    """A side's IQM interval as text: "[349.2, 500.0]", or "[no interval: 1 seed]"."""
    return stats.interval(summary.get("ci_low"), summary.get("ci_high"), summary.get("n"))


def table_text(table) -> str:
    """A rich table as plain text (no terminal needed)."""
    import io

    from rich.console import Console

    # no markup: a cell such as "[no interval: 1 seed]" would be read as a style tag and vanish
    console = Console(width=200, file=io.StringIO(), color_system=None, markup=False)
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
        iqm = "-" if not r.get("n") else f"{fmt(r['iqm'])} {interval_of(r)}"
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
        ci = stats.interval(*p["poi_ci"], min(p["n_a"], p["n_b"]), digits=2)
        lines.append(
            f"  {p['a']} vs {p['b']}: P({p['b']}>{p['a']}) = {p['poi']:.2f} {ci}, "
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
