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
limit), and the same kind of score. Otherwise the pair gets no statistics and no verdict, only
the reason. The web UI and the static reports show this same report (`backflip.ui.data.compare`),
so the terminal and the browser never give two answers to one question.

A side can also be (docs/experiments.md):
- several runs on different envs joined with `+` (`A1+A2`): the side is scored across tasks on
  normalized scores (`backflip.references`), with rliable's aggregates (`stats.summarize_tasks`,
  the optimality gap, performance profiles, sample-efficiency curves);
- a Stable-Baselines3 or CleanRL TensorBoard logdir (`PATH` or `PATH@ENV`; each folder of event
  files in it is one seed). Such logs hold only training episodes, so the score of every side is
  then the **training-episode return** (`SCORE_KINDS["train"]`: the mean of the last 100
  training episodes at the end of training, SB3's `ep_rew_mean`), never a peer's training
  returns against backflip's greedy evaluation. `--score eval` keeps backflip's evaluation
  returns and refuses a verdict on every pair that mixes the two kinds.
"""

from __future__ import annotations

import string
from pathlib import Path

from backflip import stats
from backflip.errors import UserError
from backflip.runs import index
from backflip.runs.archive import load_run
from backflip.runs.index import resolve_run
from backflip.runs.layout import RUN_JSON

# env.* settings that change what a final evaluation return measures (evaluation envs get them)
SCORE_SETTINGS = ("reward_scale", "max_episode_steps")
TRAIN_WINDOW = 100  # training episodes per score: SB3's ep_rew_mean window (stats_window_size)
SCORE_KINDS = {
    "eval": "final greedy evaluation return",
    "train": f"training-episode return (mean of the last {TRAIN_WINDOW} training episodes at "
    "the end of training)",
}
PEERS = {"sb3": "Stable-Baselines3", "cleanrl": "CleanRL"}


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
    if a["score"] != b["score"] or "mixed" in (a["score"], b["score"]):
        plural = {"eval": "final greedy evaluation returns", "train": "training-episode returns"}
        kind = lambda s: plural.get(s["score"], "of both kinds")  # noqa: E731
        return (
            f"{a['label']}'s scores are {kind(a)} and {b['label']}'s are {kind(b)}: a greedy "
            "evaluation and training episodes (with exploration) measure different things — "
            "compare like with like (--score train scores every side by its training episodes)"
        )
    if a["normalized"] or b["normalized"]:
        ea, eb = {t["env"] for t in a["tasks"]}, {t["env"] for t in b["tasks"]}
        if ea != eb:
            return (
                f"{a['label']} ran on {', '.join(sorted(ea))} and {b['label']} on "
                f"{', '.join(sorted(eb))}: an aggregate across tasks compares the same tasks"
            )
        return None
    da, db = a["score_definition"], b["score_definition"]
    if da["env"] != db["env"]:
        return (
            f"{a['label']} ran on {da['env']} and {b['label']} on {db['env']}: returns on "
            "different envs are not comparable"
        )
    differ = [k for k in da if da[k] != db[k] and None not in (da[k], db[k])]
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


def is_peer(ref: str) -> bool:
    """A TensorBoard logdir of another library rather than a backflip run: a path (with an
    optional `@ENV`) holding event files and no run.json."""
    from backflip.doctor.sources import event_dirs

    path = Path(ref.rsplit("@", 1)[0]).expanduser()
    return path.is_dir() and not (path / RUN_JSON).exists() and bool(event_dirs(path))


def side_parts(ref: str) -> list[str]:
    """A side's runs or logdirs: `A1+A2` is a side across two tasks (an existing path that
    contains a `+` is one part)."""
    if "+" in ref and not Path(ref).exists():
        return [p for p in ref.split("+") if p]
    return [ref]


def _backflip_task(home: Path, ref: str, metric: str, window: int) -> dict:
    """One backflip run: both kinds of score per seed, fairness facts and its curve."""
    from backflip.curves import RETURN, run_curve, run_seed_curves

    run_dir = _run_part(home, ref)
    record = load_run(run_dir)
    seeds = record["seeds"]
    train = run_seed_curves(run_dir, [s["seed"] for s in seeds], RETURN, TRAIN_WINDOW)
    cfg = record.get("config", {})
    return {
        "kind": "backflip",
        "id": record["id"],
        "dir": str(run_dir),
        "algo": record.get("algo"),
        "env": record.get("env"),
        "message": record.get("message", ""),
        "status": record.get("status"),
        "seeds": [s["seed"] for s in seeds],
        # seeds stopped before their budget: their score is the last evaluation they reached
        "early": [
            {"seed": s["seed"], "status": s.get("status"), "eval_step": s.get("eval_step")}
            for s in seeds
            if s.get("status") != "finished"
            and s.get("final_eval_return") is not None
            and (s.get("eval_step") or 0) < (cfg.get("steps") or 0)
        ],
        "scores": {
            "eval": [s.get("final_eval_return") for s in seeds],
            "train": [
                float(train[s["seed"]][1][-1]) if s["seed"] in train else None for s in seeds
            ],
        },
        "params": next((s["params"] for s in seeds if s.get("params")), None),
        "steps_per_seed": cfg.get("steps"),
        "tuning": tuning_budget(home, record),
        "score_definition": score_definition(record),
        "curve": run_curve(run_dir, metric, window=window),
        "seed_curves": run_seed_curves(run_dir, [s["seed"] for s in seeds], metric, window),
    }


def _run_part(home: Path, ref: str) -> Path:
    """A side's part that is not a peer's logdir must be a backflip run."""
    path = Path(ref.rsplit("@", 1)[0]).expanduser()
    if "@" in ref or (path.is_dir() and not (path / RUN_JSON).exists()):
        raise UserError(
            f"{ref}: neither a backflip run nor a folder of SB3/CleanRL TensorBoard event files "
            "(events.out.tfevents.*)"
        )
    return resolve_run(home, ref)


def _peer_task(ref: str, metric: str, window: int) -> dict:
    """One SB3 or CleanRL TensorBoard logdir: each folder of event files is a seed, scored by
    its training-episode return (`curves.peer_return_curve`). Its env comes from `PATH@ENV` or a
    CleanRL run name; nothing in SB3's logs says it."""
    from backflip.curves import RETURN, aggregate_curves, peer_return_curve
    from backflip.doctor.sources import event_dirs, load_tensorboard, peer_env

    path_text, _, env = ref.partition("@") if "@" in ref else (ref, "", "")
    path = Path(path_text).expanduser()
    dirs = event_dirs(path)
    data = [load_tensorboard(d, d.relative_to(path).as_posix()) for d in dirs]
    library = {d.source for d in data}
    if not library <= set(PEERS):
        raise UserError(
            f"{path}: not Stable-Baselines3 or CleanRL TensorBoard logs (found {sorted(library)} "
            "tags); compare reads backflip runs and those two libraries' logs"
        )
    if len(library) > 1:
        raise UserError(f"{path} mixes SB3 and CleanRL logs: give each as its own side")
    (library,) = library
    named = {e for e in (peer_env(d) for d in dirs) if e}
    if env and named and named != {env}:
        raise UserError(f"{ref}: the CleanRL run names say {', '.join(sorted(named))}, not {env}")
    if not env:
        if len(named) != 1:
            raise UserError(
                f"the {PEERS[library]} logs in {path} do not say which env they ran on: name it "
                f"as {path}@ENV (for example {path}@CartPole-v1)"
            )
        (env,) = named
    if metric != RETURN:
        raise UserError(
            f"--metric {metric}: {PEERS[library]} logs are compared on their return curves only"
        )
    curves, finals = {}, []
    for i, d in enumerate(data):
        steps, values = peer_return_curve(d, window)
        if steps.size:
            curves[i] = (steps, values, int(steps[-1]))
        finals.append(float(values[-1]) if steps.size else None)
    ends = [max(int(s[-1]) for s, _ in d.metrics.values() if len(s)) for d in data]
    name = path.name or str(path)
    return {
        "kind": library,
        "id": name,
        "dir": str(path),
        "algo": f"{library}:{_peer_algo(dirs)}",
        "env": env,
        "message": f"{PEERS[library]} TensorBoard logs: {path} ({len(dirs)} seeds)",
        "status": "finished",
        "seeds": [d.relative_to(path).as_posix() for d in dirs],
        "scores": {"eval": [None] * len(dirs), "train": finals},
        "params": None,
        "steps_per_seed": max(ends) if len(set(ends)) == 1 else None,
        "peer_steps": ends,
        "tuning": None,
        # the logs record no wrappers: the registered env's own reward and time limit
        "score_definition": {"env": env} | {f"env.{k}": None for k in SCORE_SETTINGS},
        "curve": aggregate_curves(list(curves.values())) | {"metric": RETURN, "window": window},
        "seed_curves": curves,
    }


def _peer_algo(dirs: list[Path]) -> str:
    """SB3 names a run folder `{tb_log_name}_{n}` (`PPO_1`); CleanRL `{env}__{exp}__{seed}__{t}`."""
    name = dirs[0].name
    if "__" in name:
        return name.split("__")[1]
    return name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name


def side(
    home: Path, ref: str, label: str, metric: str = "return", score: str = "eval", window=20
) -> dict:
    """One side of a comparison — a run, a peer's logdir, or several of them across tasks
    joined with `+` — with its scores of kind `score`, summary, curve and fairness facts."""
    from backflip import references
    from backflip.curves import aggregate_task_curves

    tasks = []
    for part in side_parts(ref):
        if is_peer(part):
            tasks.append(_peer_task(part, metric, window))
        else:
            tasks.append(_backflip_task(home, part, metric, window))
    for t in tasks:  # a peer has no evaluation: it is always scored by its training returns
        t["score"] = score if t["kind"] == "backflip" else "train"
        t["finals"] = t["scores"][t["score"]]
    envs = [t["env"] for t in tasks]
    if len(set(envs)) < len(envs):
        raise UserError(f"side {label} ({ref}) has two runs on the same env: one run per task")
    first = tasks[0]
    out = {
        "label": label,
        "kind": first["kind"] if len({t["kind"] for t in tasks}) == 1 else "mixed",
        "score": first["score"] if len({t["score"] for t in tasks}) == 1 else "mixed",
        # per task: both kinds of score (which is which), never the curves (the side's has them)
        "tasks": [{k: v for k, v in t.items() if k not in ("seed_curves", "curve")} for t in tasks],
        "normalized": len(tasks) > 1,
    }
    if len(tasks) == 1:
        t = out["tasks"][0]
        return out | {
            **{k: t[k] for k in ("id", "dir", "algo", "env", "message", "status", "seeds")},
            **{k: t[k] for k in ("finals", "params", "steps_per_seed", "tuning")},
            "curve": first["curve"],
            "missing": [s for s, x in zip(t["seeds"], t["finals"], strict=True) if x is None],
            "summary": stats.summarize(t["finals"]),
            "step_budget": (t["steps_per_seed"] or 0) * len(t["seeds"]),
            "score_definition": t["score_definition"],
        }
    for t in tasks:
        why = references.why_not_normalizable(t["env"], t["score_definition"])
        if why:
            raise UserError(f"side {label} is across tasks, on normalized scores, but {why}")
        t["normalized_finals"] = references.normalize(t["env"], t["finals"])
    order = sorted(range(len(tasks)), key=lambda i: envs[i])
    tasks = [tasks[i] for i in order]
    out["tasks"] = [out["tasks"][i] for i in order]
    budgets = [t["steps_per_seed"] or max(c[2] for c in t["seed_curves"].values()) for t in tasks]
    curve = None
    if metric == "return" and all(t["seed_curves"] for t in tasks):
        per_task = [
            [(c[0], references.normalize(t["env"], c[1]), c[2]) for c in t["seed_curves"].values()]
            for t in tasks
        ]
        curve = aggregate_task_curves(per_task, budgets) | {"metric": "normalized return"}
    finals = [x for t in tasks for x in t["normalized_finals"]]
    return out | {
        "id": "+".join(t["id"] for t in tasks),
        "dir": None,
        "algo": "+".join(dict.fromkeys(t["algo"] for t in tasks)),
        "env": "+".join(t["env"] for t in tasks),
        "message": "; ".join(f"{t['env']}: {t['message']}" for t in tasks if t["message"]),
        "status": "finished" if all(t["status"] == "finished" for t in tasks) else "mixed",
        "seeds": [f"{t['env']}:{s}" for t in tasks for s in t["seeds"]],
        "finals": finals,
        "task_finals": {t["env"]: t["normalized_finals"] for t in tasks},
        "missing": [
            f"{t['env']}:{s}"
            for t in tasks
            for s, x in zip(t["seeds"], t["finals"], strict=True)
            if x is None
        ],
        "summary": stats.summarize_tasks([t["normalized_finals"] for t in tasks]),
        "params": tasks[0]["params"] if len({t["params"] for t in tasks}) == 1 else None,
        "steps_per_seed": tasks[0]["steps_per_seed"] if len(set(budgets)) == 1 else None,
        "step_budget": sum((t["steps_per_seed"] or 0) * len(t["seeds"]) for t in tasks),
        "tuning": None
        if any(t["tuning"] is None for t in tasks)
        else {k: sum(t["tuning"][k] for t in tasks) for k in ("runs", "seed_runs", "env_steps")},
        "score_definition": {"env": "+".join(t["env"] for t in tasks)},
        "curve": curve,
    }


def fairness_notes(sides: list[dict]) -> list[str]:
    """What makes this comparison unfair or weak, in plain words."""
    notes = []
    envs = {s["env"] for s in sides}
    if len(envs) > 1:
        notes.append(f"different envs ({', '.join(sorted(envs))}): scores are not comparable")
    single = [s for s in sides if not s["normalized"]]
    for key in SCORE_SETTINGS:
        values = {s["score_definition"][f"env.{key}"] for s in single} - {None}
        if len(envs) == 1 and len(values) > 1:
            each = ", ".join(f"{s['label']} {s['score_definition'][f'env.{key}']}" for s in single)
            notes.append(f"different env.{key} ({each}): scores are not comparable")
    for key, what in (("steps_per_seed", "step budgets"), ("params", "parameter counts")):
        values = {s[key] for s in sides if s[key] is not None}
        if len(values) > 1:
            each = ", ".join(f"{s['label']} {s[key]:,}" for s in sides if s[key] is not None)
            notes.append(f"unequal {what}: {each}")
    for s in sides:
        for t in s["tasks"]:
            if t["kind"] in PEERS:
                where = f"{s['label']} ({t['env']})" if s["normalized"] else s["label"]
                steps = ", ".join(f"{x:,}" for x in sorted(set(t["peer_steps"])))
                notes.append(
                    f"{where} is {PEERS[t['kind']]} logs: assumed on the registered {t['env']} "
                    f"(the logs record no wrappers), steps per seed {steps}; parameter count "
                    "and tuning unknown"
                )
    tuned = [s for s in sides if s["tuning"] is not None]
    tuning = [s["tuning"]["runs"] for s in tuned]
    if tuning and max(tuning) > 2 * min(tuning) + 2:
        each = ", ".join(f"{s['label']} {s['tuning']['runs']}" for s in tuned)
        notes.append(
            f"unequal tuning: earlier runs of the same algo/env: {each} — the more tuned side "
            "has had more chances to look good"
        )
    for s in sides:
        for t in s["tasks"]:
            early = [e for e in t.get("early", []) if t["score"] == "eval"]
            if early:
                where = f"{s['label']} ({t['env']})" if s["normalized"] else s["label"]
                each = ", ".join(
                    f"{e['seed']} ({e['status']}, last evaluated at step {e['eval_step'] or 0:,})"
                    for e in early
                )
                notes.append(
                    f"{where}: seeds {each} stopped before the budget of "
                    f"{t['steps_per_seed']:,} steps: scored by an earlier evaluation"
                )
        n = s["summary"].get("n", 0)
        if s["missing"]:
            what = "final evaluation" if s["score"] == "eval" else "training episodes"
            notes.append(
                f"{s['label']}: seeds {', '.join(map(str, s['missing']))} have no {what} "
                f"({s['status']}); compared on the {n} that do"
            )
        per = " per task" if s["normalized"] else ""
        if n == 1:
            notes.append(f"{s['label']} has 1 seed{per}: no interval (a quick look, not a result)")
        elif n < stats.MIN_TRUSTWORTHY_SEEDS:
            notes.append(
                f"{s['label']} has {n} seed(s){per}: fewer than {stats.MIN_TRUSTWORTHY_SEEDS}, "
                "intervals are not trustworthy"
            )
    return notes


def choose_score(refs: list[str], score: str) -> str:
    """`auto`: each seed's final greedy evaluation when every side is a backflip run, else the
    training-episode return for every side (a peer's logs have no evaluation)."""
    if score not in ("auto", *SCORE_KINDS):
        raise UserError(f"--score {score}: choose auto, eval or train")
    if score != "auto":
        return score
    peers = any(is_peer(p) for ref in refs for p in side_parts(ref))
    return "train" if peers else "eval"


def score_note(sides: list[dict], score: str, asked: str) -> str:
    """What is compared, in one sentence, and what is not."""
    peers = sorted({PEERS[t["kind"]] for s in sides for t in s["tasks"] if t["kind"] in PEERS})
    norm = any(s["normalized"] for s in sides)
    text = SCORE_KINDS[score]
    if norm:
        text += " across tasks, normalized per env: (R - R_random) / (R_ref - R_random)"
    if peers and score == "train":
        why = "chosen" if asked == "train" else "used for every side"
        text += (
            f" — {why} because {' and '.join(peers)} logs hold only training episodes; "
            "backflip's final greedy evaluations are not compared with them"
        )
    elif peers:
        text += (
            f"; {' and '.join(peers)} sides can only be scored by training episodes: "
            "pairs that mix the two kinds get no verdict"
        )
    return text


def plot_name(home: Path, refs: list[str]) -> str:
    """The default figure name: the first three sides' run ids (or logdir names)."""
    names = []
    for ref in refs[:3]:
        parts = []
        for p in side_parts(ref):
            if is_peer(p):
                parts.append(Path(p.rsplit("@", 1)[0]).name)
            else:
                parts.append(_run_part(home, p).name)
        names.append("+".join(parts))
    return "-".join(names)


def compare_runs(
    home: Path,
    refs: list[str],
    metric: str = "return",
    plot: str | Path | None = None,
    at_least: int = 2,
    score: str = "auto",
) -> dict:
    """The full comparison of 2+ sides: sides, pairwise statistics, verdicts, fairness, plot.

    A side is a run, a peer's TensorBoard logdir, or several joined with `+` across tasks.
    `metric` is the curve drawn for each side; every run must have logged it. `score`: eval,
    train or auto (`choose_score`). `at_least=1` lets the web UI show one run before a second
    is picked."""
    if len(refs) < at_least:
        raise UserError("compare needs at least two runs")
    if len(refs) > len(string.ascii_uppercase):
        raise UserError("compare at most 26 runs at once")
    asked = score
    score = choose_score(refs, score)
    parts = [p for ref in refs for p in side_parts(ref)]
    run_parts = [p for p in parts if not is_peer(p)]
    dirs = [_run_part(home, ref) for ref in run_parts]
    if len(set(dirs)) < len(dirs):
        raise UserError("the same run is given twice")
    if metric != "return":
        labelled = [
            (string.ascii_uppercase[i], _run_part(home, p))
            for i, ref in enumerate(refs)
            for p in side_parts(ref)
            if not is_peer(p)
        ]
        missing = [(label, d.name) for label, d in labelled if metric not in curve_metrics([d])]
        if missing:
            who = ", ".join(f"{label} ({run_id})" for label, run_id in missing)
            raise UserError(
                f"metric {metric!r} is not logged by {who}: its curves can't be compared "
                f"(metrics every run logged: {', '.join(curve_metrics(dirs)[:8])}, ...)"
            )
    # like with like: with training-episode scores, every return curve has SB3's window too
    window = TRAIN_WINDOW if score == "train" else 20
    sides = [
        side(home, ref, string.ascii_uppercase[i], metric, score, window)
        for i, ref in enumerate(refs)
    ]
    if len({s["id"] for s in sides}) < len(sides):
        raise UserError("the same run is given twice")
    pairs = []
    for i, a in enumerate(sides):
        for b in sides[i + 1 :]:
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
            if not a["summary"].get("n") or not b["summary"].get("n"):
                pairs.append(
                    {
                        "a": a["label"],
                        "b": b["label"],
                        "decided": False,
                        "verdict": _no_scores(a, b),
                    }
                )
                continue
            if a["normalized"]:
                ta, tb = a["task_finals"], b["task_finals"]
                clean = lambda xs: [x for x in xs if x is not None]  # noqa: E731
                cmp = stats.compare_tasks(
                    [clean(ta[e]) for e in sorted(ta)], [clean(tb[e]) for e in sorted(ta)]
                )
            else:
                sa = [x for x in a["finals"] if x is not None]
                sb = [x for x in b["finals"] if x is not None]
                cmp = stats.compare_pair(sa, sb)
            cmp.update(
                a=a["label"],
                b=b["label"],
                comparable=True,
                decided=stats.winner(cmp) is not None,
                verdict=stats.verdict(a["label"], b["label"], cmp),
            )
            pairs.append(cmp)
    profiles(sides)
    report = {
        "metric": SCORE_KINDS[score] + (", normalized" if sides[0]["normalized"] else ""),
        "score": score,
        "score_note": score_note(sides, score, asked),
        "normalized": all(s["normalized"] for s in sides),
        "curve_metric": metric,
        "sides": sides,
        "pairs": pairs,
        "verdicts": [p["verdict"] for p in pairs if p["a"] == "A"],
        "fairness": fairness_notes(sides),
    }
    if plot:
        from backflip.plots import comparison_figure

        curve_label = None
        if metric == "return":
            curve_label = f"training return (last {window} ep.)"
            if report["normalized"]:
                curve_label = "normalized training return"
        short = {"eval": "final eval return", "train": f"training return (last {window} ep.)"}
        score_label = "normalized " + short[score] if report["normalized"] else short[score]
        report["plot"] = str(comparison_figure(sides, plot, metric, curve_label, score_label))
    return report


def profiles(sides: list[dict]) -> None:
    """Each side's score distribution (`stats.performance_profile`) on one shared axis of
    thresholds, when every side's scores are of one kind on the same tasks (else None)."""
    comparable = all(incomparable(sides[0], s) is None for s in sides[1:])
    finals = [[x for x in s["finals"] if x is not None] for s in sides]
    if not comparable or not all(finals):
        for s in sides:
            s["profile"] = None
        return
    include = (0.0, 1.0) if sides[0]["normalized"] else ()
    taus = stats.profile_taus(finals, include=include)
    for s in sides:
        if s["normalized"]:
            tasks = [
                [x for x in s["task_finals"][e] if x is not None] for e in sorted(s["task_finals"])
            ]
        else:
            tasks = [[x for x in s["finals"] if x is not None]]
        s["profile"] = stats.performance_profile(tasks, taus)


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
    """The terminal report: table, what is compared, pairwise statistics, verdicts, fairness,
    plot path."""
    from rich.table import Table

    from backflip.summary import fmt

    sides = report["sides"]
    norm = any(s["normalized"] for s in sides)
    mixed = norm and not all(s["normalized"] for s in sides)
    table = Table(box=None, header_style="bold", pad_edge=False)
    cols = ["", "run", "algo", "env", "seeds", "steps/seed", "params", "tuning runs"]
    what = {"eval": "final return", "train": "training return"}[report.get("score", "eval")]
    head = f"normalized {what} IQM [95% CI]" if norm and not mixed else f"{what} IQM [95% CI]"
    cols += [head + (" (* normalized)" if mixed else ""), "mean", "min", "max"]
    if norm:
        cols.append("optimality gap [95% CI]")
    for c in cols:
        table.add_column(c, no_wrap=True)
    d = 2 if norm else 1  # normalized scores live around 0..1
    for s in sides:
        r = s["summary"]
        ci = stats.interval(r.get("ci_low"), r.get("ci_high"), r.get("n"), digits=d)
        iqm = "-" if not r.get("n") else f"{fmt(r['iqm'], d)} {ci}"
        if mixed and s["normalized"] and r.get("n"):
            iqm = "* " + iqm
        n_seeds = f"{r.get('n', 0)}/{len(s['seeds'])}"
        if s["normalized"]:
            n_seeds = f"{r.get('runs', 0)}/{len(s['seeds'])}"
        steps = s["steps_per_seed"]
        row = [
            s["label"],
            s["id"],
            s["algo"],
            s["env"],
            n_seeds,
            f"{steps:,}" if steps else "varies" if s["normalized"] else "?",
            f"{s['params']:,}" if s["params"] else "by env" if s["normalized"] else "?",
            str(s["tuning"]["runs"]) if s["tuning"] is not None else "?",
            iqm,
            fmt(r.get("mean"), d),
            fmt(r.get("min"), d),
            fmt(r.get("max"), d),
        ]
        if norm:
            og = "-"
            if r.get("n") and s["normalized"]:
                og = f"{fmt(r['og'], 2)} {stats.interval(*r['og_ci'], r['n'], digits=2)}"
            row.append(og)
        table.add_row(*row)
    lines = [table_text(table)]
    for s in sides:
        if s["message"]:
            lines.append(f"{s['label']}: {s['message']}")
    lines.append(f"score: {report.get('score_note') or report['metric']}")
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
            f"mean difference {fmt(w['diff'], d)}, Welch p = {stats._p(w['p'])}"
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
