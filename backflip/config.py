"""Configuration: typed dataclasses, `--set key=value` overrides and config files.

A run's configuration has four parts, each a dataclass whose fields carry a one-line docstring
(read from the source, CleanRL style, so the dataclass doubles as `--help`):

- the algorithm's hyperparameters (`PPOConfig`, `DQNConfig`, ...), addressed by bare keys: `lr=3e-4`;
- `RunOptions` (budget-independent run settings such as evaluation and checkpoints), also bare keys:
  `eval_episodes=20`, `device=cuda`;
- `EnvOptions` (wrappers applied to the environment), addressed as `env.<key>`;
- `DoctorOptions` (live diagnosis), addressed as `doctor.<key>`.

Precedence, lowest first: dataclass defaults < the algorithm's preset for this env < `--config FILE`
< `--set key=value`. The resolved result is stored with every run.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backflip.errors import UserError, did_you_mean


@dataclass
class RunOptions:
    """Settings every algorithm shares."""

    eval_episodes: int = 10
    """greedy evaluation episodes at the end of training (and at each periodic evaluation)"""
    eval_every: int = 0
    """evaluate every this many env steps (0: only at the end)"""
    target_return: float | None = None
    """stop as soon as a periodic greedy evaluation reaches this mean return (None: use the budget)"""
    checkpoint_every: int = 0
    """write a checkpoint every this many env steps (0: a quarter of the budget)"""
    device: str = "cpu"
    """torch device: cpu or cuda"""
    video_every: int = 0
    """record a greedy episode as MP4 every this many env steps, and at the end (0: never)"""
    telemetry: bool = True
    """compute and write diagnostics (off only to measure what logging costs)"""
    log_every: int = 0
    """env steps between metric rows (PPO, VPG, DQN, DDPG, TD3, SAC; 0: 1000)"""
    max_wall_s: float = 0.0
    """stop training once the seed has run this many seconds (checked at each metrics row), then
    evaluate and finish as at the end of the budget (0: no limit); for runs of a fixed duration"""

    def __post_init__(self):
        _require(self.eval_episodes >= 1, "eval_episodes must be >= 1")
        _require(self.eval_every >= 0, "eval_every must be >= 0")
        _require(self.checkpoint_every >= 0, "checkpoint_every must be >= 0")
        _require(self.video_every >= 0, "video_every must be >= 0")
        _require(self.log_every >= 0, "log_every must be >= 0")
        _require(self.max_wall_s >= 0, "max_wall_s must be >= 0")
        _require(
            self.device in ("cpu", "cuda") or self.device.startswith("cuda:"),
            f"device must be cpu or cuda[:N], got {self.device!r}",
        )


def check_device(device: str) -> None:
    """Raise a UserError unless torch can use `device` here (say so before any seed starts)."""
    if device == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            f"device={device} requested but CUDA is not available here (torch "
            f"{torch.__version__}, {'no CUDA build' if torch.version.cuda is None else 'no GPU found'}); "
            "use device=cpu"
        )
    index = device.partition(":")[2] or "0"
    if not index.isdigit() or int(index) >= torch.cuda.device_count():
        raise UserError(
            f"device={device} requested but only {torch.cuda.device_count()} CUDA device(s) exist"
        )


@dataclass
class EnvOptions:
    """Wrappers and fault injection applied to every environment copy of a run."""

    reward_scale: float = 1.0
    """multiply the env's reward by this (fault injection: check reward-scale diagnostics)"""
    obs_scale: float = 1.0
    """multiply observations by this ..."""
    obs_shift: float = 0.0
    """... and then add this (fault injection: unnormalized inputs)"""
    nan_reward_at: int = -1
    """replace the reward with NaN from this env step on, per env copy (-1: never)"""
    slowdown: float = 0.0
    """add this many microseconds of busy work per step, growing linearly with steps (test only)"""
    max_episode_steps: int = 0
    """override the env's time limit (0: the env's own)"""
    frame_diff: bool = False
    """observe the difference between consecutive frames instead of the frame (Karpathy's trick)"""
    atari: bool = True
    """standard Atari preprocessing for ALE ids (noop/fire reset, skip 4 + max-pool, 84x84 gray)"""
    frame_stack: int = 4
    """Atari: frames stacked into one observation"""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode (evaluation always plays whole games)"""
    clip_reward: bool = True
    """Atari: train on the sign of the reward (evaluation reports raw scores)"""
    atari_vector: bool = True
    """Atari: training envs of NoFrameskip ids run in ale-py's C++ vector env (the same
    preprocessing, ~30% less CPU per step, stepped on up to 2 threads); false: Gymnasium's
    wrappers in a SyncVectorEnv (docs/environments.md lists the differences)"""

    def __post_init__(self):
        _require(self.max_episode_steps >= 0, "env.max_episode_steps must be >= 0")
        _require(self.slowdown >= 0, "env.slowdown must be >= 0")
        _require(self.frame_stack >= 1, "env.frame_stack must be >= 1")


@dataclass
class DoctorOptions:
    """Live diagnosis during training."""

    stop_on_nan: bool = True
    """stop a seed as soon as a logged value is NaN or infinite"""
    live: bool = True
    """print a warning line as soon as a rule fires during training"""


SECTIONS = {"env": EnvOptions, "doctor": DoctorOptions}


def _require(ok: bool, message: str):
    if not ok:
        raise UserError(message)


# --- field docs -------------------------------------------------------------------------------


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field, read from source (CleanRL/tyro style)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, nxt in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe(cls) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, doc) for each field of a config dataclass."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append((f.name, _type_name(hints[f.name]), default, docs.get(f.name, "")))
    return rows


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


# --- parsing values ---------------------------------------------------------------------------

_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def parse_value(text: Any, tp, key: str):
    """Convert `text` (a CLI string or a value from a config file) to type `tp`, or raise UserError."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and (text is None or str(text).lower() in ("none", "null")):
            return None
        for arg in (a for a in args if a is not type(None)):
            return parse_value(text, arg, key)
    if origin is typing.Literal:
        if text in args or str(text) in map(str, args):
            return next(a for a in args if str(a) == str(text))
        raise UserError(f"bad value for {key}: {text!r}; choose one of {', '.join(map(str, args))}")
    if origin in (tuple, list):
        items = text if isinstance(text, list | tuple) else [t for t in str(text).split(",") if t]
        inner = args[0] if args else str
        return origin(parse_value(t, inner, key) for t in items)
    try:
        if tp is bool:
            if isinstance(text, bool):
                return text
            low = str(text).strip().lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ValueError
        if tp is int:
            if isinstance(text, bool):
                raise ValueError
            value = float(text)  # accepts 1e5
            if not value.is_integer():
                raise ValueError
            return int(value)
        if tp is float:
            if isinstance(text, bool):
                raise ValueError
            return float(text)
        if tp is str:
            return str(text)
    except (TypeError, ValueError):
        raise UserError(f"bad value for {key}: {text!r} is not {_article(tp)}") from None
    raise UserError(f"{key}: unsupported field type {tp}")


def _article(tp) -> str:
    name = {bool: "a boolean (true/false)", int: "an integer", float: "a number"}
    return name.get(tp, _type_name(tp))


# --- the resolved configuration ----------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything needed to reproduce a training run."""

    algo: str
    env_id: str
    seeds: list[int]
    steps: int
    hp: Any
    run: RunOptions = field(default_factory=RunOptions)
    env: EnvOptions = field(default_factory=EnvOptions)
    doctor: DoctorOptions = field(default_factory=DoctorOptions)
    preset: str | None = None

    def to_dict(self) -> dict:
        return {
            "algo": self.algo,
            "env_id": self.env_id,
            "seeds": list(self.seeds),
            "steps": self.steps,
            "preset": self.preset,
            "hp": dataclasses.asdict(self.hp),
            "run": dataclasses.asdict(self.run),
            "env": dataclasses.asdict(self.env),
            "doctor": dataclasses.asdict(self.doctor),
        }

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        from backflip.algos import get_algo

        spec = get_algo(d["algo"])
        return cls(
            algo=d["algo"],
            env_id=d["env_id"],
            seeds=list(d["seeds"]),
            steps=int(d["steps"]),
            preset=d.get("preset"),
            hp=_build(spec.config, d.get("hp", {}), ""),
            run=_build(RunOptions, d.get("run", {}), ""),
            env=_build(EnvOptions, d.get("env", {}), "env."),
            doctor=_build(DoctorOptions, d.get("doctor", {}), "doctor."),
        )

    def flat(self) -> dict[str, Any]:
        """`key -> value` in the `--set` namespace (bare keys, env.*, doctor.*)."""
        out = {**dataclasses.asdict(self.hp), **dataclasses.asdict(self.run)}
        for name in SECTIONS:
            out.update(
                {f"{name}.{k}": v for k, v in dataclasses.asdict(getattr(self, name)).items()}
            )
        return out


def _build(cls, values: dict, prefix: str):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in values.items():
        if k not in names:
            raise UserError(f"unknown key {prefix}{k}{did_you_mean(k, names)}")
        kwargs[k] = parse_value(v, hints[k], prefix + k)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a missing required field
        raise UserError(f"{cls.__name__}: {e}") from None


def valid_keys(algo_config_cls) -> list[str]:
    keys = [f.name for f in dataclasses.fields(algo_config_cls)]
    keys += [f.name for f in dataclasses.fields(RunOptions)]
    for name, cls in SECTIONS.items():
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(cls)]
    return keys


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """['lr=1e-3', 'env.reward_scale=10'] -> {'lr': '1e-3', 'env.reward_scale': '10'}."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or TOML file of overrides; nested `env:`/`doctor:` tables are flattened."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml", ".json"):
            import yaml

            data = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
        else:
            raise UserError(f"config file must be .yaml, .yml, .toml or .json: {path}")
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 — yaml and toml raise many types; all mean "bad file"
        raise UserError(f"cannot parse config file {path}: {e}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of key: value")
    flat = {}
    for k, v in data.items():
        if k in SECTIONS and isinstance(v, dict):
            flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            flat[k] = v
    return flat


def resolve(
    algo: str,
    env_id: str,
    seeds: list[int],
    steps: int | None,
    file_values: dict[str, Any] | None = None,
    set_values: dict[str, Any] | None = None,
) -> TrainConfig:
    """Merge defaults, the preset for `env_id`, a config file and `--set` values, type-checked."""
    from backflip.algos import get_algo

    spec = get_algo(algo)
    preset = dict(spec.presets.get(env_id, {}))
    preset_steps = preset.pop("steps", None)
    merged = {**preset, **(file_values or {}), **(set_values or {})}
    if "steps" in merged:  # allow steps in a config file
        steps = steps or int(parse_value(merged.pop("steps"), int, "steps"))
    valid = valid_keys(spec.config)
    groups: dict[str, dict] = {"hp": {}, "run": {}, **{s: {} for s in SECTIONS}}
    hp_names = {f.name for f in dataclasses.fields(spec.config)}
    run_names = {f.name for f in dataclasses.fields(RunOptions)}
    for key, value in merged.items():
        section, dot, name = key.partition(".")
        if dot and section in SECTIONS:
            groups[section][name] = value
        elif not dot and key in hp_names:
            groups["hp"][key] = value
        elif not dot and key in run_names:
            groups["run"][key] = value
        else:
            raise UserError(
                f"unknown key {key!r} for {algo}{did_you_mean(key, valid)}; valid keys: "
                + ", ".join(valid)
            )
    steps = steps or preset_steps or spec.default_steps
    if steps <= 0:
        raise UserError("--steps must be positive")
    if not seeds:
        raise UserError("--seeds must be at least 1")
    return TrainConfig(
        algo=algo,
        env_id=env_id,
        seeds=list(seeds),
        steps=int(steps),
        preset=env_id if spec.presets.get(env_id) else None,
        hp=_build(spec.config, groups["hp"], ""),
        run=_build(RunOptions, groups["run"], ""),
        env=_build(EnvOptions, groups["env"], "env."),
        doctor=_build(DoctorOptions, groups["doctor"], "doctor."),
    )
