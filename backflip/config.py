"""Configuration: typed dataclasses, `--set key=value` overrides and config files.

A run's configuration has four parts, each a dataclass whose fields carry a one-line docstring
(read from the source, CleanRL style, so the dataclass doubles as `--help`):

- the algorithm's hyperparameters (the `Config` dataclass of `algos/<algo>.py`), addressed by bare keys:
  `lr=3e-4`;
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
import math
import textwrap
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backflip.algos import get_algo
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
    """env steps between metric rows, for every algorithm (0: its default: 1000; A2C 2000; CEM
    every generation)"""
    max_wall_s: float = 0.0
    """stop training once the seed has run this many seconds (checked at each metrics row), then
    evaluate and finish as at the end of the budget (0: no limit); for runs of a fixed duration"""

    def __post_init__(self):  # the numbers' domains: DOMAINS below
        _require(
            self.device in ("cpu", "cuda") or self.device.startswith("cuda:"),
            f"device must be cpu or cuda[:N], got {self.device!r}",
        )


def check_device(device: str) -> None:
    """Raise a UserError unless torch can use `device` here (say so before any seed starts)."""
    if device == "cpu":
        return
    import torch  # only to check a device: commands that never train read configs too

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
    preprocessing, less CPU per step, stepped on up to 2 threads); false: Gymnasium's
    wrappers in a SyncVectorEnv (docs/environments.md lists the differences)"""


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


# --- domains: the values each setting accepts ------------------------------------------------


class SettingWarning(UserWarning):
    """A setting that is allowed but unusual (printed as `warning: ...`, training goes on)."""


MAX_INT = 10**12  # no count, size or step number backflip accepts is larger (SQLite: < 2**63)
MAX_ROLLOUT = 10_000_000  # samples in one on-policy rollout (num_envs × num_steps)


@dataclass(frozen=True)
class Domain:
    """What one setting accepts beyond its type: every number is finite; `low`/`high` bound it
    (`low_open`/`high_open` exclude the bound itself); `special` values are allowed outside the
    range (`-1: never`); `choices` for words; `sizes` for a list of layer sizes: `min_len` to
    `max_len` of them, each in [1, `item_max`]; `usual_max` / `usual_min`: above / below them
    the value is accepted with a warning."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple = ()
    choices: tuple[str, ...] = ()
    min_len: int = 0
    max_len: int = 8
    item_max: int = 4096
    sizes: bool = False
    usual_max: float | None = None
    usual_min: float | None = None

    def text(self) -> str:
        """The domain as `--list-keys` and error messages say it: '> 0', 'in (0, 1]', ..."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.sizes:
            return f"{self.min_len} to {self.max_len} sizes in [1, {self.item_max}]"
        if self.low is not None and self.high is not None:
            rng = (
                f"in {'(' if self.low_open else '['}{_num(self.low)}, "
                f"{_num(self.high)}{')' if self.high_open else ']'}"
            )
        elif self.low is not None:
            rng = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            rng = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            rng = "finite"
        return " or ".join([*map(_num, self.special), rng])

    def problem(self, value) -> str | None:
        """Why `value` is outside the domain, or None."""
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, str):
            if self.choices and value not in self.choices:
                return f"must be {self.text()}, got {value!r}"
            return None
        if isinstance(value, tuple | list):
            if len(value) < self.min_len:
                return "must list at least one layer size"
            if len(value) > self.max_len:
                return f"must list at most {self.max_len} sizes, got {len(value)}"
            bad = [v for v in value if not 1 <= v <= self.item_max]
            if bad:
                return f"sizes must be in [1, {self.item_max:,}], got {bad[0]}"
            return None
        if value in self.special:
            return None
        if not math.isfinite(value):
            allowed = "" if self.text() == "finite" else f" {self.text()}"
            return f"must be a finite number{allowed}, got {value}"
        ok = (
            (self.low is None or (value > self.low if self.low_open else value >= self.low))
            and (self.high is None or (value < self.high if self.high_open else value <= self.high))
            and (not isinstance(value, int) or abs(value) <= MAX_INT)
        )
        if not ok:
            if isinstance(value, int) and abs(value) > MAX_INT and self.high is None:
                return f"must be at most {MAX_INT:.0e}, got {value}"
            return f"must be {self.text()}, got {_num(value)}"
        return None


def _num(x) -> str:
    if isinstance(x, int) and abs(x) >= 10**7:
        return f"{x:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"{x:g}" if isinstance(x, float) else str(x)


def above(x, **kw) -> Domain:
    return Domain(low=x, low_open=True, **kw)


def at_least(x, **kw) -> Domain:
    return Domain(low=x, **kw)


ANY = Domain()  # any finite number
POSITIVE, NON_NEGATIVE, COUNT = above(0), at_least(0), at_least(1)
UNIT = Domain(0, 1)  # [0, 1]
DISCOUNT = Domain(0, 1, low_open=True)  # (0, 1]
LR = above(0, usual_max=1)
SIZES = Domain(min_len=1, sizes=True)
ACTIVATIONS = Domain(choices=("tanh", "relu", "elu", "leaky_relu"))

# Every setting's domain, by its name: a name means the same in every algorithm (lr, gamma,
# hidden, ...). `env.` and `doctor.` keys carry their section. `ALGO_DOMAINS` holds the few
# that differ per algorithm. `check_domains` applies them to every value a config file or
# `--set` gives, and `tests/test_config.py` checks that every setting has one.
DOMAINS: dict[str, Domain] = {
    # on-policy rollouts and updates
    "num_envs": Domain(1, 4096),
    "num_steps": Domain(2, 1_000_000),
    "minibatch_size": COUNT,
    "epochs": Domain(1, 1000),
    "gamma": DISCOUNT,
    "gae_lambda": UNIT,
    "lr": LR,
    "pi_lr": LR,
    "vf_lr": LR,
    "clip": NON_NEGATIVE,
    "vf_coef": NON_NEGATIVE,
    "ent_coef": Domain(usual_min=0),  # < 0 penalizes exploration: the doctor's collapse test
    "max_grad_norm": NON_NEGATIVE,
    "target_kl": NON_NEGATIVE,
    "hidden": SIZES,
    "activation": ACTIVATIONS,
    "cnn": Domain(choices=("nature", "keypoints")),  # nets.encoder's image encoders
    "log_std_init": Domain(-20, 2),
    "sde_sample_freq": NON_NEGATIVE,
    "adam_eps": above(0, high=1),
    "opt_eps": above(0, high=1),
    "optimizer": Domain(choices=("adam", "rmsprop")),
    "vf_iters": NON_NEGATIVE,
    "vf_minibatch": COUNT,
    # CEM
    "population": Domain(2, 100_000),
    "elite_frac": Domain(0, 1, low_open=True),
    "episodes": Domain(1, 10_000),
    "init_std": POSITIVE,
    "extra_std": NON_NEGATIVE,
    # off-policy
    "batch_size": Domain(1, 1_000_000),
    "buffer_size": COUNT,
    "learning_starts": NON_NEGATIVE,
    "train_every": COUNT,
    "gradient_steps": Domain(1, 100_000),
    "n_step": Domain(1, 1000),
    "target_every": COUNT,
    "tau": Domain(0, 1, low_open=True),
    "eps_start": UNIT,
    "eps_end": UNIT,
    "eps_fraction": Domain(0, 1, low_open=True),
    "n_critics": Domain(1, 100),
    "policy_delay": Domain(1, 10_000),
    "action_noise": NON_NEGATIVE,
    "target_noise": NON_NEGATIVE,
    "target_noise_clip": NON_NEGATIVE,
    "alpha_init": POSITIVE,
    "target_entropy": ANY,
    # RunOptions
    "eval_episodes": Domain(1, 10_000),
    "eval_every": NON_NEGATIVE,
    "target_return": ANY,
    "checkpoint_every": NON_NEGATIVE,
    "video_every": NON_NEGATIVE,
    "log_every": NON_NEGATIVE,
    "max_wall_s": NON_NEGATIVE,
    # EnvOptions
    "env.reward_scale": ANY,
    "env.obs_scale": ANY,
    "env.obs_shift": ANY,
    "env.nan_reward_at": at_least(0, special=(-1,)),
    "env.slowdown": Domain(0, 1_000_000),
    "env.max_episode_steps": NON_NEGATIVE,
    "env.frame_stack": Domain(1, 64),
}
ALGO_DOMAINS: dict[tuple[str, str], Domain] = {
    ("a2c", "num_steps"): Domain(1, 1_000_000),
    ("cem", "hidden"): Domain(sizes=True),  # empty: a linear policy
}
# settings whose values the type alone bounds (booleans, device names checked in RunOptions)
UNBOUNDED = {"device"}

# --- run inputs that are not settings: the budget, seeds and tags
STEPS = Domain(1, MAX_INT)
SEED = Domain(0, 2**31 - 1)  # env copies get seed * 1000 + i; NumPy needs < 2**32 after that
MAX_SEEDS = 1000
TAG_MAX_LEN = 64


def domain_of(key: str, algo: str | None = None) -> Domain | None:
    return ALGO_DOMAINS.get((algo or "", key)) or DOMAINS.get(key)


def check_domains(values: dict[str, Any], prefix: str = "", algo: str | None = None) -> None:
    """Raise a UserError naming the first of `values` ({field: parsed value}) outside its
    domain; warn (SettingWarning) about values that are allowed but unusual."""
    for name, value in values.items():
        key = prefix + name
        domain = domain_of(key, algo)
        if domain is None:
            continue
        problem = domain.problem(value)
        if problem:
            raise UserError(f"{algo + ': ' if algo else ''}{key} {problem}")
        if (
            domain.usual_max is not None
            and isinstance(value, int | float)
            and value > domain.usual_max
        ):
            warnings.warn(
                f"{key}={_num(value)} is unusually large (usually <= {_num(domain.usual_max)})",
                SettingWarning,
                stacklevel=2,
            )
        if (
            domain.usual_min is not None
            and isinstance(value, int | float)
            and value < domain.usual_min
        ):
            warnings.warn(
                f"{key}={_num(value)} is unusually small (usually >= {_num(domain.usual_min)})",
                SettingWarning,
                stacklevel=2,
            )


def check_cross(hp, algo: str) -> None:
    """Settings that make sense alone but not together."""
    if getattr(hp, "buffer_size", math.inf) < getattr(hp, "batch_size", 0):
        raise UserError(f"{algo}: buffer_size must be >= batch_size ({hp.batch_size:,})")
    rollout = getattr(hp, "num_envs", 0) * getattr(hp, "num_steps", 0)
    if rollout > MAX_ROLLOUT:
        raise UserError(
            f"{algo}: a rollout of num_envs × num_steps = {rollout:,} samples is more than "
            f"{MAX_ROLLOUT:,}"
        )
    # PPO splits each rollout into minibatches (VPG's vf_minibatch may exceed the rollout: its
    # value steps then use all of it, as its Pendulum preset does)
    if rollout and getattr(hp, "minibatch_size", 0) > rollout:
        raise UserError(
            f"{algo}: minibatch_size ({hp.minibatch_size:,}) is larger than the rollout "
            f"(num_envs × num_steps = {rollout:,}); lower it or collect more per rollout"
        )


def parse_steps(text) -> int:
    """`--steps` (or `steps:` in a config file): a positive whole number, 1e5 allowed."""
    try:
        value = float(text) if not isinstance(text, int) or isinstance(text, bool) else text
        if isinstance(text, bool) or not math.isfinite(value) or value != int(value):
            raise ValueError
        value = int(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"--steps must be a positive whole number, got {text!r}") from None
    if STEPS.problem(value):
        raise UserError(f"--steps {STEPS.problem(value)}")
    return value


def check_seeds(seeds: list[int]) -> None:
    if not seeds:
        raise UserError("--seeds must be at least 1")
    if len(seeds) > MAX_SEEDS:
        raise UserError(f"at most {MAX_SEEDS} seeds per run, got {len(seeds)}")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or SEED.problem(s):
            raise UserError(f"seeds must be whole numbers in [0, {SEED.high}], got {s!r}")
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise UserError(f"seed {dup[0]} is listed twice")


def parse_seed_list(text: str) -> list[int]:
    """`--seed-list 0,1,7`: whole numbers separated by commas, no empty items."""
    items = [t.strip() for t in str(text).split(",")]
    try:
        if not all(items) or any(not t.lstrip("+").isdigit() for t in items):
            raise ValueError
        seeds = [int(t) for t in items]
    except ValueError:
        raise UserError(
            f"--seed-list must be whole numbers >= 0 separated by commas, got {text!r}"
        ) from None
    check_seeds(seeds)
    return seeds


def check_tags(tags) -> None:
    """Tags label runs and `--tag` filters by them: no commas (the index joins them with ','),
    no control characters, not empty, at most TAG_MAX_LEN characters."""
    for tag in tags or []:
        if not isinstance(tag, str) or not tag.strip():
            raise UserError(f"a tag must not be empty, got {tag!r}")
        if "," in tag:
            raise UserError(f"a tag must not contain ',' (one tag per --tag), got {tag!r}")
        if any(not c.isprintable() for c in tag) or tag != tag.strip():
            raise UserError(f"a tag must be printable, without surrounding spaces, got {tag!r}")
        if len(tag) > TAG_MAX_LEN:
            raise UserError(f"a tag must be at most {TAG_MAX_LEN} characters, got {len(tag)}")


def format_value(value) -> str:
    """A value as `--set` accepts it (what `--list-keys` prints): 64,64 for sizes, () for
    none, true/false, none."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(map(format_value, value)) if value else "()"
    return str(value)


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
        if isinstance(text, list | tuple):
            items = list(text)
        else:  # 64,64 or (64, 64) or [64, 64] (what --list-keys and Python print); () for none
            inner_text = str(text).strip()
            if inner_text[:1] + inner_text[-1:] in ("()", "[]"):
                inner_text = inner_text[1:-1].strip()
            items = [t.strip() for t in inner_text.split(",")] if inner_text else []
            if items and not items[-1] and len(items) > 1:  # (64,) : a trailing comma
                items.pop()
            if any(not t for t in items):
                raise UserError(f"bad value for {key}: {text!r} has an empty item")
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
            if isinstance(text, int):
                return text
            try:
                return int(str(text).strip())
            except ValueError:
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
    except (TypeError, ValueError, OverflowError):
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
        spec = get_algo(d["algo"])
        hp, run = dict(d.get("hp", {})), dict(d.get("run", {}))
        for key in [k for k in hp if (d["algo"], k) in RENAMED]:  # an older run's config
            value, new = hp.pop(key), _renamed(d["algo"], key, warn=False)
            if not run.get(new):  # 0: the algorithm's default, which the old key set
                run[new] = value
        return cls(
            algo=d["algo"],
            env_id=d["env_id"],
            seeds=list(d["seeds"]),
            steps=int(d["steps"]),
            preset=d.get("preset"),
            # an archived config (run.json, a checkpoint) was checked when it was made: read it
            # as it is, even if a domain has narrowed since
            hp=_build(spec.config, hp, "", d["algo"], check=False),
            run=_build(RunOptions, run, "", check=False),
            env=_build(EnvOptions, d.get("env", {}), "env.", check=False),
            doctor=_build(DoctorOptions, d.get("doctor", {}), "doctor.", check=False),
        )

    def flat(self) -> dict[str, Any]:
        """`key -> value` in the `--set` namespace (bare keys, env.*, doctor.*)."""
        out = {**dataclasses.asdict(self.hp), **dataclasses.asdict(self.run)}
        for name in SECTIONS:
            out.update(
                {f"{name}.{k}": v for k, v in dataclasses.asdict(getattr(self, name)).items()}
            )
        return out


def _build(cls, values: dict, prefix: str, algo: str | None = None, check: bool = True):
    """`cls(**values)`, each value parsed to its field's type and (with `check`) checked
    against its domain; `algo` names the algorithm when `cls` is its hyperparameters."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in values.items():
        if not isinstance(k, str) or k not in names:
            raise UserError(f"unknown key {prefix}{k}{did_you_mean(str(k), names)}")
        kwargs[k] = parse_value(v, hints[k], prefix + k)
    if check:
        check_domains(kwargs, prefix, algo)
    try:
        obj = cls(**kwargs)
    except TypeError as e:  # a missing required field
        raise UserError(f"{cls.__name__}: {e}") from None
    if algo and check:
        check_cross(obj, algo)
    return obj


# Settings renamed since runs were archived, {(algo, old key): new key}: archived configs (run.json,
# checkpoints) read the old key as the new one; `--set` and config files say the new name once.
RENAMED = {("a2c", "log_interval"): "log_every"}  # one name for every algorithm's row schedule


def _renamed(algo: str, key: str, warn: bool) -> str:
    new = RENAMED.get((algo, key))
    if new is None:
        return key
    if warn:
        warnings.warn(f"{key} is now {new} (the same for every algorithm)", SettingWarning, 2)
    return new


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
    import tomllib  # parsers for config files: not loaded by every command (`--help`)

    import yaml

    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"config file {path} is not text (not UTF-8 at byte {e.start}); "
            "a config file is YAML, TOML or JSON"
        ) from None
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror or e}") from None
    if "\x00" in text:
        raise UserError(f"config file {path} is not text (it holds NUL bytes)")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml", ".json"):
            data = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
        else:
            raise UserError(f"config file must be .yaml, .yml, .toml or .json: {path}")
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 — yaml and toml raise many types; all mean "bad file"
        detail = " ".join(str(e).split())  # YAML's messages span lines: one line here
        raise UserError(f"cannot parse config file {path}: {detail}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of key: value")
    flat = {}
    for k, v in data.items():
        if not isinstance(k, str):
            raise UserError(f"config file {path}: keys must be setting names, got {k!r}")
        if k in SECTIONS and isinstance(v, dict):
            if not all(isinstance(kk, str) for kk in v):
                raise UserError(f"config file {path}: keys under {k} must be setting names")
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
    spec = get_algo(algo)
    preset = dict(spec.presets.get(env_id, {}))
    preset_steps = preset.pop("steps", None)
    merged = {**preset, **(file_values or {}), **(set_values or {})}
    if "steps" in merged:  # allow steps in a config file
        file_steps = merged.pop("steps")
        steps = steps if steps is not None else parse_steps(file_steps)
    valid = valid_keys(spec.config)
    groups: dict[str, dict] = {"hp": {}, "run": {}, **{s: {} for s in SECTIONS}}
    hp_names = {f.name for f in dataclasses.fields(spec.config)}
    run_names = {f.name for f in dataclasses.fields(RunOptions)}
    for key, value in merged.items():
        key = _renamed(algo, key, warn=True)
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
    steps = parse_steps(steps) if steps is not None else preset_steps or spec.default_steps
    check_seeds(list(seeds))
    return TrainConfig(
        algo=algo,
        env_id=env_id,
        seeds=list(seeds),
        steps=int(steps),
        preset=env_id if spec.presets.get(env_id) else None,
        hp=_build(spec.config, groups["hp"], "", algo),
        run=_build(RunOptions, groups["run"], ""),
        env=_build(EnvOptions, groups["env"], "env."),
        doctor=_build(DoctorOptions, groups["doctor"], "doctor."),
    )
