"""Hyperparameter studies that respect seeds: `backflip tune ALGO --env ENV --trials N` on Optuna.

Tuners fooled by seed noise pick lucky configurations (imitation's maintainers hand-rolled a
90%-UCB objective for that reason). Here every trial is an archived run of several seeds — the
same seeds for every trial (common random numbers), launched through `launch.launch_runs` and
tagged `tune`, `tune:<study>`, `trial:<number>` — and scored so that luck does not pay:

- **objective**: the lower bound of the 95% stratified-bootstrap interval of the IQM, over the
  trial's seeds, of each seed's final greedy evaluation (`stats.summarize`: `ci_low`). A seed
  without a final evaluation (it failed, or diverged) counts as the lowest final evaluation of
  the trial's other seeds, so a configuration that crashes seeds is not rewarded for it; a trial
  with no evaluation at all fails.
- **pruning on evaluations**: each trial evaluates greedily `--evals E` times along its budget
  (`eval_every` = steps / (E + 1)); once every seed has reached the k-th evaluation, the IQM of
  the seeds' k-th evaluations is reported to Optuna at step k × eval_every (with its 95%
  interval kept in the trial's user attributes) and `IntervalPruner` decides. It prunes only when
  the *top* of the trial's interval is below the median IQM that completed trials had at the same
  point, never at the first evaluation and never before `n_startup_trials` trials completed: a
  trial is stopped when even its optimistic reading loses, not when a few unlucky seeds dip. The
  pruned run's seeds stop at their next iteration boundary (as Ctrl-C does: `interrupted`).
- **the search space** per algorithm is `SPACES` (docs/experiments.md lists it), overridable with
  `--space FILE` (YAML or TOML): `key: {low, high[, log][, step]}` or `key: {choices: [...]}`.
  Trial 0 of every study is the default configuration (with `--set`s) whenever the defaults lie in
  the space, so the study always measures the baseline on the same seeds.
- **storage**: Optuna's JournalStorage, file backend, at `<archive>/tune/<study>/journal.log`.
  `backflip tune` started again with the same study name — in another process, or on another
  machine that sees the archive — joins the study; `--trials N` is the study's total (a lock file
  beside the journal makes counting and asking one step, so N is never exceeded). A worker whose
  settings differ from the study's (algo, env, steps, seeds, --set, space, evaluations) is refused.
- **the result**: when the study has its N trials and none is running, its best configuration is
  written as a plan (`<archive>/tune/<study>/plan.yaml`: the defaults against the tuned
  configuration, `--plan-seeds` seeds) and frozen with `backflip plan create`'s preregistration:
  fresh seeds no archived run on the env has used — so none of the tuning seeds — and the
  comparison fixed before anything runs. `backflip plan run` then answers whether the tuned
  configuration beats the defaults, with intervals.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import socket
import statistics
import time
import tomllib
import typing
from pathlib import Path

import yaml
from rich.table import Table

from backflip import stats
from backflip.algos import get_algo
from backflip.config import format_value, parse_value
from backflip.envs import check_supported
from backflip.errors import UserError, did_you_mean
from backflip.experiments import plan as plans
from backflip.experiments.compare import table_text
from backflip.runconfig import resolve_on_env
from backflip.runs.archive import (
    now_iso,
    pid_alive,
    read_record,
    run_lock,
    write_json,
    write_record,
)
from backflip.runs.layout import METRICS, seed_dir
from backflip.summary import fmt

TUNE_DIR = "tune"  # <archive>/tune/<study>/: journal.log, plan.yaml, summary.json
JOURNAL = "journal.log"
EVAL_METRIC = "eval/return_mean"
POLL_S = 1.0  # how often a running trial's evaluations are read
DEFAULT_EVALS = 4
DEFAULT_PLAN_SEEDS = 10

# The settings each algorithm's study searches, around rl-zoo's ranges. Every default lies inside,
# so trial 0 can be the default configuration.
SPACES: dict[str, dict[str, dict]] = {
    "ppo": {
        "lr": {"low": 1e-4, "high": 1e-2, "log": True},
        "num_steps": {"choices": [32, 64, 128, 256]},
        "epochs": {"low": 3, "high": 20},
        "gamma": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
        "gae_lambda": {"low": 0.8, "high": 0.99},
        "clip": {"choices": [0.1, 0.2, 0.3]},
        "ent_coef": {"choices": [0.0, 1e-3, 1e-2]},
    },
    "a2c": {
        "lr": {"low": 1e-4, "high": 1e-2, "log": True},
        "num_steps": {"choices": [5, 8, 16, 32]},
        "gamma": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
        "gae_lambda": {"low": 0.8, "high": 1.0},
        "ent_coef": {"choices": [0.0, 1e-3, 1e-2]},
        "vf_coef": {"low": 0.25, "high": 1.0},
    },
    "vpg": {
        "pi_lr": {"low": 3e-4, "high": 1e-2, "log": True},
        "vf_lr": {"low": 1e-4, "high": 1e-2, "log": True},
        "num_steps": {"choices": [64, 128, 256]},
        "gamma": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
        "gae_lambda": {"low": 0.8, "high": 1.0},
    },
    "cem": {
        "population": {"choices": [16, 32, 64, 128]},
        "elite_frac": {"low": 0.1, "high": 0.5},
        "init_std": {"low": 0.1, "high": 2.0, "log": True},
        "extra_std": {"low": 0.01, "high": 0.5, "log": True},
    },
    "dqn": {
        "lr": {"low": 1e-4, "high": 1e-2, "log": True},
        "batch_size": {"choices": [32, 64, 128, 256]},
        "gamma": {"choices": [0.95, 0.98, 0.99, 0.995]},
        "n_step": {"low": 1, "high": 5},
        "target_every": {"choices": [64, 128, 512, 1000]},
        "eps_fraction": {"low": 0.05, "high": 0.3},
        "eps_end": {"low": 0.01, "high": 0.1},
    },
    **{
        algo: {
            "lr": {"low": 1e-4, "high": 3e-3, "log": True},
            "batch_size": {"choices": [64, 128, 256, 512]},
            "gamma": {"choices": [0.95, 0.98, 0.99, 0.995]},
            "tau": {"choices": [0.005, 0.01, 0.02]},
            "action_noise": {"low": 0.05, "high": 0.3},
        }
        for algo in ("td3", "ddpg")
    },
    "sac": {
        "lr": {"low": 1e-4, "high": 3e-3, "log": True},
        "batch_size": {"choices": [64, 128, 256, 512]},
        "gamma": {"choices": [0.95, 0.98, 0.99, 0.995]},
        "tau": {"choices": [0.005, 0.01, 0.02]},
        "learning_starts": {"choices": [100, 1000, 5000]},
    },
}


def _optuna():
    try:
        import optuna  # an optional extra (backflip[tune]): only for `backflip tune`
    except ImportError:
        raise UserError("backflip tune needs Optuna: pip install 'backflip[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # backflip prints its own lines
    return optuna


# --- the search space -----------------------------------------------------------------------------


def load_space(path: str | Path) -> dict:
    """A search space file (YAML or TOML): {setting: {low, high[, log][, step]} | {choices}}."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"search space file not found: {path}")
    try:
        text = path.read_text()
        space = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 — yaml and toml raise many types; all mean "bad file"
        raise UserError(f"cannot parse search space {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(space, dict) or not space:
        raise UserError(f"search space {path}: must map setting names to ranges or choices")
    return space


def check_space(space: dict, algo: str, base_flat: dict, types: dict, where: str) -> dict:
    """Validate a space against the algorithm's settings; {key: normalized spec}."""
    out = {}
    for key, spec in space.items():
        if key not in base_flat:
            raise UserError(
                f"{where}: unknown setting {key!r} for {algo}{did_you_mean(key, base_flat)}"
            )
        tp = types.get(key)
        if not isinstance(spec, dict):
            raise UserError(f"{where}: {key} must be {{low, high}} or {{choices: [...]}}")
        if "choices" in spec:
            choices = spec["choices"]
            if set(spec) != {"choices"} or not isinstance(choices, list) or not choices:
                raise UserError(f"{where}: {key}: `choices` must be a non-empty list, alone")
            # a tuple setting's choices are given as lists or as "64,64"; Optuna keeps scalars
            out[key] = {
                "choices": [format_value(tuple(c)) if isinstance(c, list) else c for c in choices]
            }
            for c in out[key]["choices"]:
                _typed(c, tp, key, where)
            continue
        if not {"low", "high"} <= set(spec) or set(spec) - {"low", "high", "log", "step"}:
            raise UserError(f"{where}: {key} needs low and high (and optionally log, step)")
        if tp not in (int, float):
            raise UserError(f"{where}: {key} is not a number: give its `choices`")
        low, high = (_typed(spec[k], tp, key, where) for k in ("low", "high"))
        if not low < high:
            raise UserError(f"{where}: {key}: low must be below high")
        if spec.get("log") and low <= 0:
            raise UserError(f"{where}: {key}: a log range needs low > 0")
        out[key] = {"low": low, "high": high, "log": bool(spec.get("log", False)), "int": tp is int}
        if "step" in spec:
            out[key]["step"] = _typed(spec["step"], tp, key, where)
    return out


def _typed(value, tp, key: str, where: str):
    try:
        return parse_value(value if isinstance(value, str) else format_value(value), tp, key)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def _setting_types(algo: str) -> dict:
    from backflip.config import SECTIONS, RunOptions

    spec = get_algo(algo)
    hints = {**typing.get_type_hints(RunOptions), **typing.get_type_hints(spec.config)}
    for section, cls in SECTIONS.items():
        hints.update({f"{section}.{k}": v for k, v in typing.get_type_hints(cls).items()})
    return hints


def distributions(space: dict) -> dict:
    optuna = _optuna()
    d = optuna.distributions
    out = {}
    for key, spec in space.items():
        if "choices" in spec:
            out[key] = d.CategoricalDistribution(spec["choices"])
        elif spec["int"]:
            out[key] = d.IntDistribution(
                spec["low"], spec["high"], log=spec["log"], step=spec.get("step", 1)
            )
        else:
            out[key] = d.FloatDistribution(
                spec["low"], spec["high"], log=spec["log"], step=spec.get("step")
            )
    return out


def default_params(space: dict, base_flat: dict) -> dict | None:
    """The default configuration as a trial's parameters, or None when a default lies outside
    the space (then there is no default trial)."""
    params = {}
    for key, dist in distributions(space).items():
        value = base_flat[key]
        value = format_value(value) if isinstance(value, tuple) else value
        try:
            if not dist._contains(dist.to_internal_repr(value)):
                return None
        except (ValueError, TypeError):
            return None
        params[key] = value
    return params


def overrides(params: dict, types: dict) -> dict:
    """A trial's parameters as settings (tuple choices back from "64,64")."""
    return {
        k: parse_value(v, types.get(k), k) if isinstance(v, str) else v for k, v in params.items()
    }


# --- the objective and the pruner -----------------------------------------------------------------


def objective(scores: list) -> tuple[float | None, dict]:
    """(the lower bound of the IQM's 95% CI over seeds, the summary); a seed without a score
    counts as the trial's lowest score; (None, {}) when no seed has one."""
    present = [s for s in scores if s is not None and math.isfinite(s)]
    if not present:
        return None, {"n": 0}
    filled = [s if s is not None and math.isfinite(s) else min(present) for s in scores]
    summary = stats.summarize(filled)
    return summary["ci_low"], summary


def make_pruner(n_startup_trials: int = 3, n_warmup_evals: int = 1):
    """`IntervalPruner` (below), an Optuna pruner."""
    optuna = _optuna()

    class IntervalPruner(optuna.pruners.BasePruner):
        """Prune a trial at an evaluation point when the top of its IQM's 95% interval over
        seeds (`ci_high` user attribute) is below the median IQM of the completed trials at the
        same point; not at the first `n_warmup_evals` evaluations, nor before
        `n_startup_trials` trials have completed."""

        def prune(self, study, trial) -> bool:
            step = trial.last_step
            if step is None or len(trial.intermediate_values) <= n_warmup_evals:
                return False
            done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            others = [t.intermediate_values[step] for t in done if step in t.intermediate_values]
            if len(others) < n_startup_trials:
                return False
            high = trial.user_attrs.get("ci_high", {}).get(str(step))
            if high is None:  # no interval (one seed): its value
                high = trial.intermediate_values[step]
            return high < statistics.median(others)

    return IntervalPruner()


class _Evaluations:
    """The periodic evaluations a running seed has written to its metrics.csv so far, read
    incrementally (only new bytes each time)."""

    def __init__(self, path: Path, budget: int):
        self.path, self.budget = path, budget
        self.offset, self.rest = 0, ""
        self.values: list[float] = []

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        lines = (self.rest + data.decode("utf-8", "replace")).split("\n")
        self.rest = lines.pop()
        for line in lines:
            rec = line.split(",")
            if len(rec) == 4 and rec[2] == EVAL_METRIC:
                try:
                    step, value = int(rec[0]), float(rec[3])
                except ValueError:
                    continue
                if step < self.budget:  # the final evaluation is the objective, not a report
                    self.values.append(value)


class TrialMonitor:
    """`should_stop` for the trial's launch: reports each evaluation point's IQM over seeds to
    Optuna as soon as every seed has reached it, and asks the pruner."""

    def __init__(self, trial, cfg, evals: int, prune: bool):
        self.trial, self.evals, self.prune = trial, evals, prune
        self.every = cfg.run.eval_every
        self.readers: list[_Evaluations] = []
        self.reported = 0
        self.pruned_at: int | None = None
        self.last_poll = 0.0
        self.ci_high: dict[str, float | None] = {}
        self.budget = cfg.steps

    def attach(self, run_dir: Path, seeds: list[int]) -> None:
        self.readers = [_Evaluations(seed_dir(run_dir, s) / METRICS, self.budget) for s in seeds]

    def __call__(self, final: bool = False) -> bool:
        if self.pruned_at is not None:
            return True
        if not self.readers or (not final and time.monotonic() - self.last_poll < POLL_S):
            return False
        self.last_poll = time.monotonic()
        for r in self.readers:
            r.poll()
        while self.reported < min(self.evals, *(len(r.values) for r in self.readers)):
            k = self.reported
            values = [r.values[k] for r in self.readers]
            agg = stats.aggregate(values, reps=2_000)["iqm"]
            step = (k + 1) * self.every
            self.ci_high[str(step)] = agg[2] if math.isfinite(agg[2]) else None
            self.trial.set_user_attr("ci_high", self.ci_high)
            self.trial.report(agg[0], step)
            self.reported += 1
            if self.prune and not final and self.trial.should_prune():
                self.pruned_at = step
                return True
        return False


# --- the study ------------------------------------------------------------------------------------


def study_dir(home: Path, name: str) -> Path:
    return home / TUNE_DIR / name


def default_name(algo: str, env: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{algo}-{env}").strip("-")


def spec_of(algo, env, steps, seeds, sets, space, evals) -> dict:
    """What every worker of a study must agree on."""
    spec = {
        "algo": algo,
        "env": env,
        "steps": steps,
        "seeds": list(seeds),
        "set": {k: str(v) for k, v in sorted(sets.items())},
        "space": space,
        "evals": evals,
        "objective": "iqm_ci_low",
    }
    spec["hash"] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return spec


def open_study(home: Path, name: str, spec: dict, first_params: dict | None):
    """Create or join the study (under the lock); refuse a worker whose settings differ."""
    optuna = _optuna()
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    folder = study_dir(home, name)
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / JOURNAL)
    storage = JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    lock = JournalFileOpenLock(str(folder / "ask"))
    sampler = optuna.samplers.TPESampler(n_startup_trials=5, multivariate=True, constant_liar=True)
    lock.acquire()
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            direction="maximize",
            sampler=sampler,
            pruner=make_pruner(),
            load_if_exists=True,
        )
        stored = study.user_attrs.get("spec")
        if stored is None:
            study.set_user_attr("spec", spec)
            study.set_user_attr("created", now_iso())
            if first_params is not None:
                study.enqueue_trial(first_params, user_attrs={"default": True})
        elif stored["hash"] != spec["hash"]:
            diff = [k for k in spec if k != "hash" and stored.get(k) != spec[k]]
            raise UserError(
                f"study {name} was created with other settings ({', '.join(diff)} differ: "
                + "; ".join(f"{k}: {stored.get(k)!r}" for k in diff)
                + "): join it with the same ones, or name a new study with --study"
            )
    finally:
        lock.release()
    return study, lock


def reap(study, say) -> None:
    """Fail the running trials whose worker died on this host (kill -9, a crash), so the study
    can complete. A dead worker on another machine cannot be seen from here: its trial stays
    running until it is failed by hand (optuna's `study.tell(number, state=FAIL)`)."""
    optuna = _optuna()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker") or {}
        if worker.get("host") == socket.gethostname() and not pid_alive(worker.get("pid")):
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            say(f"trial {t.number}: failed: its worker (pid {worker.get('pid')}) died")


def counts(study) -> dict:
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name.lower()] = out.get(t.state.name.lower(), 0) + 1
    return out


def eta_text(study, total: int) -> str:
    """How far the study is, and when it should end: the mean duration of its finished trials
    times the trials left, shared among the trials running now (one per worker)."""
    trials = study.get_trials(deepcopy=False)
    c = counts(study)
    ended = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in trials
        if t.datetime_complete and t.datetime_start
    ]
    left = max(0, total - len(trials)) + c.get("running", 0)
    parts = ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
    text = f"{len(trials)}/{total} trials ({parts or 'none yet'})"
    if ended and left:
        workers = max(1, c.get("running", 0))
        eta = statistics.fmean(ended) * left / workers
        text += f"; ETA {_duration(eta)} (mean trial {_duration(statistics.fmean(ended))})"
    return text


def _duration(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def run_worker(
    home: Path,
    algo: str,
    env: str,
    trials: int,
    seeds: list[int],
    steps: int | None,
    sets: dict,
    name: str | None = None,
    space_path: str | None = None,
    evals: int = DEFAULT_EVALS,
    prune: bool = True,
    plan_seeds: int = DEFAULT_PLAN_SEEDS,
    workers: int | None = None,
    backend: str = "local",
    address=None,
    progress: bool = True,
    argv: list[str] | None = None,
    say=print,
) -> dict:
    """Join (or create) the study and run trials until it has `trials`; its summary."""
    optuna = _optuna()
    if trials < 1:
        raise UserError("--trials must be at least 1")
    if len(seeds) < 2:
        raise UserError("backflip tune needs at least 2 seeds per trial (an interval needs two)")
    if evals < 0:
        raise UserError("--evals must be 0 or more")
    if plan_seeds < 2:
        raise UserError("--plan-seeds must be at least 2")
    base = resolve_on_env(algo, env, seeds, steps, None, sets)
    check_supported(get_algo(algo), base.env_id, base.env)
    base_flat, types = base.flat(), _setting_types(algo)
    if space_path:
        raw, where = load_space(space_path), f"search space {space_path}"
    elif algo in SPACES:
        raw, where = SPACES[algo], f"{algo}'s search space"
    else:
        raise UserError(f"{algo} has no search space: give one with --space FILE")
    space = check_space(raw, algo, base_flat, types, where)
    fixed = set(space) & set(sets)
    if fixed:
        raise UserError(f"--set {', '.join(sorted(fixed))}: searched by the study, not fixed")
    name = name or default_name(algo, env)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise UserError(f"--study {name!r}: letters, digits, _ . - only")
    every = base.steps // (evals + 1) if evals else 0
    if evals and every < 1:
        raise UserError(f"--evals {evals}: more evaluations than steps")
    spec = spec_of(algo, env, base.steps, seeds, sets, space, evals)
    study, lock = open_study(home, name, spec, default_params(space, base_flat))
    argv = list(argv or ["backflip", "tune", algo, "--env", env])
    say(
        f"tune {name}: {algo} on {env}, {len(seeds)} seeds × {base.steps:,} steps per trial; "
        f"study at {study_dir(home, name) / JOURNAL}"
    )
    job = TrialJob(
        home, name, algo, env, base.steps, seeds, sets, types, every, evals, prune,
        workers or len(seeds), backend, address, progress, argv, say,
    )  # fmt: skip
    ran, stopped = [], False
    while True:
        lock.acquire()
        try:
            reap(study, say)
            n = len(study.get_trials(deepcopy=False))
            trial = study.ask(distributions(space)) if n < trials else None
            if trial is not None:
                trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid()})
        finally:
            lock.release()
        if trial is None:
            break
        say(f"trial {trial.number}: {_params_text(trial.params)} — study {eta_text(study, trials)}")
        try:
            status = job.run(study, trial)
        except BaseException:  # this worker stops (a second Ctrl-C, a bug): its trial ends too
            with contextlib.suppress(Exception):
                trial.set_user_attr("error", "its worker stopped")
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        ran.append(trial.number)
        if status == "interrupted":
            stopped = True
            break
    summary = summarize(home, study, name, trials)
    summary["ran_here"] = ran
    summary["stopped"] = stopped
    if not stopped and summary["complete"]:
        summary["plan"] = preregister(home, study, name, spec, plan_seeds, types)
    write_json(study_dir(home, name) / "summary.json", summary)
    return summary


@dataclasses.dataclass
class TrialJob:
    """What every trial of this worker shares: the study's settings and where seeds run."""

    home: Path
    name: str
    algo: str
    env: str
    steps: int
    seeds: list[int]
    sets: dict
    types: dict
    every: int  # eval_every, 0: no evaluations along the way
    evals: int
    prune: bool
    workers: int
    backend: str
    address: typing.Any
    progress: bool
    argv: list[str]
    say: typing.Callable[[str], None]

    def run(self, study, trial) -> str:
        """One trial: its run, its reports, its outcome told to the study; the run's status."""
        return _run_trial(self, study, trial)


def _run_trial(job: TrialJob, study, trial) -> str:
    from backflip.launch import launch_runs  # torch and the doctor only when trials run

    State = _optuna().trial.TrialState
    home, name, algo, env, seeds, types = (
        job.home,
        job.name,
        job.algo,
        job.env,
        job.seeds,
        job.types,
    )
    every, evals, prune, say = job.every, job.evals, job.prune, job.say
    params = overrides(trial.params, types)
    settings = {**job.sets, **params}
    if every:
        settings["eval_every"] = every
    try:
        cfg = resolve_on_env(algo, env, seeds, job.steps, None, settings)
    except UserError as e:  # a combination the config refuses (a minibatch above the rollout)
        trial.set_user_attr("error", str(e))
        study.tell(trial, state=State.FAIL)
        say(f"trial {trial.number}: not run: {e}")
        return "invalid"
    monitor = TrialMonitor(trial, cfg, evals, prune)
    label = f"trial {trial.number}"

    def created(run_dir):
        trial.set_user_attr("run", run_dir.name)
        monitor.attach(run_dir, seeds)

    record = launch_runs(
        [cfg],
        home,
        job.argv,
        messages=[f"tune {name}: trial {trial.number} ({_params_text(trial.params)})"],
        workers=job.workers,
        progress=job.progress,
        tags=[["tune", f"tune:{name}", f"trial:{trial.number}"]],
        labels=[label],
        backend=job.backend,
        address=job.address,
        on_created=created,
        should_stop=monitor,
    )[0]
    if monitor.pruned_at is None:  # evaluations written after the last poll are reported too
        monitor(final=True)
    scores = [s.get("final_eval_return") for s in record["seeds"]]
    trial.set_user_attr("scores", scores)
    if monitor.pruned_at is not None:
        _mark_run(Path(record["dir"]), name, trial.number, pruned_at=monitor.pruned_at)
        study.tell(trial, state=State.PRUNED)
        say(f"{label}: pruned at step {monitor.pruned_at:,} ({record['id']})")
        return "pruned"
    _mark_run(Path(record["dir"]), name, trial.number)
    if record["status"] == "interrupted":
        trial.set_user_attr("error", "interrupted")
        study.tell(trial, state=State.FAIL)
        say(f"{label}: interrupted ({record['id']}); the study stops here")
        return "interrupted"
    value, summary = objective(scores)
    trial.set_user_attr("summary", summary)
    if value is None or not math.isfinite(value):
        trial.set_user_attr("error", f"no seed has a final evaluation (run {record['status']})")
        study.tell(trial, state=State.FAIL)
        say(f"{label}: failed: no seed has a final evaluation ({record['id']})")
        return record["status"]
    study.tell(trial, value)
    say(
        f"{label}: objective {fmt(value)} = low end of IQM {fmt(summary['iqm'])} "
        f"{stats.interval(summary['ci_low'], summary['ci_high'], summary['n'])} ({record['id']})"
    )
    return record["status"]


def _mark_run(run_dir: Path, name: str, number: int, pruned_at: int | None = None) -> None:
    """The run's place in its study, in run.json (`tune`): a pruned run says so."""
    with run_lock(run_dir):
        record = read_record(run_dir)
        record["tune"] = {"study": name, "trial": number, "pruned_at": pruned_at}
        write_record(run_dir, record)


def _params_text(params: dict) -> str:
    return " ".join(f"{k}={_plain_text(v)}" for k, v in params.items())


# --- the outcome ----------------------------------------------------------------------------------


def summarize(home: Path, study, name: str, total: int) -> dict:
    rows = []
    for t in study.get_trials(deepcopy=False):
        s = t.user_attrs.get("summary") or {}
        rows.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                # a pruned trial's value in Optuna is its last report, not an objective
                "objective": t.value if t.state.name == "COMPLETE" else None,
                "iqm": s.get("iqm"),
                "ci": [s.get("ci_low"), s.get("ci_high")],
                "n": s.get("n"),
                "params": dict(t.params),
                "default": bool(t.user_attrs.get("default")),
                "run": t.user_attrs.get("run"),
                "scores": t.user_attrs.get("scores"),
                "error": t.user_attrs.get("error"),
                "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
            }
        )
    c = counts(study)
    complete = bool(rows) and len(rows) >= total and not c.get("running") and not c.get("waiting")
    done = [r for r in rows if r["state"] == "complete"]
    best = max(done, key=lambda r: r["objective"]) if done else None
    default = next((r for r in rows if r["default"]), None)
    return {
        "study": name,
        "spec": study.user_attrs.get("spec"),
        "journal": str(study_dir(home, name) / JOURNAL),
        "trials": rows,
        "counts": c,
        "total": total,
        "complete": complete,
        "best": best,
        "default": default,
    }


def preregister(home: Path, study, name: str, spec: dict, seeds: int, types: dict) -> dict:
    """Write the best tuned configuration (the best completed trial that is not the default) as
    a plan against the defaults, and freeze it on fresh seeds. When the default trial scored
    highest on the tuning seeds, the plan still asks whether the tuner's best alternative beats
    it on fresh seeds, and says so."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    tuned_trials = [t for t in done if not t.user_attrs.get("default")]
    if not tuned_trials:
        return {"note": "no tuned trial completed: nothing to preregister"}
    best = max(tuned_trials, key=lambda t: t.value)
    default = next((t for t in done if t.user_attrs.get("default")), None)
    default_best = default is not None and default.value >= best.value
    sets = {k: _plain(v) for k, v in spec["set"].items()}
    tuned = {**sets, **{k: _plain(v) for k, v in overrides(best.params, types).items()}}
    changed = ", ".join(f"{k}={_plain_text(v)}" for k, v in best.params.items())
    plan = {
        "name": f"tune-{name}",
        "question": (
            f"Does the configuration study {name} chose for {spec['algo']} on {spec['env']} "
            f"(trial {best.number}: {changed}) beat the default configuration at "
            f"{spec['steps']:,} steps on fresh seeds?"
            + (
                f" (On the tuning seeds the default, trial {default.number}, scored highest; "
                f"this is the best tuned alternative.)"
                if default_best
                else ""
            )
        ),
        "env": spec["env"],
        "steps": spec["steps"],
        "seeds": seeds,
        "metric": "final_eval_return",
        "configs": {
            "default": {"algo": spec["algo"], **({"set": sets} if sets else {})},
            "tuned": {"algo": spec["algo"], "set": tuned},
        },
        "comparisons": [["default", "tuned"]],
        "success": "all",
        "alpha": 0.05,
    }
    path = study_dir(home, name) / "plan.yaml"
    text = (
        f"# written by backflip tune from study {name} (trial {best.number}); run it with\n"
        f"# backflip plan run {path}\n" + yaml.safe_dump(plan, sort_keys=False)
    )
    if not path.exists() or path.read_text() != text:  # the same text twice: the same hash
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    reg, message = plans.create(home, path)
    return {"file": str(path), "name": plan["name"], "hash": reg["hash"], "seeds": reg["seeds"],
            "trial": best.number, "default_best": default_best, "message": message}  # fmt: skip


def _plain(v):
    """A setting as a plan's YAML writes it (tuples as "64,64", which `--set` also reads)."""
    return format_value(v) if isinstance(v, tuple | list) else v


def _plain_text(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_summary(summary: dict) -> str:
    """The study as a table (every trial, pruned and failed ones included), its best trial, and
    the plan that preregisters it."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for c in ("trial", "state", "objective", "final IQM [95% CI]", "settings", "run"):
        table.add_column(c, no_wrap=c != "settings")
    for r in summary["trials"]:
        iqm = "-"
        if r["iqm"] is not None:
            iqm = f"{fmt(r['iqm'])} {stats.interval(*r['ci'], r['n'])}"
        state = r["state"]
        if state == "pruned" and r["intermediate"]:
            last, value = list(r["intermediate"].items())[-1]
            state = f"pruned at {int(float(last)):,} (IQM {fmt(value)})"
        elif state == "fail" and r["error"]:
            state = f"failed: {r['error']}"
        table.add_row(
            str(r["trial"]) + (" (default)" if r["default"] else ""),
            state,
            "-" if r["objective"] is None else fmt(r["objective"]),
            iqm,
            _params_text(r["params"]),
            r["run"] or "-",
        )
    spec = summary.get("spec") or {}
    lines = [
        f"study {summary['study']}: {spec.get('algo')} on {spec.get('env')}, "
        f"{len(spec.get('seeds', []))} seeds × {spec.get('steps', 0):,} steps per trial; "
        f"objective: the low end of the final evaluation's IQM 95% CI over seeds",
        table_text(table),
    ]
    best, default = summary.get("best"), summary.get("default")
    if best:
        lines.append(
            f"best: trial {best['trial']}, objective {fmt(best['objective'])} "
            f"(IQM {fmt(best['iqm'])} {stats.interval(*best['ci'], best['n'])})"
        )
    if default and default.get("objective") is not None:
        lines.append(
            f"default (trial {default['trial']}): objective {fmt(default['objective'])} "
            f"(IQM {fmt(default['iqm'])} {stats.interval(*default['ci'], default['n'])})"
        )
    if not summary["complete"]:
        lines.append(f"the study is not complete yet: {summary['counts']} of {summary['total']}")
    plan = summary.get("plan")
    if plan and plan.get("default_best"):
        lines.append(
            "the default configuration scored highest on the tuning seeds: the study found no "
            f"better one; the plan checks its best alternative (trial {plan['trial']}) anyway"
        )
    if plan and plan.get("file"):
        lines.append(
            f"preregistered: plan {plan['name']} (sha256 {plan['hash'][:12]}) on fresh seeds "
            f"{plan['seeds']}; the tuning seeds were {spec.get('seeds')}\n"
            f"run it with: backflip plan run {plan['file']}"
        )
    elif plan:
        lines.append(plan["note"])
    return "\n".join(lines)
