"""Sensitivity sweeps and ablations: many runs around one configuration, judged with CIs.

`backflip sweep ALGO --env E --vary key=v1,v2 ... --seeds N` runs the default configuration and,
one hyperparameter at a time (or as a full grid with `--grid`), each value listed. `key=auto`
tries ×0.3 and ×3 of the default (Schulman: check the sensitivity of every hyperparameter);
values in (0.5, 1) — discounts, λ — are scaled on 1 − v instead (the horizon), booleans are
flipped, and a setting with a fixed set of choices tries its neighbours.

`backflip ablate ALGO --env E --switch name ...` turns each named design choice off, one at a
time; the names map to settings in the `ABLATIONS` dict of the algorithm's settings
(`algos/settings/<algo>.py`).

Every variant is its own archived run (tagged `sweep:<id>`), all seeds of all variants share one
worker pool, and every variant uses the same seeds as the default (common random numbers).
Each variant is judged against the default by the same rule as `backflip compare`: it is
*fragile* (or, for an ablation, the switch *helps*) when the default beats it — P(default >
variant)'s 95% interval above 0.5 and Welch p < 0.05.
"""

from __future__ import annotations

import itertools
import typing
from pathlib import Path

from rich.table import Table

from backflip import stats
from backflip.config import SECTIONS, RunOptions, parse_value
from backflip.errors import UserError, did_you_mean
from backflip.experiments.compare import table_text
from backflip.plots import sensitivity_figure
from backflip.runconfig import resolve_on_env
from backflip.runs.archive import write_json
from backflip.runs.layout import new_run_id
from backflip.summary import fmt

AUTO_FACTORS = (0.3, 3.0)


# --- which variants -------------------------------------------------------------------------------


def _field_type(spec, key: str):
    section, dot, name = key.partition(".")
    if dot and section in SECTIONS:
        return typing.get_type_hints(SECTIONS[section]).get(name)
    hints = {**typing.get_type_hints(RunOptions), **typing.get_type_hints(spec.config)}
    return hints.get(key)


def auto_values(key: str, value, tp) -> list:
    """The values `key=auto` tries around the default `value`."""
    if typing.get_origin(tp) is typing.Literal:
        choices = list(typing.get_args(tp))
        i = choices.index(value)
        return [choices[j] for j in (i - 1, i + 1) if 0 <= j < len(choices)]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        low, high = max(1, round(value * AUTO_FACTORS[0])), round(value * AUTO_FACTORS[1])
        return [v for v in dict.fromkeys((low, high)) if v != value]
    if isinstance(value, float):
        if value == 0:
            raise UserError(f"{key}=auto: the default is 0, so ×0.3 and ×3 are 0; list values")
        if 0.5 < value < 1:  # a discount or lambda: scale the horizon 1/(1 - v)
            return [round(1 - (1 - value) * f, 6) for f in AUTO_FACTORS]
        return [float(f"{value * f:.6g}") for f in AUTO_FACTORS]
    raise UserError(f"{key}=auto: can't guess values for {value!r}; list them: {key}=a,b")


def parse_vary(text: str, spec, base_flat: dict) -> tuple[str, list, bool]:
    """'lr=1e-4,3e-4' or 'lr=auto' -> (key, values in the setting's type, auto?)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise UserError(f"--vary expects key=v1,v2,... or key=auto, got {text!r}")
    if key not in base_flat:
        raise UserError(f"unknown key {key!r} for {spec.name}{did_you_mean(key, base_flat)}")
    tp = _field_type(spec, key)
    if values.strip() == "auto":
        return key, auto_values(key, base_flat[key], tp), True
    if typing.get_origin(tp) is tuple:  # a tuple setting: values separated by ';'
        items = [v for v in values.split(";") if v.strip()]
    else:
        items = [v for v in values.split(",") if v.strip()]
    return key, [parse_value(v.strip(), tp, key) for v in items], False


def sweep_variants(varies: list[tuple[str, list, bool]], base_flat: dict, grid: bool) -> list:
    """[{label, key, value, overrides}] — one-at-a-time, or every combination with `grid`."""
    out = []
    if not grid:
        for key, values, _ in varies:
            for v in values:
                if v != base_flat[key]:
                    out.append(
                        {"label": f"{key}={_fmt(v)}", "key": key, "value": v, "overrides": {key: v}}
                    )
        return out
    axes = []
    for key, values, auto in varies:
        vals = [base_flat[key], *values] if auto else list(values)
        axes.append([(key, v) for v in dict.fromkeys(map(_hashable, vals))])
    for combo in itertools.product(*axes):
        overrides = dict(combo)
        if all(base_flat[k] == v for k, v in overrides.items()):
            continue  # that's the default run
        label = " ".join(f"{k}={_fmt(v)}" for k, v in combo)
        out.append({"label": label, "key": "grid", "value": label, "overrides": overrides})
    return out


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ";".join(map(str, v))
    return str(v)


def ablation_variants(spec, base_flat: dict, switches: list[str]) -> list:
    """[{label, key, value, overrides}] — each named design choice turned off."""
    table = getattr(spec.settings, "ABLATIONS", {})
    if not table:
        raise UserError(f"{spec.name} defines no ablation switches (ABLATIONS) yet")
    if switches == ["all"]:
        switches = [n for n, off in table.items() if any(base_flat[k] != v for k, v in off.items())]
    out = []
    for name in switches:
        if name not in table:
            raise UserError(
                f"unknown switch {name!r} for {spec.name}{did_you_mean(name, table)}; "
                f"available: {', '.join(table)}"
            )
        off = table[name]
        if all(base_flat[k] == v for k, v in off.items()):
            setting = ", ".join(f"{k}={_fmt(v)}" for k, v in off.items())
            raise UserError(
                f"{name} is already off in this configuration ({setting}); turn it on with "
                f"--set to ablate it"
            )
        out.append({"label": f"no {name}", "key": name, "value": off, "overrides": dict(off)})
    return out


# --- running them ---------------------------------------------------------------------------------


def build_configs(algo, env, seeds, steps, file_values, set_values, variants):
    """The default config and one per variant (invalid combinations: a UserError naming it)."""
    base = resolve_on_env(algo, env, seeds, steps, file_values, set_values)
    cfgs = []
    for v in variants:
        try:
            cfgs.append(
                resolve_on_env(
                    algo, env, seeds, steps, file_values, {**set_values, **v["overrides"]}
                )
            )
        except UserError as e:
            raise UserError(f"{v['label']}: {e}") from None
    return base, cfgs


def drop_invalid(algo, env, seeds, steps, file_values, set_values, variants):
    """Auto-generated values the config rejects (e.g. gae_lambda ×3 > 1) are skipped, said why."""
    kept, skipped = [], []
    for v in variants:
        try:
            resolve_on_env(algo, env, seeds, steps, file_values, {**set_values, **v["overrides"]})
            kept.append(v)
        except UserError as e:
            skipped.append(f"{v['label']}: {e}")
    return kept, skipped


def run_study(
    kind: str,
    home: Path,
    argv: list[str],
    base,
    cfgs: list,
    variants: list[dict],
    workers=None,
    progress=True,
    backend="local",
    address=None,
    on_created=None,
) -> dict:
    """Launch the default run and every variant in one pool; return the study record."""
    # torch and the live doctor (scipy) only when runs are launched, not to plan or report
    from backflip.launch import launch_runs

    sid = new_run_id()
    tag = f"{kind}:{sid}"
    labels = ["default", *[v["label"] for v in variants]]
    records = launch_runs(
        [base, *cfgs],
        home,
        argv,
        messages=[f"{kind} {sid}: {label}" for label in labels],
        workers=workers,
        progress=progress,
        tags=[[kind, tag] for _ in labels],
        labels=labels,
        backend=backend,
        address=address,
        on_created=on_created,
    )
    return {
        "id": sid,
        "kind": kind,
        "algo": base.algo,
        "env": base.env_id,
        "seeds": base.seeds,
        "steps": base.steps,
        "base": {
            "label": "default",
            "run": records[0]["id"],
            "finals": _finals(records[0]),
            "values": {k: base.flat()[k] for v in variants for k in v["overrides"]},
        },
        "variants": [
            {**v, "run": r["id"], "finals": _finals(r)}
            for v, r in zip(variants, records[1:], strict=True)
        ],
        "runs_status": {r["id"]: r["status"] for r in records},
    }


def _finals(record: dict) -> list:
    return [s.get("final_eval_return") for s in record["seeds"]]


def judge(study: dict) -> dict:
    """Add each variant's summary and its comparison with the default, and a flag."""
    base_scores = [x for x in study["base"]["finals"] if x is not None]
    study["base"]["summary"] = stats.summarize(base_scores)
    for v in study["variants"]:
        scores = [x for x in v["finals"] if x is not None]
        v["summary"] = stats.summarize(scores)
        v["flag"] = ""
        if not scores or not base_scores:
            v["verdict"] = "no scores"
            continue
        cmp = stats.compare_pair(base_scores, scores)  # P(variant > default)
        v["poi"], v["poi_ci"], v["welch_p"] = cmp["poi"], cmp["poi_ci"], cmp["welch"]["p"]
        v["verdict"] = stats.verdict("default", v["label"], cmp)
        if v["verdict"].startswith("default beats"):
            v["flag"] = "fragile" if study["kind"] == "sweep" else "helps"
        elif v["verdict"].startswith(f"{v['label']} beats"):
            v["flag"] = "better" if study["kind"] == "sweep" else "hurts"
    return study


def save_study(home: Path, study: dict, plot: bool = True, fmt: str = "png") -> dict:
    folder = home / "studies"
    folder.mkdir(exist_ok=True)
    if plot:
        title = (
            f"{study['kind']} {study['id']}: {study['algo']} on {study['env']}, "
            f"{len(study['seeds'])} seeds × {study['steps']:,} steps"
        )
        study["plot"] = str(
            sensitivity_figure(
                panels(study), study["base"]["summary"], folder / f"{study['id']}.{fmt}", title
            )
        )
    write_json(folder / f"{study['id']}.json", study)
    return study


def panels(study: dict) -> dict:
    """{hyperparameter or switch: the points of its plot panel, default included, in order}."""
    base = study["base"]
    out: dict[str, list] = {}
    for v in study["variants"]:
        pt = {"value": v["value"], "summary": v["summary"], "flag": v["flag"], "default": False}
        if study["kind"] == "ablate":
            pt["value"] = "off"
        out.setdefault(v["key"], []).append(pt)
    for key, points in out.items():
        default = {"summary": base["summary"], "flag": "", "default": True}
        if study["kind"] == "ablate":
            points.insert(0, {**default, "value": "on"})
        elif key == "grid":
            points.insert(0, {**default, "value": "default"})
        else:
            points.append({**default, "value": base["values"][key]})
            try:
                points.sort(key=lambda p: float(p["value"]))
            except (TypeError, ValueError):
                pass
    return out


def format_study(study: dict) -> str:

    def ci(s):
        if not s.get("n"):
            return "-"
        return f"{fmt(s['iqm'])} {stats.interval(s['ci_low'], s['ci_high'], s['n'])}"

    sweep = study["kind"] == "sweep"
    table = Table(box=None, header_style="bold", pad_edge=False)
    for c in (
        "setting" if sweep else "variant",
        "run",
        "final return IQM [95% CI]",
        "Δ IQM",
        "P(variant > default) [95% CI]",
        "Welch p",
        "flag",
    ):
        table.add_column(c, no_wrap=True)
    base = study["base"]
    table.add_row("default", base["run"], ci(base["summary"]), "", "", "", "")
    for v in study["variants"]:
        s = v["summary"]
        delta = (
            s["iqm"] - base["summary"]["iqm"] if s.get("n") and base["summary"].get("n") else None
        )
        poi = "-"
        if "poi" in v:
            n = min(s.get("n", 0), base["summary"].get("n", 0))
            poi = f"{v['poi']:.2f} {stats.interval(*v['poi_ci'], n, digits=2)}"
        table.add_row(
            v["label"],
            v["run"],
            ci(s),
            "" if delta is None else f"{delta:+,.1f}",
            poi,
            "-" if "welch_p" not in v else stats._p(v["welch_p"]),
            v["flag"].upper() if v["flag"] in ("fragile", "hurts") else v["flag"],
        )
    n = len(study["seeds"])
    lines = [
        f"{study['kind']} {study['id']}: {study['algo']} on {study['env']}, {n} seeds × "
        f"{study['steps']:,} steps, {len(study['variants']) + 1} runs (tag {study['kind']}:{study['id']})",
        table_text(table),
    ]
    if n < stats.MIN_TRUSTWORTHY_SEEDS:
        lines.append(
            f"note: {n} seeds per setting — fewer than {stats.MIN_TRUSTWORTHY_SEEDS}, intervals are "
            "not trustworthy and real differences will read as 'insufficient evidence'"
        )
    if sweep:
        fragile = sorted({v["key"] for v in study["variants"] if v["flag"] == "fragile"})
        lines.append(
            "fragile (worse than the default with confidence): " + (", ".join(fragile) or "none")
        )
        better = [v["label"] for v in study["variants"] if v["flag"] == "better"]
        if better:
            lines.append("better than the default with confidence: " + ", ".join(better))
    else:
        lines.append("each claim separately:")
        for v in study["variants"]:
            name = v["key"]
            if v["flag"] == "helps":
                claim = f"{name} helps"
            elif v["flag"] == "hurts":
                claim = f"{name} hurts"
            else:
                claim = f"no evidence that {name} matters here"
            lines.append(f"  {claim}: {v['verdict']}")
    for s in study.get("skipped", []):
        lines.append(f"skipped: {s}")
    if study.get("plot"):
        lines.append(f"plot: {study['plot']}")
    return "\n".join(lines)
