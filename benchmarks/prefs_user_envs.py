"""Learning from preferences on envs no preset names: the calibration table of docs/preferences.md
("Your own env").

For each env, as a new user would run it: R_random (uniform random actions, 20 episodes), the
algorithm on the true reward (`backflip train`, R_true = the mean over its seeds), and
`backflip prefs train` with the settings derived from the env (`prefs/derive.py`), a synthetic
labeler, the same policy settings and agent steps. Each preference seed's greedy return (20
episodes, the env's own) is scored

    (R - R_random) / (R_true - R_random)

and the table gives the IQM with a 95% bootstrap interval over seeds, the horizon treatment the
run used, and the doctor's warnings and errors on the preference run. The target of the issue
is >= 0.8 on at least 10 of 12 envs, every row below it named by a doctor finding.

    python benchmarks/prefs_user_envs.py [--envs cartpole,acrobot,...] [--seeds 3] [--workers 2]
    python benchmarks/prefs_user_envs.py --labeler bpref-mistake --envs cartpole,acrobot
    python benchmarks/prefs_user_envs.py --variable --envs cartpole,acrobot   # prefs.horizon=variable
    python benchmarks/prefs_user_envs.py --table            # print the table from the results
    python benchmarks/prefs_user_envs.py --rediagnose       # today's doctor on the archived runs
    python benchmarks/prefs_user_envs.py --envs hopper,halfcheetah --labels 700   # the paper's
    python benchmarks/prefs_user_envs.py --envs hopper,halfcheetah --labels 1400  # Figure 1
    python benchmarks/prefs_user_envs.py --paper   # Figure 1's columns: true reward, 700, 1,400
    python benchmarks/prefs_user_envs.py --envs hopper --labels 700 --seed-start 3 --seeds 5 \
        --out more.json && python benchmarks/prefs_user_envs.py --join more.json  # 8 seeds

All runs of one invocation share one pool of `--workers` seed processes (longest first). Results
go to --out (JSON; an env already there is skipped unless --redo); runs are archived under
--home. MinAtar's envs need `pip install minatar` (the bench extra); they are registered by
benchmarks/user_envs.py, as a user's own module would (`--env user_envs:MinAtar/Breakout-v1`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# name: (env id, algorithm, agent steps, what kind of env it is, policy settings for both runs)
ENVS: dict[str, tuple[str, str, int, str, dict]] = {
    "cartpole": ("CartPole-v1", "ppo", 100_000, "classic control, ends at failure", {}),
    "acrobot": ("Acrobot-v1", "ppo", 100_000, "classic control, ends at success", {}),
    "frozenlake": (
        "FrozenLake-v1", "ppo", 100_000,
        "gridworld, Discrete observations, sparse reward, ends at success and failure", {},
    ),
    "cliffwalking": (
        "CliffWalking-v1", "ppo", 100_000,
        "gridworld, Discrete observations, ends at success, no time limit", {},
    ),
    "taxi": (
        "Taxi-v4", "ppo", 100_000,
        "gridworld, Discrete observations (500), ends at success (a delivery), time limit 200", {},
    ),
    "invpendulum": (
        "InvertedPendulum-v5", "ppo", 100_000, "MuJoCo, continuous, ends at failure", {},
    ),
    "invdoublependulum": (
        "InvertedDoublePendulum-v5", "ppo", 200_000, "MuJoCo, continuous, ends at failure", {},
    ),
    "hopper": ("Hopper-v5", "ppo", 300_000, "MuJoCo, continuous, ends at failure", {}),
    "halfcheetah": ("HalfCheetah-v5", "ppo", 300_000, "MuJoCo, continuous, no termination", {}),
    "swimmer": ("Swimmer-v5", "ppo", 200_000, "MuJoCo, continuous, no termination", {}),
    "reacher": ("Reacher-v5", "ppo", 100_000, "MuJoCo, continuous, no termination", {}),
    "pusher": ("Pusher-v5", "ppo", 100_000, "MuJoCo, continuous, no termination", {}),
    "breakout": (
        "user_envs:MinAtar/Breakout-v1", "ppo", 200_000,
        "MinAtar, 10x10x4 boolean frames channels last, ends at failure, no time limit",
        {"ent_coef": 0.01},
    ),
    "freeway": (
        "user_envs:MinAtar/Freeway-v1", "ppo", 200_000,
        "MinAtar, 10x10x7 boolean frames channels last, sparse reward, no time limit",
        {"ent_coef": 0.01},
    ),
}  # fmt: skip


def random_return(env_id: str, episodes: int = 20) -> float:
    from backflip.envs import make_vec
    from backflip.prefs.derive import look
    from backflip.seedrun import evaluate

    opts = None
    if look(env_id, None).time_limit is None:  # as the preference run will have it
        from backflip.config import EnvOptions
        from backflip.prefs.derive import DEFAULT_HORIZON

        opts = EnvOptions(max_episode_steps=DEFAULT_HORIZON)
    envs = make_vec(env_id, episodes, opts, evaluation=True)
    envs.action_space.seed(0)
    rets, _ = evaluate(lambda o: envs.action_space.sample(), envs, episodes, seed=500)
    return float(rets.mean())


def configs(name: str, args, home: Path):
    """(the true-reward config, the preference config, the preference run's launch notes)."""
    from backflip.cli import build_parser
    from backflip.commands.prefs import build
    from backflip.runconfig import resolve_on_env as resolve

    env_id, algo, steps, _, policy = ENVS[name]
    steps = args.steps or steps
    seeds = ["--seed-start", str(args.seed_start), "--seeds", str(args.seeds)]
    sets = [*(f"{k}={v}" for k, v in policy.items()), "eval_episodes=20", *args.set]
    argv = ["prefs", "train", algo, "--env", env_id, *seeds, "--steps", str(steps)]
    argv += ["--labeler", args.labeler]
    if args.labels:
        argv += ["--labels", str(args.labels)]
    if args.variable:
        sets.append("prefs.horizon=variable")
    argv += [x for kv in sets for x in ("--set", kv)]
    notes: list[str] = []
    pref = build(build_parser().parse_args(argv), home, notes)
    # the true-reward run: the same policy settings, env options (a time limit given to an env
    # without one) and steps
    plain_sets = {k: v for k, v in pref.flat().items() if not k.startswith("prefs.")}
    base = resolve(algo, pref.env_id, list(pref.seeds), steps)
    changed = {k: v for k, v in plain_sets.items() if base.flat().get(k) != v}
    if pref.prefs.horizon_steps and not pref.env.max_episode_steps:
        # an env without a time limit: the preference run's horizon (training only) is the
        # true-reward run's time limit, as the rows were measured when it was an env option
        changed["env.max_episode_steps"] = pref.prefs.horizon_steps
    true = resolve(algo, pref.env_id, list(pref.seeds), steps, set_values=changed)
    return true, pref, notes


def findings(run_dir: Path, again: bool = False) -> list[str]:
    """The doctor's warnings and errors on a preference run: those it stored at the end of the
    run, or (`again`) a new diagnosis by today's rules, stored in its place."""
    from backflip.doctor import diagnose_run_dir
    from backflip.doctor.findings import read_findings

    found = (
        [f.to_dict() for f in diagnose_run_dir(run_dir)]
        if again
        else (read_findings(run_dir) or {}).get("findings", [])
    )
    out = []
    for f in found:
        if f["severity"] in ("warning", "error") and f"{f['severity']} {f['rule']}" not in out:
            out.append(f"{f['severity']} {f['rule']}")
    return out


def per_seed(record: dict) -> list[float | None]:
    return [s.get("final_eval_return") for s in record["seeds"]]


def run_all(names: list[str], args, home: Path, results: dict) -> None:
    from backflip.launch import launch_runs
    from backflip.runs.archive import load_run

    todo = []
    for name in names:
        true, pref, notes = configs(name, args, home)
        done = done_true(results, true) or finished_in(home, true)
        todo.append((name, true, pref, notes, done, finished_in(home, pref)))
    # longest first: the pool stays full to the end
    todo.sort(key=lambda t: -t[2].steps * (3 if "MinAtar" in t[2].env_id else 1))
    cfgs, labels, notes, tags = [], [], [], []
    for name, true, pref, said, done, pref_done in todo:
        if pref_done is None:  # a finished run of a killed invocation is reused
            cfgs.append(pref)
            labels.append(f"{name} prefs")
            notes.append(said)
            tags.append(["prefs-user-envs", name, "prefs"])
        if done is None:  # the same true-reward run of another invocation is reused
            cfgs.append(true)
            labels.append(f"{name} true")
            notes.append([])
            tags.append(["prefs-user-envs", name, "true"])
    t0 = time.time()
    records = (
        launch_runs(
            cfgs,
            home,
            ["python", "benchmarks/prefs_user_envs.py", *sys.argv[1:]],
            messages=[f"prefs-user-envs: {label}" for label in labels],
            workers=args.workers,
            progress=not args.no_progress,
            tags=tags,
            labels=labels,
            notes=notes,
        )
        if cfgs
        else []
    )
    by_label = dict(zip(labels, records, strict=True))
    for name, _, pref, said, done, pref_done in todo:
        pref_rec = load_run(Path((pref_done or by_label[f"{name} prefs"])["dir"]))
        true_rec = load_run(Path((done or by_label[f"{name} true"])["dir"]))
        if pref_rec["status"] != "finished" or true_rec["status"] != "finished":
            print(f"{name}: not recorded (runs {pref_rec['status']}, {true_rec['status']})")
            continue
        env_id = pref.env_id
        r_random = random_return(env_id)
        true_rets = [r for r in per_seed(true_rec) if r is not None]
        r_true = float(np.mean(true_rets)) if true_rets else None
        pref_rets = per_seed(pref_rec)
        scores = [
            None if r is None or r_true is None or r_true == r_random
            else (r - r_random) / (r_true - r_random)
            for r in pref_rets
        ]  # fmt: skip
        results[key(name, args)] = {
            "env": env_id,
            "kind": ENVS[name][3],
            "algo": pref.algo,
            "steps": pref.steps,
            "labels": pref.prefs.labels,
            "labeler": pref.prefs.labeler,
            "horizon": pref.prefs.horizon,
            "seeds": list(pref.seeds),
            "R_random": r_random,
            "R_true": r_true,
            "true_returns": per_seed(true_rec),
            "pref_returns": pref_rets,
            "scores": scores,
            "true_run": true_rec["id"],
            "home": str(home.resolve()),
            "pref_run": pref_rec["id"],
            "pref_wall_s": [s.get("wall_s") for s in pref_rec["seeds"]],
            "true_wall_s": [s.get("wall_s") for s in true_rec["seeds"]],
            "pref_sps": [s.get("sps") for s in pref_rec["seeds"]],
            "true_sps": [s.get("sps") for s in true_rec["seeds"]],
            "doctor": findings(Path(pref_rec["dir"])),
            "notes": said,
            "code": code_version(pref_rec),
        }
    print(f"{len(todo)} envs in {(time.time() - t0) / 60:.1f} min", file=sys.stderr)


def join(results: dict, extra: dict) -> list[str]:
    """Rows of another invocation (`extra`: the same envs and settings, other seeds, e.g.
    `--seed-start 3 --seeds 5`) joined into the rows of `results` with the same key: seeds,
    returns and timings side by side, R_true the mean over every true-reward seed and every
    score computed again with it, the doctor's findings of both; the other invocation's runs
    are kept under "joined" (the doctor is read again there by --rediagnose). Returns the
    keys joined."""
    done = []
    for name, more in extra.items():
        row = results.get(name)
        if row is None or set(row["seeds"]) & set(more["seeds"]):
            continue
        for field in ("seeds", "true_returns", "pref_returns", "pref_wall_s", "true_wall_s"):
            row[field] = list(row[field]) + list(more[field])
        for field in ("pref_sps", "true_sps"):
            row[field] = list(row[field]) + list(more[field])
        true = [r for r in row["true_returns"] if r is not None]
        row["R_true"] = float(np.mean(true)) if true else None
        row["scores"] = [
            None if r is None or row["R_true"] is None or row["R_true"] == row["R_random"]
            else (r - row["R_random"]) / (row["R_true"] - row["R_random"])
            for r in row["pref_returns"]
        ]  # fmt: skip
        row["doctor"] = list(dict.fromkeys(row["doctor"] + more["doctor"]))
        part = {k: more[k] for k in ("home", "true_run", "pref_run", "seeds", "code")}
        row["joined"] = [*row.get("joined", []), part, *more.get("joined", [])]
        done.append(name)
    return done


def code_version(record: dict) -> str | None:
    """The commit the preference run ran (with "+dirty" for uncommitted changes)."""
    prov = record.get("provenance") or {}
    # "backflip_git": launched outside the checkout; "git": launched in it
    git = prov.get("backflip_git") or prov.get("git") or {}
    if not git.get("commit"):
        return None
    return git["commit"][:7] + ("+dirty" if git.get("dirty") else "")


def done_true(results: dict, true) -> dict | None:
    """A finished true-reward run with the same config in `results` (another labeler's or
    label budget's invocation), as {"dir": ...}, else None."""
    from backflip.runs.archive import load_run
    from backflip.runs.index import resolve_run

    for res in results.values():
        if res["env"] != true.env_id or res["steps"] != true.steps or res["seeds"] != true.seeds:
            continue
        try:
            record = load_run(resolve_run(Path(res["home"]), res["true_run"]))
        except Exception:  # noqa: BLE001 — moved or deleted: train it again
            continue
        if record["config"] == true.to_dict() and record["status"] == "finished":
            return {"dir": record["dir"]}
    return None


def finished_in(home: Path, config) -> dict | None:
    """A finished run in `home` with exactly this config, as {"dir": ...}, else None: an
    invocation that was killed part-way reuses what it had finished."""
    from backflip.config import TrainConfig
    from backflip.runs.archive import load_run, run_dirs

    def plain(c) -> str:  # read back through the config: keys added since take their defaults
        return json.dumps(
            TrainConfig.from_dict(c).to_dict() if isinstance(c, dict) else c.to_dict()
        )

    want = plain(config)
    for run_dir in sorted(run_dirs(home), reverse=True):
        try:
            record = load_run(run_dir)
            if record["status"] == "finished" and plain(record["config"]) == want:
                return {"dir": record["dir"]}
        except Exception:  # noqa: BLE001 — a damaged or older record is not reused
            continue
    return None


def key(name: str, args) -> str:
    """Results of other labelers, label budgets or horizons are kept beside each other."""
    suffix = "" if args.labeler == "synthetic" else f"/{args.labeler}"
    suffix += f"/labels{args.labels}" if args.labels else ""
    return f"{name}{suffix}{'/variable' if args.variable else ''}"


def cell(scores: list) -> tuple[str, float | None]:
    from backflip.stats import aggregate

    x = [s for s in scores if s is not None]
    if not x:
        return "–", None
    value, low, high = aggregate(x)["iqm"]
    if not np.isfinite(low):
        return f"{value:.2f}", value
    return f"{value:.2f} [{low:.2f}, {high:.2f}]", value


def table(results: dict) -> str:
    head = (
        "| env | what it is | algo, steps | labels | horizon | R_random | R_true | "
        "preference returns | normalized IQM [95% CI] | doctor (preference run) |"
    )
    lines = [head, "|" + "---|" * 10]
    met = total = 0
    for res in results.values():
        text, value = cell(res["scores"])
        total += 1
        met += value is not None and value >= 0.8
        rets = ", ".join("–" if r is None else f"{r:.1f}" for r in res["pref_returns"])
        r_true = "–" if res["R_true"] is None else f"{res['R_true']:.1f}"
        lines.append(
            f"| {res['env']} | {res['kind']} | {res['algo']} {res['steps']:,} | {res['labels']} "
            f"({res['labeler']}) | {res['horizon']} | {res['R_random']:.1f} | "
            f"{r_true} | {rets} | {text} | "
            f"{'; '.join(res['doctor']) or 'none'} |"
        )
    lines.append("")
    lines.append(f"{met} of {total} rows at >= 0.8")
    return "\n".join(lines)


def paper_table(results: dict) -> str:
    """Christiano et al. (2017), Figure 1's columns at CPU scale: RL on the true reward, 700 and
    1,400 synthetic labels, as greedy returns (IQM [95% CI] over seeds) and normalized."""
    from backflip.stats import aggregate

    lines = [
        "| env | steps | RL on the true reward | 700 labels | 1,400 labels | normalized (700) | "
        "normalized (1,400) |",
        "|" + "---|" * 7,
    ]
    for name in ("halfcheetah", "hopper", "walker2d", "swimmer"):
        cells = {n: results.get(f"{name}/labels{n}") for n in (700, 1400)}
        base = next((c for c in cells.values() if c), None)
        if base is None:
            continue

        def ret(values):
            x = [v for v in values if v is not None]
            if not x:
                return "–"
            value, low, high = aggregate(x)["iqm"]
            return f"{value:,.0f} [{low:,.0f}, {high:,.0f}]"

        row = [base["env"], f"{base['steps']:,}", ret(base["true_returns"])]
        row += [ret(c["pref_returns"]) if c else "–" for c in cells.values()]
        row += [cell(c["scores"])[0] if c else "–" for c in cells.values()]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="agent steps (default: the table's)")
    ap.add_argument("--labeler", default="synthetic", help="synthetic (the oracle), bpref-NAME")
    ap.add_argument("--labels", type=int, default=None, help="default: derived from the env")
    ap.add_argument("--variable", action="store_true", help="prefs.horizon=variable")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--home", default="runs")
    ap.add_argument("--out", default=str(HERE / "prefs_user_envs_results.json"))
    ap.add_argument("--redo", action="store_true")
    ap.add_argument("--table", action="store_true", help="only print the table of --out")
    ap.add_argument(
        "--rediagnose",
        action="store_true",
        help="run today's doctor again on the archived preference runs of --out, then the table",
    )
    ap.add_argument("--paper", action="store_true", help="print Figure 1's table of --out")
    ap.add_argument(
        "--join",
        metavar="FILE",
        help="join the rows of FILE (the same envs, other seeds) into those of --out",
    )
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))  # user_envs.py, as a user's own module
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    if args.paper:
        print(paper_table(results))
        return
    if args.join:
        joined = join(results, json.loads(Path(args.join).read_text()))
        print(f"joined: {', '.join(joined) or 'nothing'}", file=sys.stderr)
        from backflip.jsonout import dumps

        out.write_text(dumps(results, indent=1) + "\n")
    elif args.rediagnose:
        for name, res in results.items():
            found = []
            for part in [res, *res.get("joined", [])]:
                run_dir = Path(part["home"]) / part["pref_run"]
                if not run_dir.is_dir():
                    print(f"{name}: {run_dir} is gone; its doctor column is kept", file=sys.stderr)
                    break
                found += findings(run_dir, again=True)
            else:
                res["doctor"] = list(dict.fromkeys(found))
        from backflip.jsonout import dumps

        out.write_text(dumps(results, indent=1) + "\n")
    elif not args.table:
        names = [n for n in args.envs.split(",") if args.redo or key(n, args) not in results]
        unknown = [n for n in names if n not in ENVS]
        if unknown:
            raise SystemExit(f"unknown envs {unknown}; choose from {', '.join(ENVS)}")
        if names:
            home = Path(args.home)
            home.mkdir(parents=True, exist_ok=True)
            run_all(names, args, home, results)
            from backflip.jsonout import dumps

            out.write_text(dumps(results, indent=1) + "\n")
    print(table({k: v for k, v in results.items() if k.split("/")[0] in args.envs.split(",")}))


if __name__ == "__main__":
    main()
