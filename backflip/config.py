"""Configuration: typed dataclasses, `--set key=value` overrides and config files.

A run's configuration (`TrainConfig`) has four parts, and a fifth on a preference run, each a
dataclass whose fields carry a one-line docstring (read from the source, CleanRL style, so the
dataclass doubles as `--help`):

- the algorithm's hyperparameters (the `Config` dataclass of `algos/<algo>.py`), addressed by bare keys:
  `lr=3e-4`;
- `RunOptions` (budget-independent run settings such as evaluation and checkpoints), also bare keys:
  `eval_episodes=20`, `device=cuda`;
- `EnvOptions` (wrappers applied to the environment), addressed as `env.<key>`;
- `DoctorOptions` (live diagnosis), addressed as `doctor.<key>`;
- `PrefsConfig` (a preference run's pipeline: `kind="prefs"`), addressed as `prefs.<key>`.

One resolver (`resolve`) for every kind of run; precedence, lowest first: dataclass defaults <
settings derived from the env (a preference run on an env without a preset) < the algorithm's
preset for this env < the preference preset < `--config FILE` < `--set key=value`. Every value
goes through one table of domains (`DOMAINS`) and the cross checks (`check_cross`,
`check_prefs`). The resolved result is stored with every run and read back by
`TrainConfig.from_dict`, which parses every field.
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
    max_steps: int = 0
    """stop training at the first metrics row at or past this many env steps, then evaluate and
    finish as at the end of the budget, while every schedule keeps `steps`' length (0: no limit);
    to compare runs at equal steps within a longer schedule"""

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
    obs_layout: str = "auto"
    """how observations are read (docs/environments.md): auto (Discrete one-hot; Tuple, Dict and
    multi-axis Boxes flattened; frames as images, channels first when the first axis is a short
    stack (<= 4) and channels last otherwise, Gymnasium's convention), or channels_first,
    channels_last, vector (flattened) to override the guess for a 2-D or 3-D Box"""
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


# --- preference runs ---------------------------------------------------------------------------
# The values of the preference settings' choices. The modules that act on them import them from
# here, so the setting, its domain and its meaning have one spelling.
PREF_STAGES = ("full", "gather", "pretrain", "policy")
BPREF_TEACHER_NAMES = ("oracle", "stoc", "mistake", "skip", "equal", "myopic")
LABELERS = ("synthetic", "human", *(f"bpref-{name}" for name in BPREF_TEACHER_NAMES))
REWARD_INPUTS = ("obs+action", "next-obs", "progress")
REWARD_CNNS = ("auto", "paper", "keypoints", "small")
SELECTIONS = ("random", "disagreement", "entropy", "k-center")
HORIZONS = ("auto", "absorb", "restart", "terminal", "variable")


@dataclass
class PrefsConfig:
    """Preference-learning settings (`--set prefs.KEY=VALUE`, a `prefs:` table in a config file):
    the section of a preference run's config (`backflip prefs train`, docs/preferences.md)."""

    preset: str = "cpu"
    """the env's preset these settings start from: cpu, or paper (GPU-scale; `--preset`)"""
    labels: int = 500
    """total labels to ask for (the cap), the initial ones included"""
    labeler: str = "synthetic"
    """synthetic (a teacher simulated on the true reward: the oracle unless prefs.teacher_* say
    otherwise), bpref-NAME (B-Pref's teacher NAME: oracle, stoc, mistake, skip, equal, myopic;
    prefs.teacher_* override its parameters) or human (the labeling page of `backflip ui`)"""
    task: str = ""
    """what makes a clip better, one line shown to the people labeling ("move the dot to the
    centre"); the presets have one, a human-labeled run without one asks for it"""
    stage: str = "full"
    """full, gather (initial labels only), pretrain (reward model only), policy (frozen model)"""
    horizon: str = "auto"
    """how episodes that end early are handled, so that their length cannot carry the reward
    (docs/preferences.md, "The horizon"): every episode lasts the time limit, and after the env
    ends one it goes on in an absorbing state (the last observation held, reward 0, one learned
    value in the reward model: the labels say whether ending is good or bad), for absorb_steps
    steps and then the env restarts inside the episode (restart), or until the time limit
    (absorb); terminal: absorb_steps steps in it, then the episode ends for the learner with the
    absorbing state's value for ever, r̂_abs/(1 − γ) (on-policy learners; docs/preferences.md,
    "What the fixed horizon costs"); variable keeps the env's own episodes (their length leaks
    reward: a warning); auto is terminal for PPO, A2C and VPG, restart for replay learners and
    CEM (said at launch)"""
    absorb_steps: int = 25
    """prefs.horizon=restart (terminal): steps in the absorbing state after the env ends an
    episode, before it restarts (ends): a clip's length (each end costs this many steps of the absorbing state's value,
    and one clip can show it whole; 0: restart at once, as CartPoleFixedHorizon)"""
    horizon_steps: int = 0
    """the fixed horizon's length in agent steps (0: the env's time limit). It shapes the training
    envs only: an env without a time limit is given one here (derived: 1,000) and still
    evaluated on its own episodes, as the true return is reported"""
    mode: str = "sync"
    """sync (labeling and reward model inline every tick_steps: reproducible); pipelined (each
    tick's labels are asked inline, its reward-model training runs in a forked process while
    the policy takes the next tick_steps steps, and the new model is installed at the next tick:
    reproducible, the policy's reward one tick behind sync's, faster on a free core); or async
    (labeling and training in a background thread at their own pace: not reproducible)"""
    reward_input: str = "obs+action"
    """what the reward model judges: obs+action, r̂(o_t, a_t) as in the paper; next-obs, a model
    of states r̂(o), the policy rewarded with r̂ of the state each action leads to (for tasks
    judged by where the agent gets: every move is rewarded at once); or progress, the same model
    of states, the policy rewarded with its change r̂(o_{t+1}) − r̂(o_t) scaled to RMS
    reward_std (potential-based shaping of next-obs: the same optimal policy, a dense signal)"""
    action_input: str = "concat"
    """how a discrete action enters r̂(o, a) (reward_input=obs+action): concat (the paper's: its
    one-hot joins the observation's features before the hidden layer) or heads (the network
    has one output per action and the action picks one: what a CNN on frames needs to learn a
    reward that depends on the action, docs/preferences.md)"""
    cnn: str = "auto"
    """the reward model's CNN on frames: paper (Christiano et al.'s 4 conv layers, flattened; at
    least 43x43 pixels), keypoints (3 conv layers and a spatial softmax: where each feature
    fires, as coordinates; generalizes across positions, what MovingDot84 needs:
    docs/preferences.md, "From frames"; at least 13x13), small (two 3x3 convolutions at full
    resolution, flattened: grids such as MinAtar's 10x10) or auto (paper where it fits, else
    small)"""
    segment_length: int = 25
    """steps per segment (the paper: 25 for Atari, 1.5 s of simulated time for MuJoCo; an env
    without a preset labeled by a person: 1.5 s of its real speed)"""
    render_stride: int = 0
    """a person's clips: the env's frame rendered every k-th step and played at the env's real
    speed (0: the smallest k that keeps clips at 30 frames a second or fewer: 1 for Atari's 15
    steps a second, 5 for Hopper's 125; each frame costs a render, 50 ms for MuJoCo in software)"""
    initial_frac: float = 0.25
    """share of the labels gathered from a random policy before the policy trains"""
    label_until: float = 0.8
    """fraction of the policy's budget by which every label is due"""
    label_decay: float = 0.25
    """tau of the decaying label rate 1/(T + tau), as a fraction of the labeling period"""
    selection: str = "random"
    """query selection: random; or, among `oversample` x random candidates, disagreement (highest
    variance across the ensemble), entropy (most uncertain mean prediction) or k-center (spread
    over observation space; B-Pref)"""
    oversample: int = 10
    """candidate pairs per query drawn for disagreement, entropy and k-center selection"""
    store_size: int = 1000
    """recent segments kept to draw queries from"""
    buffer_labels: int = 3000
    """the reward model trains on the newest this many labels"""
    members: int = 3
    """reward-model ensemble size"""
    hidden: tuple[int, ...] = (64, 64)
    """hidden layers of each member's MLP (the CNN for images has one 64-unit layer)"""
    dropout: float = 0.0
    """dropout rate in the reward model (the paper: 0.5 for Atari), masks shared within a pair"""
    rm_lr: float = 1e-3
    """reward-model Adam learning rate"""
    rm_batch: int = 32
    """pairs per reward-model minibatch"""
    l2: float = 1e-4
    """initial L2 weight decay of each member (then adapted to keep val/train loss in 1.1-1.5)"""
    noise: float = 0.1
    """assumed probability that a label is a uniformly random answer"""
    reward_std: float = 1.0
    """standard deviation of the reward the policy sees (the paper: 1, or 0.05 for Atari)"""
    frame_stride: int = 1
    """reward-model training sums r̂ over every k-th step of each segment (one random offset per
    minibatch) times k: an unbiased estimate of the segment's return from 1/k of its frames
    (1: every step, the paper's loss; validation and the policy's reward always use every step)"""
    eval_pairs: int = 512
    """pairs whose loss and accuracy are computed after each round, for the training and for
    the validation split each (a random subset when there are more)"""
    pretrain_updates: int = 500
    """reward-model updates on the initial labels before the policy starts"""
    rm_updates_per_kstep: float = 10.0
    """reward-model updates per 1,000 agent steps while the policy trains"""
    round_updates: int = 50
    """updates per round; each round ends with validation, L2 adaptation and recalibration"""
    tick_steps: int = 2048
    """sync and pipelined modes: agent steps between ticks (labels due, training, metrics)"""
    random_envs: int = 8
    """env copies for the random policy that provides the initial segments (each starts from
    its own reset: more copies spread the first clips over more of the state space)"""
    explore_steps: int = 0
    """agent steps the policy first spends paid only for reaching observations unlike the recent
    ones (a state-entropy bonus: PEBBLE's unsupervised pre-training); the initial labels are
    then asked on its clips and the random policy's, and the policy goes on from where
    exploration left it (0: none; docs/preferences.md, "Exploration before the labels")"""
    error_rate: float = 0.0
    """synthetic labeler: probability of a uniformly random answer (a flip with half of it)"""
    teacher_beta: float | None = None
    """synthetic labeler: rationality β, P(left) = sigmoid(β (R_left - R_right)) on the true
    returns (per unit of return); unset: perfectly rational, or the bpref-NAME teacher's (stoc: 1)"""
    teacher_gamma: float | None = None
    """synthetic labeler: myopia γ in (0, 1], step t of H weighs γ^(H-t); unset: 1, or the
    bpref-NAME teacher's (myopic: 0.9)"""
    teacher_mistake: float | None = None
    """synthetic labeler: probability ε in [0, 0.5] of flipping the answer; unset: 0, or the
    bpref-NAME teacher's (mistake: 0.1)"""
    teacher_skip: float | None = None
    """synthetic labeler: ε_skip >= 0, "can't tell" when both returns are below ε_skip times an
    average segment's (docs/preferences.md, "Teachers"); unset: 0, or bpref-skip's 0.1"""
    teacher_equal: float | None = None
    """synthetic labeler: ε_equal >= 0, "equally good" when the returns differ by less than
    ε_equal times an average segment's; unset: 0, or bpref-equal's 0.1"""
    teacher_from: str = ""
    """synthetic labeler: where its teacher_* were fitted (`--labeler fitted:RUN[/PERSON]`: a
    simulated copy of a person who labeled RUN, `backflip prefs fit-teacher`); a record only"""
    max_pending: int = 20
    """human labeler: unanswered queries kept ready in the database"""
    max_debt: int = 0
    """human labeler: the policy pauses when more than this many due labels are unanswered, and
    goes on once answers bring the debt down to half of it; 0 (lockstep) waits for every label as
    it falls due, so the run depends only on the seed and the answers, not on when they come"""
    double_share: float = 0.0
    """human labeler: share of queries shown to two people, whose answers combine into one label
    (docs/preferences.md, "Several people")"""
    import_from: str = ""
    """path of a run whose labels (same seed, else its first) start this run (--prefs)"""
    reward_model: str = ""
    """path of a run whose saved reward model this run uses, frozen (--reward-model)"""
    relabel: bool = True
    """off-policy algorithms: recompute the replay buffer's rewards with each new reward model
    (PEBBLE); false keeps the rewards of the model current when each transition was stored"""
    stall_labels_after: int = -1
    """fault injection: the labeler stops answering after this many labels (-1: never)"""
    log_every_s: float = 1.0
    """async mode: seconds between pipeline metric rows"""

    def __post_init__(self):  # a section built by hand (tests, benchmarks) is checked too
        check_domains(dataclasses.asdict(self), "prefs.")
        check_prefs(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, prefs: dict) -> PrefsConfig:
        """The settings a run or a saved reward model recorded (`to_dict`, read back from
        JSON), each parsed to its type: a wrong-typed or unknown value is a UserError."""
        if not isinstance(prefs, dict):
            raise UserError(f"the prefs section must be a mapping, got {type(prefs).__name__}")
        return _build(cls, prefs, "prefs.", check=False)


def check_prefs(p: PrefsConfig) -> None:
    """Preference settings that make sense alone but not together."""
    if p.action_input == "heads" and p.reward_input != "obs+action":
        raise UserError(
            "prefs.action_input=heads needs prefs.reward_input=obs+action (the other inputs "
            "judge states alone)"
        )
    if p.stage == "policy" and not p.reward_model:
        raise UserError("prefs.stage=policy trains on a frozen model: give --reward-model RUN")
    if p.stage == "policy" and p.labels:
        raise UserError("--reward-model trains on a frozen model: drop --labels (or use --prefs)")


SECTIONS = {"env": EnvOptions, "doctor": DoctorOptions}
"""The sections of every run's config, addressed as `section.key`."""
KINDS = {"plain": {}, "prefs": {"prefs": PrefsConfig}}
"""The kinds of run and the sections each adds: a preference run (`backflip prefs train`) has
a `prefs` section."""


ALL_SECTIONS = {name for kind in KINDS for name in (*SECTIONS, *KINDS[kind])}


def sections(kind: str = "plain") -> dict[str, type]:
    """The `section.key` sections of a run of `kind`: env, doctor, and the kind's own."""
    return {**SECTIONS, **KINDS[kind]}


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
# a learning rate below 1e-10 moves no float32 weight: a typo, refused (above 1: a warning)
LR = Domain(1e-10, usual_max=1)
SIZES = Domain(min_len=1, sizes=True)
ACTIVATIONS = Domain(choices=("tanh", "relu", "elu", "leaky_relu"))
CNNS = ("auto", "nature", "keypoints", "small")  # the policy's image encoders (nets.encoder)

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
    "clip": POSITIVE,  # 0 would clip every ratio to 1: no policy update at all
    "vf_coef": NON_NEGATIVE,
    "ent_coef": Domain(usual_min=0),  # < 0 penalizes exploration: the doctor's collapse test
    "max_grad_norm": NON_NEGATIVE,
    "target_kl": NON_NEGATIVE,
    "hidden": SIZES,
    "activation": ACTIVATIONS,
    "cnn": Domain(choices=CNNS),  # nets.encoder's image encoders
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
    "max_steps": NON_NEGATIVE,
    # EnvOptions
    "env.reward_scale": ANY,
    "env.obs_scale": ANY,
    "env.obs_shift": ANY,
    "env.nan_reward_at": at_least(0, special=(-1,)),
    "env.slowdown": Domain(0, 1_000_000),
    "env.max_episode_steps": NON_NEGATIVE,
    "env.frame_stack": Domain(1, 64),
    "env.obs_layout": Domain(choices=("auto", "channels_first", "channels_last", "vector")),
    # PrefsConfig (prefs.*)
    "prefs.preset": Domain(choices=("cpu", "paper")),
    "prefs.labels": Domain(0, 1_000_000),
    "prefs.labeler": Domain(choices=LABELERS),
    "prefs.stage": Domain(choices=PREF_STAGES),
    "prefs.horizon": Domain(choices=HORIZONS),
    "prefs.absorb_steps": Domain(0, 1_000_000),
    "prefs.horizon_steps": NON_NEGATIVE,
    "prefs.mode": Domain(choices=("sync", "pipelined", "async")),
    "prefs.reward_input": Domain(choices=REWARD_INPUTS),
    "prefs.action_input": Domain(choices=("concat", "heads")),
    "prefs.cnn": Domain(choices=REWARD_CNNS),
    "prefs.segment_length": Domain(1, 100_000),
    "prefs.render_stride": Domain(0, 100_000),
    "prefs.initial_frac": UNIT,
    "prefs.label_until": Domain(0, 1, low_open=True),
    "prefs.label_decay": POSITIVE,
    "prefs.selection": Domain(choices=SELECTIONS),
    "prefs.oversample": Domain(1, 1000),
    "prefs.store_size": Domain(2, 10_000_000),
    "prefs.buffer_labels": COUNT,
    "prefs.members": Domain(1, 100),
    "prefs.hidden": SIZES,
    "prefs.dropout": Domain(0, 1, high_open=True),
    "prefs.rm_lr": LR,
    "prefs.rm_batch": Domain(1, 1_000_000),
    "prefs.l2": NON_NEGATIVE,
    "prefs.noise": Domain(0, 1, high_open=True),
    "prefs.reward_std": POSITIVE,
    "prefs.frame_stride": Domain(1, 10_000),
    "prefs.eval_pairs": COUNT,
    "prefs.pretrain_updates": NON_NEGATIVE,
    "prefs.rm_updates_per_kstep": NON_NEGATIVE,
    "prefs.round_updates": COUNT,
    "prefs.tick_steps": COUNT,
    "prefs.random_envs": Domain(1, 4096),
    "prefs.explore_steps": Domain(0, 10**12),
    "prefs.error_rate": UNIT,
    "prefs.teacher_beta": POSITIVE,  # unset (none): perfectly rational
    "prefs.teacher_gamma": DISCOUNT,
    "prefs.teacher_mistake": Domain(0, 0.5),
    "prefs.teacher_skip": NON_NEGATIVE,
    "prefs.teacher_equal": NON_NEGATIVE,
    "prefs.max_pending": COUNT,
    "prefs.max_debt": NON_NEGATIVE,
    "prefs.double_share": UNIT,
    "prefs.stall_labels_after": at_least(0, special=(-1,)),
    "prefs.log_every_s": POSITIVE,
}
ALGO_DOMAINS: dict[tuple[str, str], Domain] = {
    ("a2c", "num_steps"): Domain(1, 1_000_000),
    ("cem", "hidden"): Domain(sizes=True),  # empty: a linear policy
}
# settings whose values the type alone bounds (booleans, device names checked in RunOptions)
UNBOUNDED = {  # free text
    "device",
    "prefs.task",
    "prefs.import_from",
    "prefs.reward_model",
    "prefs.teacher_from",
}

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
    """Everything needed to reproduce a training run. `kind` says what sort of run it is (plain:
    `backflip train`; prefs: the policy trains on a reward learned from preferences, `backflip
    prefs train`, with its settings in `prefs`)."""

    algo: str
    env_id: str
    seeds: list[int]
    steps: int
    hp: Any
    run: RunOptions = field(default_factory=RunOptions)
    env: EnvOptions = field(default_factory=EnvOptions)
    doctor: DoctorOptions = field(default_factory=DoctorOptions)
    preset: str | None = None
    kind: str = "plain"
    prefs: PrefsConfig | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise UserError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if (self.kind == "prefs") != (self.prefs is not None):
            raise UserError("a preference run (kind prefs) and only it has a prefs section")

    def to_dict(self) -> dict:
        out = {
            "algo": self.algo,
            "env_id": self.env_id,
            "seeds": list(self.seeds),
            "steps": self.steps,
            "preset": self.preset,
            "kind": self.kind,
            "hp": dataclasses.asdict(self.hp),
            "run": dataclasses.asdict(self.run),
            "env": dataclasses.asdict(self.env),
            "doctor": dataclasses.asdict(self.doctor),
        }
        if self.prefs is not None:
            out["prefs"] = self.prefs.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """A config as `to_dict` wrote it (run.json, a checkpoint, a job), every value parsed to
        its type: a missing, wrong-typed or unknown field is a one-line UserError, which the
        archive reports as a damaged record. Domains are not re-checked: a config was checked
        when it was made and is read as it is, even if a domain has narrowed since."""
        if not isinstance(d, dict):
            raise UserError(f"a run's config must be a mapping, got {type(d).__name__}")
        missing = [k for k in ("algo", "env_id", "seeds", "steps") if k not in d]
        if missing:
            raise UserError(f"config has no {', '.join(missing)}")
        algo, env_id = d["algo"], d["env_id"]
        if not isinstance(algo, str) or not isinstance(env_id, str):
            raise UserError(f"config: algo and env_id must be text, got {algo!r}, {env_id!r}")
        spec = get_algo(algo)
        sections_ = {}
        for name in ("hp", "run", "env", "doctor"):
            value = d.get(name) or {}
            if not isinstance(value, dict):
                raise UserError(f"config.{name} must be a mapping, got {type(value).__name__}")
            sections_[name] = dict(value)
        hp, run = sections_["hp"], sections_["run"]
        for key in [k for k in hp if (algo, k) in RENAMED]:  # an older run's config
            value, new = hp.pop(key), _renamed(algo, key, warn=False)
            if not run.get(new):  # 0: the algorithm's default, which the old key set
                run[new] = value
        seeds = d["seeds"]
        if not isinstance(seeds, list | tuple):
            raise UserError(f"config.seeds must be a list of seeds, got {seeds!r}")
        check_seeds(list(seeds))
        kind = run_kind(d)
        preset = d.get("preset")
        if preset is not None and not isinstance(preset, str):
            raise UserError(f"config.preset must be text or null, got {preset!r}")
        return cls(
            algo=algo,
            env_id=env_id,
            seeds=list(seeds),
            steps=parse_steps(d["steps"]),
            preset=preset,
            hp=_build(spec.config, hp, "", algo, check=False),
            run=_build(RunOptions, run, "", check=False),
            env=_build(EnvOptions, sections_["env"], "env.", check=False),
            doctor=_build(DoctorOptions, sections_["doctor"], "doctor.", check=False),
            kind=kind,
            prefs=PrefsConfig.from_dict(d["prefs"]) if kind == "prefs" else None,
        )

    def flat(self) -> dict[str, Any]:
        """`key -> value` in the `--set` namespace (bare keys, env.*, doctor.*, prefs.*)."""
        out = {**dataclasses.asdict(self.hp), **dataclasses.asdict(self.run)}
        for name in sections(self.kind):
            out.update(
                {f"{name}.{k}": v for k, v in dataclasses.asdict(getattr(self, name)).items()}
            )
        return out


def run_kind(config: dict) -> str:
    """The kind of run a stored config (`TrainConfig.to_dict`, run.json) describes: its `kind`
    field, or, in records written before there was one, `prefs` where a prefs section is."""
    kind = config.get("kind")
    if kind is None:
        return "prefs" if "prefs" in config else "plain"
    if kind not in KINDS:
        raise UserError(f"config.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


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


def valid_keys(algo_config_cls, kind: str = "plain") -> list[str]:
    """Every key `--set` takes for a run of `kind` with these hyperparameters."""
    keys = [f.name for f in dataclasses.fields(algo_config_cls)]
    keys += [f.name for f in dataclasses.fields(RunOptions)]
    for name, cls in sections(kind).items():
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
        if k in ALL_SECTIONS and isinstance(v, dict):
            if not all(isinstance(kk, str) for kk in v):
                raise UserError(f"config file {path}: keys under {k} must be setting names")
            flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            flat[k] = v
    return flat


def action_defaults(algo: str, env_id: str, action: str | None) -> dict[str, Any]:
    """The settings `algo` takes on `env_id` from its action space `action` where it has no
    preset for the env (PPO on a Box: the PPO paper's continuous-control settings rather than
    its CartPole defaults); {} where a preset names the env or none is defined."""
    spec = get_algo(algo)
    if action is None or env_id in spec.presets:
        return {}
    return dict(spec.action_defaults.get(action, {}))


def resolve(
    algo: str,
    env_id: str,
    seeds: list[int],
    steps: int | None,
    file_values: dict[str, Any] | None = None,
    set_values: dict[str, Any] | None = None,
    kind: str = "plain",
    derived: dict[str, Any] | None = None,
    action: str | None = None,
) -> TrainConfig:
    """The one resolver of a run's configuration: defaults, presets, a config file and `--set`
    values, each type- and domain-checked. Precedence, lowest first:

    1. the dataclasses' defaults, then, on an env the algorithm has no preset for, its defaults
       for the env's action space (`action`, "discrete" or "box": `envs.action_kind`; the
       algorithm's `ACTION_DEFAULTS`, `action_defaults` below);
    2. `derived` (a preference run on an env without a preset: settings derived from the env's
       spaces and horizon, `prefs.derive.env_defaults`);
    3. the algorithm's preset for `env_id` (`algos/settings/<algo>.py: PRESETS`);
    4. a preference run's preset for `env_id` (`prefs/presets.py`: its `prefs.*` settings, its
       policy settings for `algo`, its budget), the one `prefs.preset` names (cpu, or paper);
    5. `file_values` (`--config FILE`), then `set_values` (`--set`; the CLI's shortcuts such as
       `--labels` arrive here as `prefs.labels`).
    """
    if kind not in KINDS:
        raise UserError(f"unknown kind of run {kind!r}; one of {', '.join(KINDS)}")
    spec = get_algo(algo)
    file_values, set_values = dict(file_values or {}), dict(set_values or {})
    algo_preset = dict(spec.presets.get(env_id, {}))
    preset_steps = algo_preset.pop("steps", None)
    kind_preset: dict[str, Any] = {}
    if kind == "prefs":
        from backflip.prefs.presets import PAPER, preset_for  # plain data (layers exception)

        name = set_values.get("prefs.preset", file_values.get("prefs.preset"))
        if name is None:
            device = str(set_values.get("device", file_values.get("device", "cpu")))
            name = "paper" if device.startswith("cuda") and env_id in PAPER else "cpu"
        preset = preset_for(env_id, str(name))
        policy = dict(preset.get("policy", {}).get(algo, {}))
        policy_steps = policy.pop("steps", None)
        prefs_values = {**preset.get("prefs", {}), **policy.pop("prefs", {})}
        kind_preset = {**policy, **{f"prefs.{k}": v for k, v in prefs_values.items()}}
        kind_preset["prefs.preset"] = name
        preset_steps = policy_steps or preset.get("steps") or preset_steps
    by_action = action_defaults(algo, env_id, action)
    merged = {
        **by_action,
        **(derived or {}),
        **algo_preset,
        **kind_preset,
        **file_values,
        **set_values,
    }
    if "steps" in merged:  # allow steps in a config file
        file_steps = merged.pop("steps")
        steps = steps if steps is not None else parse_steps(file_steps)
    valid = valid_keys(spec.config, kind)
    groups: dict[str, dict] = {"hp": {}, "run": {}, **{s: {} for s in sections(kind)}}
    hp_names = {f.name for f in dataclasses.fields(spec.config)}
    run_names = {f.name for f in dataclasses.fields(RunOptions)}
    for key, value in merged.items():
        key = _renamed(algo, key, warn=True)
        section, dot, name = key.partition(".")
        if dot and section in groups and section not in ("hp", "run"):
            groups[section][name] = value
        elif not dot and key in hp_names:
            groups["hp"][key] = value
        elif not dot and key in run_names:
            groups["run"][key] = value
        else:
            where = " (prefs.* keys are for `backflip prefs train`)" if section == "prefs" else ""
            raise UserError(
                f"unknown key {key!r} for {algo}{where}{did_you_mean(key, valid)}; valid keys: "
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
        kind=kind,
        prefs=_build(PrefsConfig, groups["prefs"], "prefs.") if kind == "prefs" else None,
    )
