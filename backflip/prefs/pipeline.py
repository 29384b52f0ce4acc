"""The preference-learning pipeline of one seed (Christiano et al. 2017, §2.2).

Three activities share the seed's process:

1. the **policy** — any backflip algorithm, run unchanged by its own `train(cfg, run)`, on
   training envs wrapped by `LearnedReward` (it never sees the true reward);
2. **labeling** — pairs of recent segments chosen on a schedule and answered at once by a
   simulated teacher (`labelers.Teacher`: the oracle on the true reward, or one of B-Pref's
   imperfect teachers; each label stores which, with its parameters), or queued in the database
   for people on the labeling page of `backflip ui` (`backflip label RUN_ID`; a separate process
   writing to the same SQLite file);
3. **reward-model training** — supervised rounds on the labels in the database.

With `mode=sync` (default) 2 and 3 run inline every `tick_steps` agent steps: deterministic (same
seed, same curves), and no slower when the seeds already fill the cores. With `mode=async` (opt-in)
they run in a background thread while the algorithm's loop runs in the main thread, paced on the
agent's step clock (`rm_updates_per_kstep`): faster on a free core, but the interleaving of the two
threads differs between runs, so results are not reproducible.

**Waiting for a person.** A human-labeled seed never runs ahead of its label schedule by more
than `max_debt` labels: when more due labels than that are unanswered, the policy pauses inside its
env step (status `waiting`, with the labels needed, in status.json, the progress line and the UI)
and goes on once answers bring the debt down to half the bound. The default bound, 0, is lockstep:
each label is asked when it falls due and the policy waits for its answer, so the reward model at
every step has seen exactly the labels the schedule says, and the run is a function of the seed
and the answers (the same person, or a scripted one, gives the same curves, however fast they
answer). A larger bound lets the policy train on while the person catches up: less waiting on
the wall clock, but when each answer arrives then changes the run. A person can end labeling early from the
page ("train on with the labels I gave"): the seed then trains on without asking for more, and
its result records when and by whom. Synthetic labelers answer at once and never wait.

Stages (Rahtz's split modes): `full` (everything), `gather` (initial labels from a random policy
only), `pretrain` (fit the reward model to existing labels only), `policy` (train a policy on a
saved, frozen reward model). Each seed keeps `prefs.sqlite` and `reward_model.pt` in its folder.

Health metrics (docs/metrics.md, "Preferences") are logged through the seed's telemetry: rates in
and out of each store, queue depth, database size, time since the last label, reward-model
losses, accuracy and L2, the correlation of predicted with true returns (of the policy's
episodes, and of its segments: the unit the model is trained to rank), and how many labeled
segments gained or lost true reward. A queue that stops moving (Rahtz's starved segment queue)
shows as `prefs/labels_per_s` at 0 with a growing `prefs/label_debt` and
`prefs/seconds_since_label`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from backflip.errors import UserError
from backflip.prefs.db import PreferenceDB
from backflip.prefs.labelers import BPREF_TEACHERS, LABELERS, Teacher
from backflip.prefs.reward_model import CNNS, PairSet, RewardModel
from backflip.prefs.segments import (
    SELECTIONS,
    LabelSchedule,
    SegmentRecorder,
    SegmentStore,
    select_pairs,
)
from backflip.runs.archive import save_torch

STAGES = ("full", "gather", "pretrain", "policy")
INITIAL_LABELS = "initial labels"
# segment_corr: over the policy's last this many segments (Pong: ~25k agent steps)
SEGMENT_CORR_WINDOW = 1000
PROGRESS_EVERY_S = 2.0  # a long phase's progress goes to the seed's status at most this often
# what the reward model judges, and the policy's reward from it (docs/preferences.md)
REWARD_INPUTS = ("obs+action", "next-obs", "progress")


@dataclass
class PrefsConfig:
    """Preference-learning settings (`--set prefs.KEY=VALUE`)."""

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
    mode: str = "sync"
    """sync (labeling and reward model inline every tick_steps: reproducible) or async (in a
    background thread: faster on a free core, not reproducible)"""
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
    cnn: str = "paper"
    """the reward model's CNN on frames: paper (Christiano et al.'s 4 conv layers, flattened) or
    keypoints (3 conv layers and a spatial softmax: where each feature fires, as coordinates;
    generalizes across positions, what MovingDot84 needs: docs/preferences.md, "From frames")"""
    segment_length: int = 25
    """steps per segment (the paper: 25 for Atari, 1.5 s of simulated time for MuJoCo)"""
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
    """sync mode: agent steps between ticks (labels due, training, metrics)"""
    random_envs: int = 8
    """env copies for the random policy that provides the initial segments"""
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

    def __post_init__(self):
        checks = {
            "prefs.preset must be cpu or paper": self.preset in ("cpu", "paper"),
            "prefs.labels must be >= 0": self.labels >= 0,
            "prefs.labeler must be synthetic, human or bpref-NAME with NAME one of "
            + ", ".join(BPREF_TEACHERS): self.labeler in LABELERS,
            f"prefs.stage must be one of {', '.join(STAGES)}": self.stage in STAGES,
            "prefs.mode must be async or sync": self.mode in ("async", "sync"),
            "prefs.action_input must be concat or heads": self.action_input in ("concat", "heads"),
            "prefs.action_input=heads needs prefs.reward_input=obs+action (the other inputs "
            "judge states alone)": self.action_input == "concat"
            or self.reward_input == "obs+action",
            "prefs.cnn must be one of " + ", ".join(CNNS): self.cnn in CNNS,
            "prefs.segment_length must be >= 1": self.segment_length >= 1,
            "prefs.reward_input must be one of " + ", ".join(REWARD_INPUTS): self.reward_input
            in REWARD_INPUTS,
            "prefs.initial_frac must be in [0, 1]": 0 <= self.initial_frac <= 1,
            "prefs.label_until must be in (0, 1]": 0 < self.label_until <= 1,
            f"prefs.selection must be one of {', '.join(SELECTIONS)}": self.selection in SELECTIONS,
            "prefs.oversample must be >= 1": self.oversample >= 1,
            "prefs.members must be >= 1": self.members >= 1,
            "prefs.noise must be in [0, 1)": 0 <= self.noise < 1,
            "prefs.dropout must be in [0, 1)": 0 <= self.dropout < 1,
            "prefs.error_rate must be in [0, 1]": 0 <= self.error_rate <= 1,
            "prefs.teacher_beta must be a positive number (unset for a perfectly rational "
            "teacher)": self.teacher_beta is None or 0 < self.teacher_beta < math.inf,
            "prefs.teacher_gamma must be in (0, 1]": self.teacher_gamma is None
            or 0 < self.teacher_gamma <= 1,
            "prefs.teacher_mistake must be in [0, 0.5]": self.teacher_mistake is None
            or 0 <= self.teacher_mistake <= 0.5,
            "prefs.teacher_skip must be >= 0": self.teacher_skip is None
            or 0 <= self.teacher_skip < math.inf,
            "prefs.teacher_equal must be >= 0": self.teacher_equal is None
            or 0 <= self.teacher_equal < math.inf,
            "prefs.store_size must be >= 2": self.store_size >= 2,
            "prefs.round_updates must be >= 1": self.round_updates >= 1,
            "prefs.frame_stride must be >= 1": self.frame_stride >= 1,
            "prefs.eval_pairs must be >= 1": self.eval_pairs >= 1,
            "prefs.tick_steps must be >= 1": self.tick_steps >= 1,
            "prefs.max_pending must be >= 1": self.max_pending >= 1,
            "prefs.max_debt must be >= 0": self.max_debt >= 0,
            "prefs.double_share must be in [0, 1]": 0 <= self.double_share <= 1,
        }
        for message, ok in checks.items():
            if not ok:
                raise UserError(message)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, prefs: dict) -> PrefsConfig:
        """The settings a run recorded (`to_dict`, read back from JSON: lists for tuples)."""
        return cls(**{**prefs, "hidden": tuple(prefs.get("hidden", (64, 64)))})

    def teacher(self) -> Teacher:
        """The simulated teacher of a synthetic labeler: B-Pref's named one (or the oracle) with
        the prefs.teacher_* that are set, and `error_rate`."""
        name = (
            self.labeler.removeprefix("bpref-") if self.labeler.startswith("bpref-") else "oracle"
        )
        overrides = {
            key: value
            for key in ("beta", "gamma", "mistake", "skip", "equal")
            if (value := getattr(self, f"teacher_{key}")) is not None
        }
        return Teacher.named(name, **overrides, error_rate=self.error_rate)


def check_action_input(pcfg: PrefsConfig, act_space) -> None:
    """`prefs.action_input=heads` gives one output per action: discrete actions only."""
    if pcfg.action_input == "heads" and not hasattr(act_space, "n"):
        raise UserError(
            "prefs.action_input=heads needs discrete actions (one output per action); this "
            f"env's actions are {act_space}: use prefs.action_input=concat"
        )


def policy_reward(model: RewardModel, reward_input: str, obs, actions, next_obs) -> np.ndarray:
    """The policy's reward for the transitions (obs, actions, next_obs) under `prefs.reward_input`:
    r̂(o, a), r̂(o') (next-obs) or the change r̂(o') − r̂(o) (progress). The env wrapper and the
    relabeling of replay buffers both use it, so they agree."""
    if reward_input == "progress":
        return model.progress(obs, next_obs)
    if reward_input == "next-obs":
        return model.reward(next_obs, actions)
    return model.reward(obs, actions)


def seed_files(run_dir: str | Path, seed: int) -> Path:
    """The seed folder of `run_dir` holding prefs.sqlite / reward_model.pt (same seed, else the
    run's first seed)."""
    from backflip.runs.archive import read_record
    from backflip.runs.layout import seed_dir

    run_dir = Path(run_dir)
    folder = seed_dir(run_dir, seed)
    if (folder / "prefs.sqlite").exists():
        return folder
    seeds = read_record(run_dir)["config"]["seeds"]
    return seed_dir(run_dir, seeds[0])


def build_reward_model(pcfg: PrefsConfig, obs_space, act_space, seed: int) -> RewardModel:
    """The reward-model ensemble `pcfg` describes, freshly initialized (a saved one's state then
    loads into it: `load_reward_model`)."""
    return RewardModel(
        obs_space,
        act_space,
        members=pcfg.members,
        hidden=pcfg.hidden,
        dropout=pcfg.dropout,
        lr=pcfg.rm_lr,
        l2=pcfg.l2,
        batch_size=pcfg.rm_batch,
        noise=pcfg.noise,
        reward_std=pcfg.reward_std,
        rng=np.random.default_rng(seed + 104729),
        frame_stride=pcfg.frame_stride,
        use_actions=pcfg.reward_input == "obs+action",  # next-obs, progress: r̂(o)
        action_heads=pcfg.action_input == "heads",
        cnn=pcfg.cnn,
    )


class Pipeline:
    """Segments, labels and the reward model of one seed, and their health metrics."""

    def __init__(self, pcfg: PrefsConfig, run, obs_space, act_space, db: PreferenceDB):
        self.cfg, self.run, self.db = pcfg, run, db
        self.human = pcfg.labeler == "human"
        self.teacher = pcfg.teacher()
        self.rng = np.random.default_rng(run.seed + 7919)
        self.share_rng = np.random.default_rng(run.seed + 15485863)  # which queries go to two
        check_action_input(pcfg, act_space)
        self.model = build_reward_model(pcfg, obs_space, act_space, run.seed)
        self.frozen = False
        self.snap = self.model.snapshot()
        self.pairs = PairSet(
            pcfg.members, np.random.default_rng(run.seed + 1299709), pcfg.buffer_labels
        )
        self.store = SegmentStore(pcfg.store_size)
        self.recorder: SegmentRecorder | None = None
        self.schedule = LabelSchedule(0, 0, 1)
        self.step = 0
        self.lock = threading.Lock()  # the store and the stats, shared with the worker thread
        self.asked = 0  # queries chosen by this run (labeled, skipped, pending or in the backlog)
        self.backlog: deque = deque()  # a person's chosen pairs not yet in the database
        self.segments_out = 0
        self.updates_done = 0
        self.rm_stats: dict[str, float] = {}
        self.t0 = time.time()
        self._rate_last = (time.time(), 0, 0, 0)  # wall, labels, segments in, segments out
        # per env copy: running predicted and true episode returns; finished ones for metrics
        self.ep_pred: np.ndarray | None = None
        self.ep_true: np.ndarray | None = None
        self.finished = deque(maxlen=20)
        # the policy's recent segments: (learned reward paid, true return), for segment_corr
        self.paid = deque(maxlen=SEGMENT_CORR_WINDOW)
        self.worker: threading.Thread | None = None
        self.stop_event = threading.Event()
        self.worker_error: BaseException | None = None
        self.next_tick = pcfg.tick_steps
        self._last_publish = 0.0
        self.answered = 0  # labeled + skipped queries when the database was last read
        self.ended: dict | None = None  # a person ended labeling early: when, by whom
        self.wait_s = 0.0  # time the policy spent waiting for the person
        self.model_version = 0  # reward-model snapshots made while the policy trains
        self.relabeled_version = 0  # the snapshot the replay buffers' rewards come from
        self.relabels = 0
        self.relabel_s = 0.0
        self._waiting_for: int | None = None  # labels the seed waits for, as last announced
        self._phase: tuple[str, float, int] | None = None  # long phase: name, start, done then
        self._phase_said = 0.0  # when its progress was last announced

    # -- progress of the long phases (gathering, the first labels, pretraining) ---------------

    def progress(self, phase: str, done: int, total: int, unit: str) -> None:
        """Announce how far a long phase has got, with an ETA at its rate so far, through the
        seed's status (status.json, the progress line, the UI): at its start, then at most
        every `PROGRESS_EVERY_S`, and when it is complete."""
        now = time.monotonic()
        if self._phase is None or self._phase[0] != phase:
            self._phase, self._phase_said = (phase, now, done), -math.inf
        if now - self._phase_said < PROGRESS_EVERY_S and done < total:
            return
        self._phase_said = now
        _, t0, done0 = self._phase
        rate = (done - done0) / (now - t0) if now > t0 else 0.0
        eta = (total - done) / rate if rate > 0 else None
        self.run.set_status(
            "running", phase=phase, done=int(done), total=int(total), unit=unit, eta_s=eta
        )

    def end_phase(self) -> None:
        if self._phase is not None:
            self._phase = None
            self.run.set_status("running")

    # -- labels --------------------------------------------------------------------------------

    def n_answered(self) -> int:
        self.answered = self.db.answered()
        return self.answered

    def check_ended(self) -> bool:
        """Has a person ended labeling early (the page's "train on with the labels I gave")?"""
        if self.human and self.ended is None:
            meta = self.db.meta()
            if "labels_ended_at" in meta:
                self.ended = {
                    "step": self.step,
                    "labels": self.n_answered(),
                    "by": meta.get("labels_ended_by", ""),
                    "at": float(meta["labels_ended_at"]),
                }
                self.run.result["labels_ended_early"] = self.ended
        return self.ended is not None

    def ask(self, n: int) -> int:
        """Choose `n` more queries from the store; the synthetic labeler answers them at once. A
        person's wait in `backlog` and go to the database as its pending queries leave room
        (`max_pending`): the pairs are chosen when they are asked for, all at once, so which
        pairs a person sees never depends on how fast they answer. Returns how many were chosen."""
        if self.check_ended():
            return 0
        if self.cfg.stall_labels_after >= 0:  # fault injection: the labeler goes silent
            n = min(n, self.cfg.stall_labels_after - self.asked)
        pairs = self.choose(n) if n > 0 else []
        if self.human:
            self.backlog.extend((left, right, self.step) for left, right in pairs)
            self.show_queries()
        else:
            with self.lock:  # skip and equal thresholds: relative to recent experience's returns
                thresholds = None
                if self.teacher.needs_reference:
                    thresholds = self.teacher.thresholds([s.true_return for s in self.store.items])
            for i, (left, right) in enumerate(pairs):
                if self._phase is not None and self._phase[0] == INITIAL_LABELS:
                    self.progress(INITIAL_LABELS, self.asked + i, self.schedule.total, "labels")
                label = self.teacher.label(left, right, self.rng, thresholds)
                self.db.add_query(
                    left,
                    right,
                    self.step,
                    self.cfg.selection,
                    label,
                    self.teacher.spec,
                    skipped=label is None,
                )
        self.asked += len(pairs)
        self.segments_out += 2 * len(pairs)
        return len(pairs)

    def choose(self, n: int) -> list:
        """`n` pairs of segments from the store, by `prefs.selection`."""
        labeled = None
        if self.cfg.selection == "k-center":  # the pairs labeled so far (as of the last round)
            labeled = [
                (self.pairs.segments[i][0].obs, self.pairs.segments[j][0].obs)
                for i, j in zip(self.pairs.left, self.pairs.right, strict=True)
            ]
        with self.lock:
            return select_pairs(
                self.store,
                n,
                self.rng,
                self.cfg.selection,
                self.snap if self.model.updates else None,
                self.cfg.oversample,
                labeled,
            )

    def show_queries(self) -> None:
        """Move chosen pairs from the backlog into the database while fewer than `max_pending`
        of this run's queries wait for an answer there."""
        room = self.cfg.max_pending - self.db.counts()["pending"] if self.backlog else 0
        while room > 0 and self.backlog:
            left, right, step = self.backlog.popleft()
            shared = self.cfg.double_share > 0 and self.share_rng.random() < self.cfg.double_share
            needs = 2 if shared else 1
            self.db.add_query(left, right, step, self.cfg.selection, needs=needs)
            room -= 1

    def label_debt(self) -> int:
        """Labels due by now that have not been answered (none once labeling was ended)."""
        if self.ended is not None:
            return 0
        return max(0, self.schedule.due(self.step) - self.n_answered())

    def wait_for_person(self) -> None:
        """Pause the policy while the person is more than `max_debt` labels behind the schedule;
        go on once the debt is down to half the bound, labeling was ended, or the seed stops."""
        debt = self.label_debt()
        if debt <= self.cfg.max_debt:
            return
        resume_at = self.cfg.max_debt // 2
        t0 = time.monotonic()
        while debt > resume_at and not self.run.stopping and not self.check_ended():
            self.announce_wait(debt - resume_at)
            if self.cfg.mode == "sync":  # async: the worker thread asks
                self.ask(self.schedule.due(self.step) - self.asked)
            if time.monotonic() - self._last_publish > self.cfg.log_every_s:
                self.publish()
            time.sleep(0.1)
            debt = self.label_debt()
        self.wait_s += time.monotonic() - t0
        self.announce_wait(None)

    def announce_wait(self, labels_needed: int | None) -> None:
        """The seed's status: `waiting` with the labels it needs, or `running` again (None)."""
        if labels_needed == self._waiting_for:
            return
        self._waiting_for = labels_needed
        if labels_needed is None:
            self.run.set_status("running")
        else:
            self.run.set_status(
                "waiting",
                labels_needed=labels_needed,
                labels_due=self.schedule.due(self.step),
                labels_answered=self.answered,
                steps=self.step,
            )

    # -- reward model --------------------------------------------------------------------------

    def refresh_pairs(self) -> int:
        rows = self.db.labels(limit=self.cfg.buffer_labels)

        def load(sid):
            seg = self.db.segment(sid)
            return seg.obs, seg.actions

        return self.pairs.sync(rows, load)

    def train_round(self, n: int, on_update=None) -> None:
        """`n` updates on the current labels, then validation, L2 adaptation, recalibration and
        a new snapshot for the policy; `on_update()` after each update (progress)."""
        self.refresh_pairs()
        if len(self.pairs.train) == 0 or n <= 0:
            return
        losses = []
        for _ in range(n):
            losses.append(self.model.train_step(self.pairs))
            if on_update is not None:
                on_update()
        self.updates_done += n
        cap = self.cfg.eval_pairs
        train_idx, val_idx = self.pairs.train, self.pairs.val
        if len(train_idx) > cap:
            train_idx = self.rng.choice(train_idx, cap, replace=False)
        if len(val_idx) > cap:
            val_idx = np.sort(self.rng.choice(val_idx, cap, replace=False))
        train_loss, train_acc = self.model.evaluate(self.pairs, train_idx)
        val_loss, val_acc = self.model.evaluate(self.pairs, val_idx)
        if len(val_idx):
            self.model.adapt_l2(train_loss, val_loss)
        with self.lock:
            if len(self.store):
                obs, act = self.store.sample_steps(2048, self.rng)
                moves = None
                if self.cfg.reward_input == "progress":  # the scale of one-step changes
                    moves = self.store.sample_transitions(2048, self.rng)
                self.model.calibrate(obs, act, moves)
        self.snap = self.model.snapshot()
        self.model_version += 1
        stats = {
            "reward_model/loss": float(np.nanmean(losses)),
            "reward_model/train_loss": float(train_loss.mean()),
            "reward_model/train_acc": float(np.nanmean(train_acc)),
            "reward_model/l2": float(np.mean(self.model.l2)),
            "reward_model/updates": float(self.model.updates),
            "reward_model/pairs_train": float(len(self.pairs.train)),
            "reward_model/pairs_val": float(len(self.pairs.val)),
            "reward_model/out_std": float(np.mean(self.model.out_std)),
        }
        if len(val_idx):
            stats.update(
                {
                    "reward_model/val_loss": float(val_loss.mean()),
                    "reward_model/val_acc": float(np.nanmean(val_acc)),
                    "reward_model/val_train_loss_ratio": float(
                        val_loss.mean() / max(train_loss.mean(), 1e-8)
                    ),
                }
            )
        with self.lock:
            self.rm_stats.update(stats)
        if self.human and "reward_model/val_acc" in stats:  # shown on the labeling page
            self.db.set_meta(val_acc=stats["reward_model/val_acc"])

    def train_owed(self) -> None:
        """Reward-model rounds owed by the step clock (`rm_updates_per_kstep`)."""
        if self.frozen:
            return
        owed = int(self.cfg.rm_updates_per_kstep * self.step / 1000) - self.updates_done
        while owed > 0 and not self.stop_event.is_set():
            n = min(owed, self.cfg.round_updates)
            self.train_round(n)
            owed -= n
            if len(self.pairs.train) == 0:
                break

    # -- the policy's side ---------------------------------------------------------------------

    def reward(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        """The policy's reward for taking `actions` in `obs` and reaching `next_obs`."""
        with self.run.tel.timer("prefs_reward"):
            return policy_reward(self.snap, self.cfg.reward_input, obs, actions, next_obs)

    def relabel_replay(self) -> None:
        """Recompute the rewards in the algorithm's replay buffers with the newest reward model
        (PEBBLE): an off-policy learner must not train on the judgements of models it has
        since replaced. Runs in the algorithm's thread, between two of its env steps."""
        version, snap = self.model_version, self.snap
        if version == self.relabeled_version or not self.run.replay_buffers:
            return
        t0 = time.perf_counter()
        kind = self.cfg.reward_input
        for buffer, env_action in self.run.replay_buffers:
            buffer.relabel(
                lambda obs, act, nxt, env_action=env_action: policy_reward(
                    snap, kind, obs, env_action(act), nxt
                )
            )
        self.relabel_s += time.perf_counter() - t0
        self.relabels += 1
        self.relabeled_version = version

    def episode_reset(self) -> None:
        n = len(self.recorder.buf) if self.recorder else 0
        self.ep_pred, self.ep_true = np.zeros(n), np.zeros(n)

    def on_step(self, obs, actions, true_reward, reward, valid, done) -> None:
        """One vector step of the policy's training envs (called by `LearnedReward`)."""
        self.step += len(valid)
        with self.run.tel.timer("prefs_segments"):
            segs = self.recorder.add(obs, actions, true_reward, valid, done, self.step, reward)
            if segs:
                self.paid.extend((seg.predicted, seg.true_return) for seg in segs)
                with self.lock:
                    self.store.add(segs)
                    if not self.frozen:
                        self.model.observe(np.concatenate([s.obs for s in segs]))
        self.ep_pred += np.where(valid, reward, 0.0)
        self.ep_true += np.where(valid, true_reward, 0.0)
        for i in np.flatnonzero(done & valid):
            self.finished.append((self.ep_pred[i], self.ep_true[i]))
            self.ep_pred[i] = self.ep_true[i] = 0.0
        if self.worker_error is not None:
            raise RuntimeError("the preference worker thread failed") from self.worker_error
        if self.cfg.relabel and self.model_version != self.relabeled_version:
            self.relabel_replay()
        # the person's pace bounds the policy's (`answered` is refreshed before pausing)
        if self.human and self.schedule.due(self.step) - self.answered > self.cfg.max_debt:
            self.wait_for_person()
        if self.cfg.mode == "sync":
            if self.step >= self.next_tick:
                self.next_tick += self.cfg.tick_steps
                with self.run.tel.timer("prefs_train"):
                    self.tick()
                self.publish()
        elif time.monotonic() - self._last_publish > self.cfg.log_every_s:
            self.publish()

    def tick(self) -> None:
        """Ask the labels that are due, then train the reward model as much as it is owed."""
        if not self.frozen:
            self.ask(self.schedule.due(self.step) - self.asked)
        # sync mode runs inside the algorithm's rollout, often under torch.inference_mode()
        with torch.inference_mode(False), torch.enable_grad():
            self.train_owed()

    def _work(self) -> None:
        try:
            while not self.stop_event.is_set():
                before = (self.asked, self.updates_done)
                self.tick()
                if (self.asked, self.updates_done) == before:
                    self.stop_event.wait(0.02)
        except BaseException as e:  # noqa: BLE001 — re-raised in the main thread by on_step
            self.worker_error = e

    def start_worker(self) -> None:
        if self.cfg.mode == "async" and not self.frozen:
            self.worker = threading.Thread(target=self._work, name="prefs-worker", daemon=True)
            self.worker.start()

    def stop_worker(self) -> None:
        self.stop_event.set()
        if self.worker is not None:
            self.worker.join()
            self.worker = None

    # -- metrics -------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        counts = self.db.counts()
        now = time.time()
        t_last, labels_last, in_last, out_last = self._rate_last
        labels = counts["labeled"] + counts["skipped"]
        dt = max(now - t_last, 1e-6)
        last_label = self.db.last_label_time()
        with self.lock:
            added = self.store.added
            out = {
                "prefs/labels": float(counts["labeled"]),
                "prefs/labels_skipped": float(counts["skipped"]),
                "prefs/labels_due": float(self.schedule.due(self.step)),
                "prefs/label_debt": float(max(0, self.schedule.due(self.step) - labels)),
                "prefs/labels_per_s": (labels - labels_last) / dt,
                "prefs/segments_per_s": (added - in_last) / dt,
                "prefs/segments_out_per_s": (self.segments_out - out_last) / dt,
                "prefs/queue_depth": float(counts["pending"]),
                "prefs/store_size": float(len(self.store)),
                "prefs/seconds_since_label": now - (last_label or self.t0),
                "prefs/db_segments": float(counts["segments"]),
                **{f"prefs/{k}": float(v) for k, v in self.db.shown().items()},
                "prefs/db_mb": self.db.size_bytes() / 2**20,
                "prefs/wait_s": self.wait_s,
                **self.replay_metrics(),
                **self.rm_stats,
            }
        self._rate_last = (now, labels, added, self.segments_out)
        if self.finished:
            pred, true = np.array(self.finished).T
            out["prefs/true_return_mean"] = float(true.mean())
            out["prefs/pred_return_mean"] = float(pred.mean())
            if len(pred) >= 3 and pred.std() > 0 and true.std() > 0:
                out["reward_model/return_corr"] = float(np.corrcoef(pred, true)[0, 1])
        if len(self.paid) >= 20:
            pred, true = np.array(self.paid).T
            if pred.std() > 0 and true.std() > 0:
                out["reward_model/segment_corr"] = float(np.corrcoef(pred, true)[0, 1])
        return out

    def replay_metrics(self) -> dict[str, float]:
        """Replay buffers only: how many reward-model versions behind their rewards are."""
        if not self.run.replay_buffers:
            return {}
        return {
            "prefs/replay_reward_lag": float(self.model_version - self.relabeled_version),
            "prefs/relabels": float(self.relabels),
            "prefs/relabel_s": self.relabel_s,
        }

    def publish(self) -> None:
        """Put the current metrics into the seed's next telemetry row."""
        self._last_publish = time.monotonic()
        self.run.tel.log(**self.metrics())


# --- the seed's program ---------------------------------------------------------------------


def gather_random(pipe: Pipeline, env_id, env_opts, n_segments: int, seed: int) -> int:
    """Fill the store with `n_segments` segments of a uniformly random policy; steps taken."""
    from backflip.envs import make_vec

    envs = make_vec(env_id, pipe.cfg.random_envs, env_opts)
    rec = SegmentRecorder(envs.num_envs, pipe.cfg.segment_length)
    envs.action_space.seed(seed)
    obs, _ = envs.reset(seed=seed)
    prev_done = np.zeros(envs.num_envs, bool)
    steps = 0
    while pipe.store.added < n_segments and not pipe.run.stopping:
        pipe.progress("gathering clips from a random policy", pipe.store.added, n_segments, "clips")
        actions = envs.action_space.sample()
        next_obs, r, term, trunc, _ = envs.step(actions)
        done = term | trunc
        segs = rec.add(obs, actions, np.asarray(r, np.float64), ~prev_done, done, 0)
        if segs:
            pipe.store.add(segs)
            pipe.model.observe(np.concatenate([s.obs for s in segs]))
        obs, prev_done = next_obs, done
        steps += envs.num_envs
    envs.close()
    pipe.progress("gathering clips from a random policy", n_segments, n_segments, "clips")
    return steps


def wait_for_labels(pipe: Pipeline, target: int) -> None:
    """Keep asking until `target` labels are answered (a person may take a while, or end
    labeling early)."""
    last_row = time.monotonic()
    if not pipe.human:  # a person's progress shows as the labels the seed waits for
        pipe.progress(INITIAL_LABELS, pipe.n_answered(), target, "labels")
    while pipe.n_answered() < target and not pipe.run.stopping:
        pipe.ask(target - pipe.asked)
        if not pipe.human:
            if pipe.cfg.stall_labels_after >= 0 and pipe.asked >= pipe.cfg.stall_labels_after:
                return
            continue
        if pipe.check_ended():
            return
        pipe.announce_wait(target - pipe.answered)
        if time.monotonic() - last_row > 2.0:  # the labels so far, for the UI's charts
            last_row = time.monotonic()
            pipe.publish()
            pipe.run.log(0)
        time.sleep(0.1)
    if pipe.human:
        pipe.announce_wait(None)
    else:
        pipe.progress(INITIAL_LABELS, pipe.n_answered(), target, "labels")


def read_reward_model(run_dir: str | Path, seed: int) -> tuple[dict, PrefsConfig]:
    """A run's saved reward model for `seed` (`save_reward_model`'s payload) and its settings."""
    path = seed_files(run_dir, seed) / "reward_model.pt"
    if not path.exists():
        raise UserError(f"no saved reward model in {path.parent}")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        return saved, PrefsConfig.from_dict(saved["prefs"])
    except Exception as e:  # noqa: BLE001 — a truncated or foreign file: one line
        raise UserError(f"cannot read reward model {path}: {type(e).__name__}: {e}") from None


def load_reward_model(pipe: Pipeline, run_dir: str) -> None:
    pipe.model.load_state_dict(read_reward_model(run_dir, pipe.run.seed)[0]["model"])
    pipe.snap = pipe.model.snapshot()
    pipe.frozen = True


def save_reward_model(pipe: Pipeline, folder: Path) -> None:
    payload = {"model": pipe.model.state_dict(), "prefs": pipe.cfg.to_dict()}
    save_torch(payload, folder / "reward_model.pt")


def train_seed(cfg, prefs: dict, run) -> None:
    """One seed of a preference run: labels, reward model and policy (see the module docstring)."""
    from backflip.algos import get_algo
    from backflip.envs import make_env
    from backflip.prefs.wrapper import LearnedReward

    pcfg = PrefsConfig.from_dict(prefs)
    folder = Path(run.out_dir) if run.out_dir is not None else None
    if folder is None:
        raise UserError("a preference run needs an output folder for its database")
    probe = make_env(run.env_id, run.env_opts)
    obs_space, act_space = probe.observation_space, probe.action_space
    probe.close()
    db = PreferenceDB(folder / "prefs.sqlite")
    db.set_meta(
        env_id=run.env_id,
        segment_length=pcfg.segment_length,
        labels_target=pcfg.labels,
        labeler=pcfg.labeler,
        teacher="" if pcfg.labeler == "human" else pcfg.teacher().spec,
        task=pcfg.task,
        obs_shape=",".join(map(str, obs_space.shape)),
    )
    pipe = Pipeline(pcfg, run, obs_space, act_space, db)
    pipe.recorder = SegmentRecorder(1, pcfg.segment_length)
    tel = run.tel
    try:
        if pcfg.import_from:
            src = PreferenceDB(seed_files(pcfg.import_from, run.seed) / "prefs.sqlite")
            n = (
                db.import_from(src, origin=str(pcfg.import_from))
                if db.counts()["labeled"] == 0
                else 0
            )
            src.close()
            tel.log(**{"prefs/labels_imported": float(n)})
        if pcfg.reward_model:
            load_reward_model(pipe, pcfg.reward_model)

        # 1. initial labels from a random policy (also fills the input normalizer)
        initial = round(pcfg.labels * pcfg.initial_frac) if pcfg.stage != "gather" else pcfg.labels
        have = pipe.n_answered()
        if pcfg.stage in ("full", "gather") and not pipe.frozen and pcfg.labels > 0:
            need = max(initial - have, 0)
            segs = min(pcfg.store_size, max(2 * need, 2 * pcfg.random_envs, 16))
            steps = gather_random(pipe, run.env_id, run.env_opts, segs, run.env_seed + 777)
            tel.log(**{"prefs/random_steps": float(steps)})
            pipe.schedule = LabelSchedule(max(initial, have), max(initial, have), 1)
            pipe.asked = have
            wait_for_labels(pipe, max(initial, have))
        elif pcfg.stage == "pretrain" or (pcfg.stage == "full" and pipe.frozen):
            # no random rollouts: calibrate on the labeled segments themselves
            for _, left, right, _ in db.labels():
                for sid in (left, right):
                    seg = db.segment(sid)
                    pipe.store.add([seg])
                    pipe.model.observe(seg.obs)
        if pcfg.stage == "gather":
            pipe.end_phase()
            pipe.publish()
            run.log(0)
            return

        # 2. pretraining on the labels so far
        if not pipe.frozen and pcfg.stage in ("full", "pretrain"):
            total, done = pcfg.pretrain_updates, [0]

            def pretrain_progress():
                done[0] += 1
                pipe.progress("pretraining the reward model", done[0], total, "updates")

            if total > 0:
                pipe.progress("pretraining the reward model", 0, total, "updates")
            left = total
            while left > 0 and not run.stopping:
                n = min(left, pcfg.round_updates)
                pipe.train_round(n, pretrain_progress)
                left -= n
                pipe.publish()
                run.log(0)
            save_reward_model(pipe, folder)
        pipe.end_phase()
        if pcfg.stage == "pretrain":
            return
        if pipe.model.updates == 0 and not pipe.frozen:
            raise UserError(
                "no labels to train the reward model on (--labels 0 needs --reward-model)"
            )

        # 3. the policy, on the learned reward; labeling and reward-model training go on
        spec = get_algo(cfg.algo)
        until = int(run.steps * pcfg.label_until)
        pipe.schedule = LabelSchedule(pcfg.labels, pipe.n_answered(), until, pcfg.label_decay)
        pipe.asked = pipe.n_answered()
        pipe.updates_done = 0
        pipe.relabeled_version = pipe.model_version  # the replay buffers start empty

        def wrap(env):
            pipe.recorder = SegmentRecorder(env.num_envs, pcfg.segment_length)
            pipe.episode_reset()
            return LearnedReward(env, pipe)

        run.vec_wrappers.append(wrap)
        pipe.start_worker()
        try:
            spec.train(cfg.hp, run)
        finally:
            pipe.stop_worker()
            run.vec_wrappers.remove(wrap)
        if run.out_dir is not None:  # the pipeline's final state (async: after the worker stops)
            pipe.publish()
            run.log(pipe.step)
        run.result["labels"] = pipe.db.counts()["labeled"]
        if not pipe.frozen:
            save_reward_model(pipe, folder)
    finally:
        db.close()
