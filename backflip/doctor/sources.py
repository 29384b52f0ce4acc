"""Reading what the doctor diagnoses: backflip runs and seeds, and TensorBoard logs written by
Stable-Baselines3 or CleanRL, mapped to backflip's metric names.

Name mapping (diagnostics catalog; SB3 2.x and CleanRL as of 2026):

| backflip | Stable-Baselines3 | CleanRL |
|---|---|---|
| `rollout/ep_return_mean` | `rollout/ep_rew_mean` (mean of the last 100 episodes) | from `charts/episodic_return` (every episode) |
| `rollout/ep_len_mean` | `rollout/ep_len_mean` | from `charts/episodic_length` |
| `train/entropy` | − `train/entropy_loss` | `losses/entropy` |
| `train/entropy_norm` | entropy / log n, n inferred (below) | same |
| `train/policy_loss` | `train/policy_gradient_loss` | `losses/policy_loss` |
| `train/value_loss` | `train/value_loss` | `losses/value_loss` |
| `train/approx_kl` | `train/approx_kl` | `losses/approx_kl` |
| `train/clip_frac` | `train/clip_fraction` | `losses/clipfrac` |
| `train/explained_var` | `train/explained_variance` | `losses/explained_variance` |
| `train/policy_std` | `train/std` | — |
| `train/lr` | `train/learning_rate` | `charts/learning_rate` |
| `train/epsilon` | `rollout/exploration_rate` | `charts/epsilon` |
| `train/q_mean` | — | `losses/q_values`, `losses/qf1_values` |
| `train/alpha` | `train/ent_coef` | `losses/alpha` |
| `train/td_loss` | `train/loss` (DQN) | `losses/td_loss` |
| `train/actor_loss`, `train/critic_loss` | same names | `losses/actor_loss`, `losses/qf_loss` |
| `time/sps` | derived (below) | derived |

Throughput: SB3's `time/fps` and CleanRL's `charts/SPS` are cumulative averages since the start
(a slowdown hides in them), so `time/sps` is derived from the event files' wall-clock times:
Δstep / Δwall between consecutive logged steps.

Entropy normalization: neither library logs the number of actions. For a discrete policy (no
`train/std` logged) n is inferred as ⌈exp(H_max) − 0.02⌉ from the largest logged entropy H_max —
exact when the first logged policy is near-uniform, as freshly initialized policies are.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backflip.doctor.series import RunData, planned_steps
from backflip.errors import UserError
from backflip.returns import is_preference_run
from backflip.runs.layout import EPISODES, METRICS, RUN_JSON, STATUS, TRUE_EPISODES

SB3 = {
    "rollout/ep_rew_mean": "rollout/ep_return_mean",
    "rollout/ep_len_mean": "rollout/ep_len_mean",
    "rollout/exploration_rate": "train/epsilon",
    "train/policy_gradient_loss": "train/policy_loss",
    "train/value_loss": "train/value_loss",
    "train/approx_kl": "train/approx_kl",
    "train/clip_fraction": "train/clip_frac",
    "train/explained_variance": "train/explained_var",
    "train/std": "train/policy_std",
    "train/learning_rate": "train/lr",
    "train/ent_coef": "train/alpha",
    "train/actor_loss": "train/actor_loss",
    "train/critic_loss": "train/critic_loss",
    "train/loss": "train/loss",
}
CLEANRL = {
    "charts/learning_rate": "train/lr",
    "charts/epsilon": "train/epsilon",
    "losses/value_loss": "train/value_loss",
    "losses/policy_loss": "train/policy_loss",
    "losses/entropy": "train/entropy",
    "losses/approx_kl": "train/approx_kl",
    "losses/old_approx_kl": "train/old_approx_kl",
    "losses/clipfrac": "train/clip_frac",
    "losses/explained_variance": "train/explained_var",
    "losses/td_loss": "train/td_loss",
    "losses/q_values": "train/q_mean",
    "losses/qf1_values": "train/q_mean",
    "losses/alpha": "train/alpha",
    "losses/actor_loss": "train/actor_loss",
    "losses/qf_loss": "train/critic_loss",
}
EPISODE_WINDOW = 20  # backflip's rollout/ep_return_* window, applied to CleanRL's episodes


@dataclass
class Target:
    """What `backflip doctor TARGET` resolved to."""

    target: str
    kind: str
    """run, seed, tensorboard, or folder (several runs of one configuration)"""
    runs: list[RunData]
    finals: list[float | None] = field(default_factory=list)
    """each run's final score (greedy evaluation when there is one), for seed-level rules"""
    env_id: str | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        names = {r.source for r in self.runs}
        what = {
            "run": "backflip run",
            "seed": "backflip seed",
            "tensorboard": "TensorBoard log",
            "sb3-csv": "Stable-Baselines3 CSV log",
            "folder": "folder of runs",
        }[self.kind]
        algo = next((r.algo for r in self.runs if r.algo), None)
        extra = f", {algo} on {self.env_id}" if algo and self.env_id else ""
        return f"{what} ({len(self.runs)} series from {'/'.join(sorted(names))}{extra})"


# --- backflip ------------------------------------------------------------------------------


def load_seed(folder: Path, config: dict | None = None, label: str | None = None) -> RunData:
    from backflip.runs.archive import read_json
    from backflip.telemetry import read_episodes, read_metrics

    metrics_path = folder / METRICS
    if not metrics_path.exists():
        raise UserError(f"no metrics.csv in {folder}")
    try:
        metrics = read_metrics(metrics_path)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {metrics_path}: {e}") from None
    episodes = true_episodes = None
    if (folder / EPISODES).exists():
        steps, rets, lens = read_episodes(folder / EPISODES)
        episodes = (steps, rets, lens) if len(steps) else None
    if (folder / TRUE_EPISODES).exists():  # a preference run's, on the task's reward
        steps, rets, lens = read_episodes(folder / TRUE_EPISODES)
        true_episodes = (steps, rets, lens) if len(steps) else None
    status = {}
    if (folder / STATUS).exists():
        try:
            status = read_json(folder / STATUS)
        except UserError:
            status = {}
    config = config or {}
    return RunData(
        label=label or f"seed {folder.name}",
        metrics=metrics,
        episodes=episodes,
        true_episodes=true_episodes,
        source="backflip",
        algo=config.get("algo"),
        env_id=config.get("env_id"),
        hp=config.get("hp", {}),
        env_opts=config.get("env", {}),
        budget=planned_steps(config),
        status=status,
        learned_reward=is_preference_run(config, metrics),
        prefs=config.get("prefs") or {},
    )


def load_run(run_dir: Path, label_prefix: str = "") -> tuple[dict, list[RunData], list]:
    """(run record, one RunData per seed with metrics, final eval return per seed)."""
    from backflip.runs.archive import load_run as load_record
    from backflip.runs.layout import seed_dir

    record = load_record(run_dir)
    config = record.get("config", {})
    runs, finals = [], []
    for st in record.get("seeds", []):
        folder = seed_dir(run_dir, st["seed"])
        if not (folder / METRICS).exists():
            continue
        runs.append(load_seed(folder, config, f"{label_prefix}seed {st['seed']}"))
        finals.append(st.get("final_eval_return"))
    return record, runs, finals


# --- TensorBoard -----------------------------------------------------------------------------


def event_dirs(root: Path) -> list[Path]:
    """Every directory under `root` (itself included) that holds TensorBoard event files."""
    return sorted({p.parent for p in root.rglob("events.out.tfevents.*")})


def read_events(folder: Path, texts: dict | None = None) -> tuple[dict, dict]:
    """{tag: (steps, values)} and {step: wall time} from one directory's event files; text
    summaries go to `texts` ({tag: the last text}) when it is given."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(folder), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as e:  # noqa: BLE001 — corrupt protobufs raise many types; all mean unreadable
        raise UserError(f"cannot read TensorBoard events in {folder}: {e}") from None
    series, walls = {}, {}
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        events = acc.Scalars(tag)
        series[tag] = _arrays([(e.step, e.value) for e in events])
        for e in events:
            walls[e.step] = max(walls.get(e.step, 0.0), e.wall_time)
    for tag in tags.get("tensors", []):  # TF2-style scalar summaries
        if tag in series:
            continue
        from tensorboard.util import tensor_util

        points = []
        for e in acc.Tensors(tag):
            value = tensor_util.make_ndarray(e.tensor_proto)
            # text summaries are tensors too (CleanRL writes its hyperparameters as one, a
            # Markdown table): only numbers are metrics
            if value.size == 1 and value.dtype.kind in "biuf":
                points.append((e.step, float(value.reshape(()))))
                walls[e.step] = max(walls.get(e.step, 0.0), e.wall_time)
            elif value.size == 1 and value.dtype.kind in "SOU" and texts is not None:
                text = value.reshape(()).item()
                texts[tag] = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        if points:
            series[tag] = _arrays(points)
    return series, walls


def _arrays(points):
    points.sort(key=lambda p: p[0])
    return np.array([p[0] for p in points], np.int64), np.array([p[1] for p in points], np.float64)


def detect_library(tags) -> str:
    tags = set(tags)
    if any(t.startswith(("charts/", "losses/")) for t in tags):
        return "cleanrl"
    if tags & {"rollout/ep_rew_mean", "time/fps", "train/entropy_loss", "train/n_updates"}:
        return "sb3"
    return "backflip" if "rollout/ep_return_mean" in tags else "tensorboard"


def derived_sps(walls: dict, points: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Δstep / Δwall between logged steps (wall times of the event records), over intervals of
    at least 1/`points` of the run, so that bursty logging (SB3's DQN logs every 4 episodes and
    trains in bursts) does not turn into noise."""
    steps = np.array(sorted(walls), np.int64)
    wall = np.array([walls[s] for s in steps])
    if len(steps) < 3:
        return steps[:0], wall[:0]
    gap = (steps[-1] - steps[0]) / points
    keep = [0]
    for i in range(1, len(steps)):
        if steps[i] - steps[keep[-1]] >= gap and wall[i] > wall[keep[-1]]:
            keep.append(i)
    steps, wall = steps[keep], wall[keep]
    return steps[1:], np.diff(steps) / np.diff(wall)


def infer_actions(entropy: np.ndarray) -> int | None:
    """Number of discrete actions from the largest entropy seen (see the module docstring)."""
    v = entropy[np.isfinite(entropy)]
    if not len(v) or v.max() <= 0:
        return None
    n = math.ceil(math.exp(float(v.max())) - 0.02)
    return n if n >= 2 else None


# Stable-Baselines3's own files without TensorBoard: its CSV logger's rows (`configure(folder,
# ["csv"])`: the TensorBoard tags as columns, `time/total_timesteps` the step) and its `Monitor`
# wrapper's episodes (`monitor.csv`, or `N.monitor.csv` per env copy: a JSON header with the env
# id, then r, l, t: return, length, seconds since the start)
SB3_PROGRESS = "progress.csv"
SB3_MONITOR = "*monitor.csv"
SB3_WINDOW = 100  # SB3's rollout/ep_rew_mean: the mean of the last 100 episodes


def sb3_files(folder: Path) -> bool:
    return (folder / SB3_PROGRESS).is_file() or any(folder.glob(SB3_MONITOR))


def load_sb3_csv(folder: Path, label: str | None = None) -> RunData:
    """A Stable-Baselines3 run from its CSV log and/or its Monitor files, as the TensorBoard
    reader maps it; with only Monitor files, its episodes (and SB3's 100-episode means)."""
    metrics: dict = {}
    walls: dict = {}
    if (folder / SB3_PROGRESS).is_file():
        with open(folder / SB3_PROGRESS, newline="") as f:
            rows = list(csv.DictReader(f))
        if rows and "time/total_timesteps" not in rows[0]:
            raise UserError(
                f"doctor: {folder / SB3_PROGRESS} has no time/total_timesteps column: not "
                "Stable-Baselines3's CSV log"
            )
        raw = {}
        for key in rows[0] if rows else []:
            points = [(_number(r["time/total_timesteps"]), _number(r.get(key))) for r in rows]
            points = [(int(st), v) for st, v in points if st is not None and v is not None]
            if points:
                raw[key] = _arrays(points)
        metrics = sb3_metrics(raw)
        if "time/time_elapsed" in raw:
            walls = dict(zip(*(a.tolist() for a in raw["time/time_elapsed"]), strict=True))
    episodes, env_id = monitor_episodes(folder)
    if episodes is not None and "rollout/ep_return_mean" not in metrics:
        steps, rets, lens = episodes
        w = SB3_WINDOW
        means = [rets[max(0, i - w + 1) : i + 1].mean() for i in range(len(rets))]
        lmeans = [lens[max(0, i - w + 1) : i + 1].mean() for i in range(len(lens))]
        metrics["rollout/ep_return_mean"] = (steps, np.array(means))
        metrics["rollout/ep_len_mean"] = (steps, np.array(lmeans))
    if not metrics and episodes is None:
        raise UserError(f"doctor: no rows or episodes in Stable-Baselines3's files in {folder}")
    action_n = entropy_norm(metrics, "sb3")
    if walls:
        metrics["time/sps"] = derived_sps(walls)
    return RunData(
        label=label or folder.name,
        metrics=metrics,
        episodes=episodes,
        source="sb3",
        env_id=env_id,
        action_n=action_n,
        learned_reward=is_preference_run(None, metrics),
    )


def monitor_episodes(folder: Path) -> tuple[tuple | None, str | None]:
    """Every episode in the folder's Monitor files as (env steps at its end, return, length),
    ordered by when it ended (the env copies interleaved; the step is the sum of the lengths of
    the episodes ended by then, so it lags the true step by the copies' unfinished episodes),
    and the env id the files' headers name."""
    eps, env_id = [], None
    for path in sorted(folder.glob(SB3_MONITOR)):
        with open(path, newline="") as f:
            first = f.readline()
            try:
                env_id = env_id or json.loads(first.lstrip("#")).get("env_id")
            except (json.JSONDecodeError, AttributeError):
                pass
            for r in csv.DictReader(f):
                ret, length, t = _number(r.get("r")), _number(r.get("l")), _number(r.get("t"))
                if None not in (ret, length, t):
                    eps.append((t, ret, length))
    if not eps:
        return None, env_id
    eps.sort()
    _, rets, lens = (np.array(x, np.float64) for x in zip(*eps, strict=True))
    return (np.cumsum(lens).astype(np.int64), rets, lens), env_id


def _number(text) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def sb3_metrics(raw: dict) -> dict:
    """Stable-Baselines3's tags (TensorBoard or CSV columns) as backflip's metric names."""
    metrics = {name: raw[tag] for tag, name in SB3.items() if tag in raw}
    if "train/entropy_loss" in raw:
        s, v = raw["train/entropy_loss"]
        metrics["train/entropy"] = (s, -v)
    return metrics


def entropy_norm(metrics: dict, library: str) -> int | None:
    """The number of discrete actions inferred from a peer library's logged entropy, and with
    it `train/entropy_norm` added to `metrics`; None for a Gaussian policy or no entropy."""
    discrete = "train/policy_std" not in metrics  # SB3 logs train/std for Gaussian policies
    if library not in ("sb3", "cleanrl") or "train/entropy" not in metrics or not discrete:
        return None
    action_n = infer_actions(metrics["train/entropy"][1])
    if action_n:
        s, v = metrics["train/entropy"]
        metrics["train/entropy_norm"] = (s, v / math.log(action_n))
    return action_n


def load_tensorboard(folder: Path, label: str | None = None) -> RunData:
    texts: dict = {}
    raw, walls = read_events(folder, texts)
    if not raw:
        raise UserError(f"no scalar metrics in the TensorBoard events in {folder}")
    library = detect_library(raw)
    metrics: dict = {}
    episodes = None
    hp: dict = {}
    env_id = None
    if library == "sb3":
        metrics = sb3_metrics(raw)
        episodes, env_id = monitor_episodes(folder)  # a Monitor beside the events, if any
    elif library == "cleanrl":
        for tag, name in CLEANRL.items():
            if tag in raw and name not in metrics:
                metrics[name] = raw[tag]
        episodes = _cleanrl_episodes(raw, metrics)
        hp = cleanrl_hyperparameters(texts)
    else:
        metrics = dict(raw)
    action_n = entropy_norm(metrics, library)
    if library != "backflip":
        metrics["time/sps"] = derived_sps(walls)
    return RunData(
        label=label or folder.name,
        metrics=metrics,
        episodes=episodes,
        source=library,
        algo=hp.get("exp_name"),
        env_id=hp.get("env_id") or env_id,
        hp=hp,
        budget=hp.get("total_timesteps"),
        action_n=action_n,
        learned_reward=is_preference_run(None, metrics),
    )


def cleanrl_hyperparameters(texts: dict) -> dict:
    """CleanRL's `hyperparameters` text summary (a Markdown table |param|value|) as a dict of
    numbers and strings: the env id, gamma and the budget tell the rules about the task."""
    text = next((t for tag, t in texts.items() if tag.startswith("hyperparameters")), "")
    hp: dict = {}
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|")
        if len(cells) != 2 or cells[0] in ("param", "-"):
            continue
        key, value = cells[0].strip(), cells[1].strip()
        try:
            number = float(value)
            hp[key] = int(number) if number.is_integer() and "." not in value else number
        except ValueError:
            hp[key] = value
    return hp


def _cleanrl_episodes(raw: dict, metrics: dict):
    """CleanRL logs every episode: keep them, and derive backflip's rolling-window series."""
    if "charts/episodic_return" not in raw:
        return None
    steps, rets = raw["charts/episodic_return"]
    lens = raw.get("charts/episodic_length", (steps, np.full(len(steps), np.nan)))[1]
    if len(lens) != len(rets):
        lens = np.full(len(rets), np.nan)
    w = EPISODE_WINDOW
    windows = [rets[max(0, i - w + 1) : i + 1] for i in range(len(rets))]
    len_windows = [lens[max(0, i - w + 1) : i + 1] for i in range(len(lens))]
    metrics["rollout/ep_return_mean"] = (steps, np.array([x.mean() for x in windows]))
    metrics["rollout/ep_return_std"] = (steps, np.array([x.std() for x in windows]))
    metrics["rollout/ep_return_min"] = (steps, np.array([x.min() for x in windows]))
    metrics["rollout/ep_return_max"] = (steps, np.array([x.max() for x in windows]))
    if np.isfinite(lens).all():
        metrics["rollout/ep_len_mean"] = (steps, np.array([x.mean() for x in len_windows]))
        metrics["rollout/ep_len_min"] = (steps, np.array([x.min() for x in len_windows]))
        metrics["rollout/ep_len_max"] = (steps, np.array([x.max() for x in len_windows]))
    return steps, rets, lens


# --- resolving a target ------------------------------------------------------------------------


def tail_score(d: RunData) -> float | None:
    """A run's final training return: the mean of the last 20% of its logged return (the true
    return on a preference run, `RunData.returns`)."""
    from backflip.doctor.series import finite, tail

    s = d.get(d.returns.mean)
    if s is None:
        return None
    s = finite(s)
    return float(np.mean(tail(s, 0.2, d.horizon)[1])) if len(s[0]) else None


def resolve_target(target: str, home: Path) -> Target:
    """A run id, a run directory, a seed directory, a TensorBoard logdir or a folder of runs."""
    from backflip.runs.index import resolve_run

    path = Path(target).expanduser()
    if not path.exists():
        if "/" in target or target.startswith("."):
            raise UserError(f"doctor: {target} does not exist")
        run_dir = resolve_run(home, target)  # a run id (raises a clear UserError)
        return _backflip_run(target, run_dir)
    if path.is_file():
        if (
            path.name.startswith("events.out.tfevents")
            or path.name == METRICS
            or (path.name == SB3_PROGRESS or path.name.endswith("monitor.csv"))
        ):
            path = path.parent
        else:
            raise UserError(
                f"doctor: {path} is a file; give a run directory, a TensorBoard logdir or a run id"
            )
    if (path / RUN_JSON).exists():
        return _backflip_run(target, path)
    if (path / METRICS).exists():
        d = load_seed(path, _config_above(path))
        return Target(target, "seed", [d], [d.status.get("final_eval_return")], d.env_id)
    runs_below = sorted(p.parent for p in path.glob("*/run.json"))
    if runs_below:
        return _backflip_folder(target, runs_below)
    seeds_below = sorted(p.parent for p in path.glob("*/metrics.csv"))
    if seeds_below:
        config = _config_above(seeds_below[0])
        runs = [load_seed(s, config) for s in seeds_below]
        kind = "run" if len(runs) == 1 else "folder"
        return Target(
            target,
            kind,
            runs,
            [r.status.get("final_eval_return") for r in runs],
            config.get("env_id"),
        )
    dirs = event_dirs(path)
    csv_dirs = sorted(
        {p.parent for pattern in (SB3_PROGRESS, SB3_MONITOR) for p in path.rglob(pattern)}
        - set(dirs)
    )
    if not dirs and not csv_dirs:
        raise UserError(
            f"doctor: nothing to diagnose in {path}: no run.json, metrics.csv, TensorBoard "
            "event files (events.out.tfevents.*) or Stable-Baselines3 CSV files (progress.csv, "
            "monitor.csv)"
        )
    runs = [load_tensorboard(d, _tb_label(d, path)) for d in dirs]
    runs += [load_sb3_csv(d, _tb_label(d, path)) for d in csv_dirs]
    kind = ("tensorboard" if dirs else "sb3-csv") if len(runs) == 1 else "folder"
    envs = {r.env_id for r in runs}  # CleanRL's logs name it; SB3's don't
    env_id = envs.pop() if len(envs) == 1 else None
    t = Target(target, kind, runs, [tail_score(r) for r in runs], env_id)
    unknown = [r for r in runs if r.source == "tensorboard"]
    if unknown:  # Tianshou's train/reward, RLlib's ray/tune/episode_reward_mean, ...
        tags = sorted({name for r in unknown for name in r.metrics if name != "time/sps"})
        shown = ", ".join(tags[:6]) + (f" and {len(tags) - 6} more" if len(tags) > 6 else "")
        t.notes.append(
            f"{len(unknown)} of these logs come from a library the doctor does not map "
            "(it reads backflip's, Stable-Baselines3's and CleanRL's names): their tags are read "
            f"as they are ({shown}), and rules that need a name they lack stay silent"
        )
    return t


def peer_env(folder: Path) -> str | None:
    """The env a CleanRL run ran on, from its run folder's name (CleanRL names it
    `{env_id}__{exp_name}__{seed}__{unix time}`); None for other names (SB3's `PPO_1` does not
    say, nor does anything else in SB3's event files)."""
    parts = folder.name.split("__")
    if len(parts) >= 4 and parts[-1].isdigit() and parts[-2].isdigit() and parts[0]:
        return parts[0]
    return None


def _tb_label(folder: Path, root: Path) -> str:
    rel = folder.relative_to(root).as_posix()
    return rel if rel != "." else folder.name


def _config_above(folder: Path) -> dict:
    """The run config of a seed directory inside a backflip run (runs/<id>/seeds/<seed>)."""
    from backflip.runs.archive import read_record

    for parent in (folder.parent.parent, folder.parent):
        if (parent / RUN_JSON).exists():
            try:
                return read_record(parent).get("config", {})
            except UserError:
                return {}
    return {}


def _backflip_run(target: str, run_dir: Path) -> Target:
    record, runs, finals = load_run(run_dir)
    if not runs:
        raise UserError(f"doctor: run {run_dir.name} has no seed with metrics yet")
    return Target(target, "run", runs, finals, record.get("env"))


def _backflip_folder(target: str, run_dirs: list[Path]) -> Target:
    runs, finals, configs = [], [], set()
    for run_dir in run_dirs:
        record, seeds, seed_finals = load_run(run_dir, f"{run_dir.name} ")
        runs += seeds
        finals += seed_finals
        cfg = dict(record.get("config", {}))
        cfg.pop("seeds", None)
        configs.add(repr(sorted(cfg.items())))
    if not runs:
        raise UserError(f"doctor: no run with metrics in {target}")
    t = Target(target, "folder", runs, finals, runs[0].env_id)
    if len(configs) > 1:
        t.notes.append(
            f"the {len(run_dirs)} runs do not share one configuration: seed-level findings "
            "compare different settings"
        )
    return t
