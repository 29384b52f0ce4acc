"""Preregistered experiments: decide what counts as success before looking at the results.

A plan is a small YAML (or TOML) file: the question, the configurations, the seed count and
budget, the metric, the comparisons, and the success criterion.

    name: ppo-lr-cartpole
    question: Does lr=3e-4 make PPO better than the default lr=1e-3 on CartPole-v1?
    env: CartPole-v1
    steps: 30000
    seeds: 10
    metric: final_eval_return
    configs:
      baseline: {algo: ppo}
      small_lr: {algo: ppo, set: {lr: 3.0e-4}}
    comparisons:
      - [baseline, small_lr]       # does the second beat the first?
    success: all                   # all (or any) comparisons must show the second beating the first
    alpha: 0.05
    threshold: 475                 # optional: also report the fraction of seeds reaching it

`backflip plan create FILE` validates every configuration, picks fresh seeds — seeds no archived
run on the plan's envs has used, so none of them took part in tuning — and freezes the plan:
its text, its sha256, the seeds and the resolved configs go to `<archive>/plans/<name>.json`.
`backflip plan run FILE` refuses a file whose hash no longer matches, runs every configuration
on the frozen seeds, and reports every seed of every run — failed ones included, nothing
excluded — with the plan's hash at the top. Running again shows the same report; a file edited
after running is reported as such (`plan run` and `plan show` both check).

`env` may list several envs (`env: [CartPole-v1, Acrobot-v1]`): every config then runs on each
(as runs named `config@env`), and each comparison is judged across tasks on normalized scores
(`backflip.references`; `stats.compare_tasks`), with every config's IQM and optimality gap
across the envs in the report and rliable's figure (`figure`).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import yaml

from backflip import stats
from backflip.algos import get_algo
from backflip.config import TrainConfig
from backflip.envs import check_supported
from backflip.errors import UserError
from backflip.runconfig import resolve_on_env
from backflip.runs import index
from backflip.runs.archive import now_iso, read_json, write_json
from backflip.summary import fmt

METRICS = ("final_eval_return",)
KEYS = {"name", "question", "env", "steps", "seeds", "metric", "configs", "comparisons"}
KEYS |= {"success", "alpha", "threshold"}


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_plan(path: str | Path) -> tuple[dict, str, str]:
    """(validated plan, text, sha256) from a YAML/TOML plan file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"plan file not found: {path}")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            plan = tomllib.loads(text)
        else:
            plan = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 — yaml and toml raise many types; all mean "bad file"
        raise UserError(f"cannot parse plan {path}: {e}") from None
    validate(plan, path)
    return plan, text, file_hash(path)


def validate(plan, path) -> None:
    def need(ok, message):
        if not ok:
            raise UserError(f"plan {path}: {message}")

    need(isinstance(plan, dict), "must be a mapping of key: value")
    unknown = set(plan) - KEYS
    need(not unknown, f"unknown keys {sorted(unknown)}; allowed: {sorted(KEYS)}")
    for key in ("name", "question", "configs", "comparisons", "seeds"):
        need(key in plan, f"missing `{key}`")
    need(
        isinstance(plan["name"], str) and re.fullmatch(r"[A-Za-z0-9_.-]+", plan["name"]),
        "`name` must be letters, digits, _ . -",
    )
    need(isinstance(plan["seeds"], int) and plan["seeds"] >= 2, "`seeds` must be an integer >= 2")
    need(plan.get("metric", METRICS[0]) in METRICS, f"`metric` must be one of {METRICS}")
    need(isinstance(plan["configs"], dict) and plan["configs"], "`configs` must name configs")
    for name, c in plan["configs"].items():
        need(isinstance(c, dict) and "algo" in c, f"config {name!r} needs `algo`")
        need(
            set(c) <= {"algo", "env", "steps", "set"},
            f"config {name!r}: keys algo, env, steps, set",
        )
        need(c.get("env") or plan.get("env"), f"config {name!r} has no env (set `env`)")
        need(isinstance(c.get("env", ""), str), f"config {name!r}: `env` is one env id")
    envs = plan.get("env")
    if isinstance(envs, list):
        need(
            envs and all(isinstance(e, str) for e in envs) and len(set(envs)) == len(envs),
            "`env` must be an env id or a list of distinct env ids",
        )
        from backflip.references import why_not_normalizable

        for e in envs:
            why = why_not_normalizable(e)
            need(why is None, f"a plan across envs compares normalized scores, but {why}")
    comps = plan["comparisons"]
    need(isinstance(comps, list) and comps, "`comparisons` must list [a, b] pairs")
    for pair in comps:
        need(
            isinstance(pair, list) and len(pair) == 2 and all(p in plan["configs"] for p in pair),
            f"comparison {pair!r} must be [a, b] with a and b among the configs",
        )
    need(plan.get("success", "all") in ("all", "any"), "`success` must be all or any")
    need(0 < float(plan.get("alpha", 0.05)) < 1, "`alpha` must be in (0, 1)")


def expand(plan: dict) -> dict[str, dict]:
    """{run name: config}: each config as written, or with `env` a list, once per env, named
    `config@env` (a config with its own `env` keeps it)."""
    envs = plan.get("env")
    if not isinstance(envs, list):
        return dict(plan["configs"])
    out = {}
    for name, c in plan["configs"].items():
        for env in [c["env"]] if c.get("env") else envs:
            out[f"{name}@{env}"] = {**c, "env": env}
    return out


def runs_of(plan: dict, name: str) -> list[str]:
    """The run names of one config (one, or one per env)."""
    return [n for n in expand(plan) if n == name or n.startswith(f"{name}@")]


def resolve_configs(plan: dict, seeds: list[int]) -> dict:
    """{run name: TrainConfig} (raises a UserError naming a bad config)."""
    out = {}
    for name, c in expand(plan).items():
        sets = {k: v for k, v in (c.get("set") or {}).items()}
        try:
            out[name] = resolve_on_env(
                c["algo"],
                c.get("env") or plan["env"],
                seeds,
                c.get("steps") or plan.get("steps"),
                set_values=sets,
            )
        except UserError as e:
            raise UserError(f"plan config {name!r}: {e}") from None
    return out


def fresh_seeds(home: Path, envs: set[str], n: int) -> list[int]:
    """The n smallest seeds no archived run on any of `envs` has used."""
    used: set[int] = set()
    for env in envs:
        used |= set(index.used_seeds(home, env))
    seeds, s = [], 0
    while len(seeds) < n:
        if s not in used:
            seeds.append(s)
        s += 1
    return seeds


def registration_path(home: Path, name: str) -> Path:
    return home / "plans" / f"{name}.json"


def create(home: Path, path: str | Path) -> tuple[dict, str]:
    """Freeze a plan; (registration, what happened)."""
    plan, text, digest = load_plan(path)
    reg_path = registration_path(home, plan["name"])
    old = read_json(reg_path) if reg_path.exists() else None
    if old and old.get("runs"):
        if old["hash"] == digest:
            return old, f"plan {plan['name']} already ran (sha256 {digest[:12]}); see its report"
        raise UserError(
            f"plan {plan['name']} already ran as sha256 {old['hash'][:12]}; this file is "
            f"{digest[:12]}: a changed plan after running needs a new name"
        )
    if old and old["hash"] == digest:
        return old, f"plan {plan['name']} is already frozen (sha256 {digest[:12]})"
    configs = resolve_configs(plan, [0])
    envs = {c.env_id for c in configs.values()}

    for c in configs.values():
        check_supported(get_algo(c.algo), c.env_id, c.env)
    seeds = fresh_seeds(home, envs, plan["seeds"])
    configs = resolve_configs(plan, seeds)
    reg = {
        "name": plan["name"],
        "file": str(Path(path).resolve()),
        "hash": digest,
        "text": text,
        "plan": plan,
        "created": now_iso(),
        "seeds": seeds,
        "configs": {k: c.to_dict() for k, c in configs.items()},
        "runs": {},
        "revisions": (
            [*old.get("revisions", []), {"hash": old["hash"], "created": old["created"]}]
            if old
            else []
        ),
    }
    reg_path.parent.mkdir(parents=True, exist_ok=True)
    write_json(reg_path, reg)
    how = "re-frozen (edited before running)" if old else "frozen"
    return reg, (
        f"plan {plan['name']} {how}: sha256 {digest}\n"
        f"seeds {seeds} — fresh: no archived run on {', '.join(sorted(envs))} used them\n"
        f"run it with: backflip plan run {path}"
    )


def edited_note(reg: dict) -> str | None:
    """A warning when the plan file on disk no longer matches the frozen hash."""
    path = Path(reg["file"])
    if not path.exists():
        return f"the plan file {path} is gone; the frozen text is in the registration"
    now = file_hash(path)
    if now != reg["hash"]:
        when = "after it ran" if reg.get("runs") else "since it was frozen"
        return (
            f"EDITED {when}: {path} is now sha256 {now[:12]}, the plan was frozen as "
            f"{reg['hash'][:12]}; the report below belongs to the frozen version"
        )
    return None


def run(home: Path, path: str | Path, workers=None, progress=True, backend="local", address=None):
    """Run a frozen plan (or return its existing report); (registration, report text)."""
    # torch and the live doctor (scipy) only when runs are launched, not to plan or report
    from backflip.launch import launch_runs

    path = Path(path)
    plan, _, digest = load_plan(path)
    reg_path = registration_path(home, plan["name"])
    if not reg_path.exists():
        raise UserError(f"plan {plan['name']} is not frozen: backflip plan create {path}")
    reg = read_json(reg_path)
    if reg["hash"] != digest:
        if reg.get("runs"):
            raise UserError(
                f"plan {plan['name']} was EDITED after it ran: frozen sha256 {reg['hash'][:12]}, "
                f"file now {digest[:12]}; its report stays tied to the frozen version "
                f"(backflip plan show {plan['name']})"
            )
        raise UserError(
            f"plan {plan['name']} was edited since it was frozen (sha256 {reg['hash'][:12]} -> "
            f"{digest[:12]}): freeze it again with backflip plan create {path}"
        )
    if reg.get("runs"):
        return reg, format_report(reg) + "\n(this plan already ran; nothing was run again)"

    names = list(reg["configs"])
    cfgs = [TrainConfig.from_dict(reg["configs"][n]) for n in names]
    short = reg["hash"][:12]
    records = launch_runs(
        cfgs,
        home,
        ["backflip", "plan", "run", str(path)],
        messages=[f"plan {plan['name']} ({short}): {n} — {plan['question']}" for n in names],
        workers=workers,
        progress=progress,
        tags=[["plan", f"plan:{plan['name']}", f"plan-sha:{short}"] for _ in names],
        labels=names,
        backend=backend,
        address=address,
    )
    reg["runs"] = {n: r["id"] for n, r in zip(names, records, strict=True)}
    reg["ran"] = now_iso()
    reg["report"] = build_report(home, reg, records)
    write_json(reg_path, reg)
    text = format_report(reg)
    (reg_path.parent / f"{plan['name']}.report.md").write_text(text + "\n")
    return reg, text


def build_report(home: Path, reg: dict, records: list[dict]) -> dict:
    plan = reg["plan"]
    alpha = float(plan.get("alpha", 0.05))
    by_name = dict(zip(reg["configs"], records, strict=True))
    configs = {}
    for name, r in by_name.items():
        seeds = [
            {"seed": s["seed"], "status": s.get("status"), "score": s.get("final_eval_return")}
            for s in r["seeds"]
        ]
        scores = [s["score"] for s in seeds if s["score"] is not None]
        entry = {"run": r["id"], "status": r["status"], "seeds": seeds}
        entry["summary"] = stats.summarize(scores)
        entry["failed"] = [s["seed"] for s in seeds if s["score"] is None]
        if plan.get("threshold") is not None:
            # a seed without a score did not reach the threshold: nothing is excluded
            padded = [s if s is not None else float("-inf") for s in (x["score"] for x in seeds)]
            entry["success_fraction"] = stats.success_fraction(padded, float(plan["threshold"]))
        configs[name] = entry
    across = across_envs(plan, configs, by_name) if isinstance(plan.get("env"), list) else None
    comparisons = []
    for a, b in plan["comparisons"]:
        if across is not None:
            ta, tb = across[a]["tasks"], across[b]["tasks"]
            if not all(ta) or not all(tb):
                comparisons.append({"a": a, "b": b, "verdict": "no scores", "b_beats_a": False})
                continue
            cmp = stats.compare_tasks(ta, tb)
        else:
            sa = [s["score"] for s in configs[a]["seeds"] if s["score"] is not None]
            sb = [s["score"] for s in configs[b]["seeds"] if s["score"] is not None]
            if not sa or not sb:
                comparisons.append({"a": a, "b": b, "verdict": "no scores", "b_beats_a": False})
                continue
            cmp = stats.compare_pair(sa, sb)
        v = stats.verdict(a, b, cmp, alpha=alpha)
        comparisons.append(
            {"a": a, "b": b, **cmp, "verdict": v, "b_beats_a": v.startswith(f"{b} beats")}
        )
    wins = [c["b_beats_a"] for c in comparisons]
    success = all(wins) if plan.get("success", "all") == "all" else any(wins)
    late = seeds_used_elsewhere(home, reg)
    out = {"configs": configs, "comparisons": comparisons, "success": success, "reused": late}
    if across is not None:
        out["across_envs"] = across
    return out


def across_envs(plan: dict, configs: dict, records: dict) -> dict:
    """Per config, across the plan's envs on normalized scores: {config: {"envs", "tasks"
    (normalized scores per env, in env order), "summary" (stats.summarize_tasks), "runs"}}."""
    from backflip.references import normalize

    out = {}
    for name in plan["configs"]:
        runs = sorted(runs_of(plan, name), key=lambda n: records[n]["env"])
        tasks = [
            normalize(records[n]["env"], [s["score"] for s in configs[n]["seeds"]]) for n in runs
        ]
        tasks = [[x for x in t if x is not None] for t in tasks]
        out[name] = {
            "envs": [records[n]["env"] for n in runs],
            "runs": [configs[n]["run"] for n in runs],
            "tasks": tasks,
            "summary": stats.summarize_tasks(tasks),
        }
    return out


def seeds_used_elsewhere(home: Path, reg: dict) -> dict:
    """Plan seeds that other runs (not this plan's) have used on the same envs: {seed: ids}."""
    mine = set(reg.get("runs", {}).values())
    envs = {c["env_id"] for c in reg["configs"].values()}
    out: dict[str, list[str]] = {}
    for env in envs:
        for seed, ids in index.used_seeds(home, env).items():
            others = [i for i in ids if i not in mine]
            if seed in reg["seeds"] and others:
                out.setdefault(str(seed), []).extend(others)
    return out


def format_report(reg: dict) -> str:
    plan, rep = reg["plan"], reg["report"]
    lines = [
        f"# plan {plan['name']} — sha256 {reg['hash']}",
        f"question: {plan['question']}",
        f"frozen {reg['created']}, ran {reg.get('ran', '-')}; seeds {reg['seeds']} "
        f"(chosen fresh when frozen); metric: {plan.get('metric', METRICS[0])}",
    ]
    note = edited_note(reg)
    if note:
        lines.append(f"WARNING: {note}")
    if rep.get("reused"):
        lines.append(
            "WARNING: other runs used this plan's seeds on the same env: "
            + "; ".join(f"seed {s}: {', '.join(ids)}" for s, ids in rep["reused"].items())
        )
    lines.append("")
    lines.append("every run, every seed (nothing excluded):")
    for name, c in rep["configs"].items():
        s = c["summary"]
        head = f"  {name} ({c['run']}, {c['status']}): "
        if s.get("n"):
            head += f"IQM {fmt(s['iqm'])} {stats.interval(s['ci_low'], s['ci_high'], s['n'], prefix='95% CI ')}"
            head += f", mean {fmt(s['mean'])}, min {fmt(s['min'])}, max {fmt(s['max'])}"
        else:
            head += "no scores"
        lines.append(head)
        lines.append(
            "    "
            + ", ".join(
                f"seed {x['seed']}: {fmt(x['score'])}"
                + ("" if x["status"] == "finished" else f" ({x['status']})")
                for x in c["seeds"]
            )
        )
        if c["failed"]:
            lines.append(f"    {len(c['failed'])} seed(s) without a score: counted, not dropped")
        if "success_fraction" in c:
            sf = c["success_fraction"]
            lines.append(
                f"    reached {plan['threshold']}: {sf['k']}/{sf['n']} = {fmt(sf['fraction'], 2)} "
                + stats.interval(*sf["ci"], sf["n"], digits=2, prefix="95% CI ")
            )
    if rep.get("across_envs"):
        lines.append("")
        lines.append("across envs, normalized ((R - R_random) / (R_ref - R_random)):")
        for name, a in rep["across_envs"].items():
            s = a["summary"]
            if not s.get("n"):
                lines.append(f"  {name}: no scores")
                continue
            lines.append(
                f"  {name} ({', '.join(a['envs'])}): IQM {fmt(s['iqm'], 2)} "
                f"{stats.interval(s['ci_low'], s['ci_high'], s['n'], digits=2, prefix='95% CI ')}"
                f", optimality gap {fmt(s['og'], 2)} "
                f"{stats.interval(*s['og_ci'], s['n'], digits=2, prefix='95% CI ')}"
            )
    lines.append("")
    for c in rep["comparisons"]:
        lines.append(f"comparison {c['a']} vs {c['b']}: {c['verdict']}")
    rule = "every" if plan.get("success", "all") == "all" else "at least one"
    lines.append(
        f"success criterion ({rule} comparison's second config beats the first: P(b>a) 95% CI "
        f"above 0.5 and Welch p < {plan.get('alpha', 0.05)}): "
        + ("MET" if rep["success"] else "NOT MET")
    )
    return "\n".join(lines)


def figure(home: Path, reg: dict, path: Path) -> Path:
    """rliable's figure of a plan that ran: each config's normalized scores (across its envs)
    — IQM and optimality gap with 95% CIs, score distributions, sample-efficiency curves
    (`plots.aggregate_figure`). Needs reference scores for every env (`backflip.references`)."""
    from backflip.curves import normalized_runs_curve
    from backflip.plots import aggregate_figure
    from backflip.references import normalize, why_not_normalizable

    plan, rep = reg["plan"], reg.get("report")
    if not rep:
        raise UserError(f"plan {plan['name']} has not run: nothing to draw")
    cfgs = reg["configs"]
    tasks_of = {}
    for name in plan["configs"]:
        runs = sorted(runs_of(plan, name), key=lambda n: cfgs[n]["env_id"])
        for n in runs:
            why = why_not_normalizable(
                cfgs[n]["env_id"], {"env." + k: v for k, v in cfgs[n]["env"].items()}
            )
            if why:
                raise UserError(f"no figure for plan {plan['name']}: {why}")
        tasks_of[name] = runs
    scores = {
        name: [
            [
                x
                for x in normalize(
                    cfgs[n]["env_id"], [s["score"] for s in rep["configs"][n]["seeds"]]
                )
                if x is not None
            ]
            for n in runs
        ]
        for name, runs in tasks_of.items()
    }
    taus = stats.profile_taus([t for ts in scores.values() for t in ts], include=(0.0, 1.0))
    fraction = len({cfgs[n]["steps"] for runs in tasks_of.values() for n in runs}) > 1
    groups = []
    for name, runs in tasks_of.items():
        tasks = scores[name]
        if not all(tasks):
            continue
        s = stats.summarize_tasks(tasks)
        dirs = [home / rep["configs"][n]["run"] for n in runs]
        groups.append(
            {
                "label": name,
                "aggregate": {
                    "iqm": (s["iqm"], s["ci_low"], s["ci_high"]),
                    "optimality_gap": (s["og"], *s["og_ci"]),
                },
                "profile": stats.performance_profile(tasks, taus),
                "curve": normalized_runs_curve(dirs, [cfgs[n]["steps"] for n in runs], fraction),
            }
        )
    if not groups:
        raise UserError(f"no figure for plan {plan['name']}: no config has scores")
    envs = sorted({cfgs[n]["env_id"] for runs in tasks_of.values() for n in runs})
    title = f"plan {plan['name']} ({reg['hash'][:12]}): {', '.join(envs)}"
    return aggregate_figure(groups, path, title)


def show(home: Path, ref: str) -> tuple[dict, str]:
    """A plan's registration and report, by name or by its file."""
    name = ref
    if Path(ref).is_file():
        plan, _, _ = load_plan(ref)
        name = plan["name"]
    path = registration_path(home, name)
    if not path.exists():
        raise UserError(f"no frozen plan {name!r} in {home / 'plans'}")
    reg = read_json(path)
    if not reg.get("runs"):
        note = edited_note(reg)
        text = (
            f"plan {name} — sha256 {reg['hash']}\nfrozen {reg['created']}, not run yet; "
            f"seeds {reg['seeds']}" + (f"\nWARNING: {note}" if note else "")
        )
        return reg, text
    return reg, format_report(reg)
