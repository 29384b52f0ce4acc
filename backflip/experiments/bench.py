"""`backflip bench`: the benchmark battery — every algorithm on its reference envs, compared with
the previous battery so a regression is caught the day it lands (Schulman: "have a system for
continuously benchmarking code").

Reference envs and budgets come from each algorithm's settings (`algos/settings/<algo>.py`):
`BENCHMARKS` ({env id: steps}), or, when it has none, its `PRESETS` (each preset env at its
preset budget; the probe envs' presets, which tune `backflip probe`, are left out). A battery
runs every
(algorithm, env) pair with 5 seeds (seeds 0-4, fixed), all in one worker pool; each pair is an
archived run tagged `bench` and `bench:<battery id>`; the battery itself is
`<archive>/bench/<id>.json`. `--quick` uses a tenth of each budget (a smoke battery; quick and
full batteries are only compared with their own kind). The table goes to a Markdown page only
when asked (`update_docs`, `backflip bench --docs FILE`), replacing the rows of its pairs alone.

Regression rule, per pair: the previous battery's seeds beat the new ones with
P(old > new) > 0.75 and the 95% CI of that probability above 0.5.

Across envs (`across_envs`): each algorithm's final returns on its reference envs, normalized by
`backflip.references`, give rliable's aggregates — IQM and optimality gap with stratified
bootstrap CIs, score distributions and sample-efficiency curves — in the battery's JSON, its
table and its figure (`<archive>/bench/<id>.<png|svg|pdf>`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import backflip
from backflip import stats
from backflip.algos import ALGOS, get_algo
from backflip.config import resolve
from backflip.envs import check_supported
from backflip.errors import UserError
from backflip.runs.archive import read_json, write_json
from backflip.runs.layout import new_run_id
from backflip.runs.provenance import git_state
from backflip.summary import fmt

SEEDS = 5
QUICK_FRACTION = 10
REGRESSION_POI = 0.75


def reference_pairs(only: list[str] | None = None) -> list[tuple[str, str, int]]:
    """[(algo, env, steps)] for every registered algorithm, filtered by `only` (algo[:env])."""
    pairs = []
    for name in ALGOS:
        spec = get_algo(name)
        table = getattr(spec.settings, "BENCHMARKS", None)
        if table is None:
            table = {  # (the probes' presets tune `backflip probe`, not a benchmark)
                env: int(p.get("steps", spec.default_steps))
                for env, p in spec.presets.items()
                if not env.startswith("backflip/Probe")
            }
        pairs += [(name, env, int(steps)) for env, steps in table.items()]
    if only:
        wanted = []
        for item in only:
            algo, _, env = item.partition(":")
            if algo not in ALGOS:
                raise UserError(f"--only {item}: unknown algorithm {algo!r}")
            match = [p for p in pairs if p[0] == algo and (not env or p[1] == env)]
            if not match:
                raise UserError(f"--only {item}: not in the battery ({_names(pairs)})")
            wanted += [p for p in match if p not in wanted]
        pairs = wanted
    return pairs


def _names(pairs) -> str:
    return ", ".join(f"{a}:{e}" for a, e, _ in pairs)


def batteries(home: Path) -> list[dict]:
    folder = home / "bench"
    if not folder.is_dir():
        return []
    return sorted((read_json(p) for p in folder.glob("*.json")), key=lambda b: b["id"])


def previous_battery(home: Path, mode: str, before: str) -> dict | None:
    """The latest unmodified battery of the same mode created before `before`."""
    candidates = [
        b
        for b in batteries(home)
        if b["mode"] == mode and not b.get("overrides") and b["id"] < before
    ]
    return candidates[-1] if candidates else None


BASELINE_KEYS = ("id", "mode", "seeds", "overrides", "commit", "dirty", "wall_s", "entries")


def baseline_of(battery: dict) -> dict:
    """What a later battery is compared with (`--write-baseline FILE`): the battery without its
    figures' data, each entry without its own comparison; small enough to commit beside the
    docs whose table it made (`benchmarks/battery_full.json`)."""
    keep = ("algo", "env", "steps", "run", "status", "finals", "summary", "sps")
    out = {k: battery.get(k) for k in BASELINE_KEYS}
    out["entries"] = [{k: e.get(k) for k in keep} for e in battery["entries"]]
    return out


def read_baseline(path: Path, quick: bool) -> dict:
    """`--baseline FILE`: a battery (a `--write-baseline` file, or one of the archive's
    `bench/<id>.json`) of the mode about to run, checked before any run starts."""
    mode = "quick" if quick else "full"
    try:
        battery = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"--baseline {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise UserError(f"--baseline {path}: not a battery file ({e})") from None
    if not isinstance(battery, dict) or not isinstance(battery.get("entries"), list):
        raise UserError(f"--baseline {path}: not a battery file (no entries)")
    if battery.get("mode") != mode:
        raise UserError(
            f"--baseline {path}: a {battery.get('mode')} battery; this one is {mode} "
            f"({'drop' if quick else 'add'} --quick, or another file)"
        )
    if battery.get("overrides"):
        raise UserError(f"--baseline {path}: a modified (--set) battery is never a baseline")
    return battery


def judge(old: list, new: list) -> dict:
    """Regression / improvement / no change for one (algo, env) pair."""
    old = [x for x in old if x is not None]
    new = [x for x in new if x is not None]
    if not old or not new:
        return {"status": "no scores"}
    p, lo, hi = stats.probability_of_improvement(old, new)  # P(old > new)
    status = "same"
    if p > REGRESSION_POI and lo > 0.5:
        status = "REGRESSION"
    elif 1 - p > REGRESSION_POI and hi < 0.5:
        status = "improved"
    return {"status": status, "poi_old_new": p, "poi_ci": [lo, hi]}


def run_battery(
    home: Path,
    quick: bool = False,
    only: list[str] | None = None,
    seeds: int = SEEDS,
    overrides: dict | None = None,
    workers=None,
    progress=True,
    backend="local",
    address=None,
    baseline: dict | None = None,
) -> dict:
    """Run the battery and compare it with `baseline` (`read_baseline`) or, without one, with
    the archive's latest battery of the same mode; stored in `<home>/bench/<id>.json`."""
    # torch and the live doctor (scipy) only when runs are launched, not to plan or report
    from backflip.launch import launch_runs

    mode = "quick" if quick else "full"
    pairs = reference_pairs(only)
    if not pairs:
        raise UserError("no algorithm defines a reference env (BENCHMARKS or PRESETS)")
    bid = new_run_id()
    cfgs, runnable, skipped = [], [], []
    for algo, env, steps in pairs:
        budget = max(1, steps // QUICK_FRACTION) if quick else steps
        try:
            cfg = resolve(algo, env, list(range(seeds)), budget, set_values=overrides)
        except UserError as e:
            raise UserError(f"{algo} on {env}: {e}") from None
        try:  # e.g. an env whose optional extra is not installed here
            check_supported(get_algo(algo), env, cfg.env)
        except UserError as e:
            skipped.append(f"{algo}:{env}: {e}")
            continue
        cfgs.append(cfg)
        runnable.append((algo, env, steps))
    pairs = runnable
    if not pairs:
        raise UserError("no benchmark pair can run here: " + "; ".join(skipped))
    tag = f"bench:{bid}"
    started = time.time()
    records = launch_runs(
        cfgs,
        home,
        ["backflip", "bench"] + (["--quick"] if quick else []),
        messages=[f"bench {bid} ({mode}): {a} on {e}" for a, e, _ in pairs],
        workers=workers,
        progress=progress,
        tags=[["bench", tag, f"bench-{mode}"] for _ in pairs],
        labels=[f"{a}:{e}" for a, e, _ in pairs],
        backend=backend,
        address=address,
    )

    code = git_state(Path(backflip.__file__).resolve().parent) or {}
    battery = {
        "id": bid,
        "mode": mode,
        "seeds": seeds,
        "overrides": overrides or {},
        "commit": code.get("commit"),
        "dirty": code.get("dirty"),
        "wall_s": time.time() - started,
        "skipped": skipped,
        "entries": [
            {
                "algo": a,
                "env": e,
                "steps": c.steps,
                "run": r["id"],
                "status": r["status"],
                "finals": [s.get("final_eval_return") for s in r["seeds"]],
                "summary": {k: v for k, v in r["results"].items() if k != "per_seed"},
                "sps": _mean([s.get("sps") for s in r["seeds"]]),
            }
            for (a, e, _), c, r in zip(pairs, cfgs, records, strict=True)
        ],
    }
    prev = baseline if baseline is not None else previous_battery(home, mode, bid)
    battery["previous"] = prev["id"] if prev else None
    for entry in battery["entries"]:
        old = _find(prev, entry) if prev else None
        entry["previous"] = (
            {"run": old["run"], "summary": old["summary"]} if old is not None else None
        )
        entry["judgement"] = judge(old["finals"], entry["finals"]) if old else {"status": "new"}
    battery["regressions"] = [
        f"{e['algo']}:{e['env']}"
        for e in battery["entries"]
        if e["judgement"]["status"] == "REGRESSION"
    ]
    battery["across_envs"] = across_envs(home, battery)
    folder = home / "bench"
    folder.mkdir(exist_ok=True)
    write_json(folder / f"{bid}.json", battery)
    return battery


def across_envs(home: Path, battery: dict) -> dict:
    """Per algorithm, across its reference envs, on normalized scores: {"algos": [{"algo",
    "envs", "summary" (stats.summarize_tasks), "profile", "curve"}], "skipped": [why]}. Score
    distributions share one axis of thresholds, so the algorithms' profiles can be overlaid."""
    from backflip import references
    from backflip.curves import normalized_runs_curve

    groups: dict[str, list] = {}
    skipped = []
    for e in battery["entries"]:
        why = references.why_not_normalizable(e["env"], _flat_env(battery.get("overrides")))
        finals = [x for x in e["finals"] if x is not None]
        if why or not finals:
            skipped.append(f"{e['algo']}:{e['env']}: {why or 'no final scores'}")
            continue
        groups.setdefault(e["algo"], []).append((e, references.normalize(e["env"], finals)))
    taus = stats.profile_taus([t for g in groups.values() for _, t in g], include=(0.0, 1.0))
    # one x axis for every algorithm's curve: steps if every pair has one budget, else fractions
    fraction = len({e["steps"] for g in groups.values() for e, _ in g}) > 1
    algos = []
    for algo, items in groups.items():
        tasks = [list(t) for _, t in items]
        curve = normalized_runs_curve(
            [home / e["run"] for e, _ in items], [e["steps"] for e, _ in items], fraction
        )
        algos.append(
            {
                "algo": algo,
                "envs": [e["env"] for e, _ in items],
                "summary": stats.summarize_tasks(tasks),
                "profile": stats.performance_profile(tasks, taus),
                "curve": curve,
            }
        )
    return {"algos": algos, "skipped": skipped}


def _flat_env(overrides: dict | None) -> dict:
    """`--set env.reward_scale=...` of a what-if battery, in references' terms."""
    return {k: v for k, v in (overrides or {}).items() if k.startswith("env.")}


def battery_figure(battery: dict, path: Path) -> Path:
    """rliable's figure of the battery: every algorithm across its envs (`plots.aggregate_figure`)."""
    from backflip.plots import aggregate_figure

    groups = []
    for a in battery["across_envs"]["algos"]:
        s = a["summary"]
        if not s.get("n"):
            continue
        groups.append(
            {
                "label": f"{a['algo']} ({len(a['envs'])} env{'s' * (len(a['envs']) != 1)})",
                "aggregate": {
                    "iqm": (s["iqm"], s["ci_low"], s["ci_high"]),
                    "optimality_gap": (s["og"], *s["og_ci"]),
                },
                "profile": a["profile"],
                "curve": a["curve"],
            }
        )
    if not groups:
        raise UserError("no algorithm has normalized scores to draw (backflip/references.py)")
    title = f"battery {battery['id']} ({battery['mode']}), {battery['seeds']} seeds per env"
    return aggregate_figure(groups, path, title)


def _mean(xs):
    xs = [x for x in xs if x]
    return sum(xs) / len(xs) if xs else None


def _find(battery: dict, entry: dict) -> dict | None:
    for e in battery["entries"]:
        if (e["algo"], e["env"], e["steps"]) == (entry["algo"], entry["env"], entry["steps"]):
            return e
    return None


TABLE_HEADER = (
    "| algo | env | steps | seeds | final return IQM [95% CI] | previous | "
    "P(old > new) [95% CI] | status | steps/s per seed |"
)


def table_rows(battery: dict) -> list[tuple[tuple[str, str], str]]:
    """One Markdown row per pair: [((algo, env), row)]."""

    def ci(s):
        if not s or not s.get("n"):
            return "-"
        return f"{fmt(s['iqm'])} {stats.interval(s['ci_low'], s['ci_high'], s['n'])}"

    rows = []
    for e in battery["entries"]:
        j = e["judgement"]
        poi = "-"
        if "poi_old_new" in j:
            n = min(
                e["summary"].get("n", 0), (e.get("previous") or {}).get("summary", {}).get("n", 0)
            )
            poi = f"{j['poi_old_new']:.2f} {stats.interval(*j['poi_ci'], n, digits=2)}"
        prev = ci(e["previous"]["summary"]) if e.get("previous") else "-"
        row = (
            f"| {e['algo']} | {e['env']} | {e['steps']:,} | {e['summary'].get('n', 0)}/"
            f"{battery['seeds']} | {ci(e['summary'])} | {prev} | {poi} | {j['status']} | "
            f"{fmt(e['sps'], 0)} |"
        )
        rows.append(((e["algo"], e["env"]), row))
    return rows


def markdown_table(battery: dict) -> str:
    separator = "|" + "---|" * TABLE_HEADER.count(" | ") + "---|"
    return "\n".join([TABLE_HEADER, separator] + [row for _, row in table_rows(battery)])


def across_envs_table(battery: dict) -> str:
    """Each algorithm across its envs on normalized scores: IQM and optimality gap, 95% CIs."""
    from backflip.summary import fmt

    rows = [
        "across envs, normalized ((R - R_random) / (R_ref - R_random), docs/experiments.md):",
        "| algo | envs | runs | IQM [95% CI] | optimality gap [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for a in battery["across_envs"]["algos"]:
        s = a["summary"]
        if not s.get("n"):
            continue
        rows.append(
            f"| {a['algo']} | {', '.join(a['envs'])} | {s['runs']} | {fmt(s['iqm'], 2)} "
            f"{stats.interval(s['ci_low'], s['ci_high'], s['n'], digits=2)} | "
            f"{fmt(s['og'], 2)} {stats.interval(*s['og_ci'], s['n'], digits=2)} |"
        )
    for why in battery["across_envs"]["skipped"]:
        rows.append(f"not normalized: {why}")
    return "\n".join(rows)


def format_battery(battery: dict) -> str:
    head = (
        f"battery {battery['id']} ({battery['mode']}, {battery['seeds']} seeds, "
        f"{battery['wall_s']:.0f} s) at commit {str(battery.get('commit'))[:12]}"
        + (" + uncommitted changes" if battery.get("dirty") else "")
    )
    if battery.get("overrides"):
        head += f"; MODIFIED with {battery['overrides']} (never used as a baseline)"
    prev = battery.get("previous")
    lines = [head, f"compared with battery {prev}" if prev else "no previous battery to compare"]
    lines.append(markdown_table(battery))
    for note in battery.get("skipped", []):
        lines.append(f"skipped {note}")
    if battery.get("across_envs", {}).get("algos"):
        lines.append("")
        lines.append(across_envs_table(battery))
    if battery["regressions"]:
        lines.append(
            f"REGRESSIONS (P(old > new) > {REGRESSION_POI} with its CI above 0.5): "
            + ", ".join(battery["regressions"])
        )
    else:
        lines.append("no regression")
    return "\n".join(lines)


BATTERY_LINE = re.compile(r"^(?:- )?(Battery (\S+?), .*?\.)(?= Written by|$)")


def update_docs(path: Path, battery: dict, machine: str) -> None:
    """Put the battery into this mode's section of a Markdown page (between its markers): each
    pair's row replaces the row of the same algorithm and env, the rows of pairs it did not run
    stay as they were, and every row names the battery that measured it, which the section
    describes (commit, time, machine). A page without the section gets one at its end."""
    begin = f"<!-- backflip bench {battery['mode']}: begin -->"
    end = f"<!-- backflip bench {battery['mode']}: end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    found = pattern.search(text)
    rows, described = _section(found.group(0) if found else "")
    for key, row in table_rows(battery):
        rows[key] = f"{row} {battery['id']} |"
    described[battery["id"]] = (
        f"Battery {battery['id']}, {battery['seeds']} seeds per pair, commit "
        f"{str(battery.get('commit'))[:12]}"
        + (" (with uncommitted changes)" if battery.get("dirty") else "")
        + f", {battery['wall_s']:.0f} s on {machine}."
    )
    used = {row.rstrip(" |").rsplit("| ", 1)[1].strip() for row in rows.values()}
    batteries = [d for bid, d in sorted(described.items()) if bid in used or bid == battery["id"]]
    header = f"{TABLE_HEADER} battery |"
    body = (
        f"{begin}\n### Battery ({battery['mode']}): `backflip bench"
        + (" --quick" if battery["mode"] == "quick" else "")
        + "`\n\nWritten by `backflip bench --docs FILE`: a battery replaces the rows of the pairs "
        "it ran and leaves the others, and each row names its battery. The regression rule is "
        "P(old > new) > 0.75 with its 95% CI above 0.5.\n\n"
        + "".join(f"- {d}\n" for d in batteries)
        + f"\n{header}\n|"
        + "---|" * (header.count(" | ") + 1)
        + "\n"
        + "".join(f"{row}\n" for row in rows.values())
        + end
    )
    if found:
        text = pattern.sub(lambda _: body, text)
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.write_text(text)


def _section(section: str) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """The rows of a section `update_docs` wrote, {(algo, env): row ending in its battery id},
    and its batteries' descriptions, {battery id: text}. Rows of the older layout (one battery
    per section, no battery column) get the id of the battery the section names."""
    described: dict[str, str] = {}
    rows: dict[tuple[str, str], str] = {}
    columns = TABLE_HEADER.count(" | ") + 1
    for line in section.splitlines():
        m = BATTERY_LINE.match(line.strip())
        if m:
            described[m.group(2)] = m.group(1)
    only = next(iter(described), None) if len(described) == 1 else None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("algo", "") or set(cells[0]) <= {"-"}:
            continue
        if len(cells) == columns and only:  # the older layout: the section's one battery
            line = f"{line.rstrip()} {only} |"
        elif len(cells) != columns + 1:
            continue
        rows[(cells[0], cells[1])] = line.rstrip()
    return rows, described
