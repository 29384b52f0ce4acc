"""The preference-learning pipeline of one seed (Christiano et al. 2017, §2.2), in the order it
runs (`train_seed`, then `Pipeline`'s stages in the same order):

0. **what the run starts from**: labels imported from an earlier run (`--prefs`), a saved reward
   model to use frozen (`--reward-model`);
1. **gather**: clips (segments) of a uniformly random policy, and the initial labels on them
   (`initial_frac` of the budget), which may mean waiting for a person;
2. **pretrain**: the reward model on the labels so far (`pretrain_updates`);
3. **the policy**: any backflip algorithm, run unchanged by its own `train(hp, run)`, on training
   envs wrapped by `LearnedReward` (it never sees the true reward). Each of its env steps goes
   through `Pipeline.on_step` (segments, the true returns for metrics); every `tick_steps` agent
   steps a **tick** asks the labels that have fallen due (`LabelSchedule`) and trains the reward
   model as much as the step clock owes it (`rm_updates_per_kstep`), then publishes the metrics.

With `prefs.explore_steps` (PEBBLE's unsupervised pre-training, `explore.py`) stage 1 keeps only
the random clips, stage 2 waits, and the policy's first steps are paid a novelty bonus instead
of r̂; when they are done (`end_exploration`, inside its loop) the initial labels are asked on
the clips stored so far, the reward model is pretrained, and the ticks begin.

Labels come from a simulated teacher (`labelers.Teacher`: the oracle on the true reward, or one
of B-Pref's imperfect teachers; each label stores which, with its parameters), answered at once,
or from people on the labeling page of `backflip ui` (`backflip label RUN_ID`; a separate process
writing to the same SQLite file: the one channel into a running seed, docs/architecture.md).

**The horizon** (`prefs.horizon`, `backflip/envs/horizon.py`). Every env the pipeline makes for
the policy and for the random clips has a fixed horizon: an episode that the env ends early
goes on in an absorbing state until the time limit (or restarts inside the episode), so the
episode's length cannot carry the learned reward; `variable` keeps the env's own episodes.
Evaluation envs are the env's own: the true return reported is the env's.

With `mode=sync` (default) the ticks run inline: deterministic (same seed, same curves), and no
slower when the seeds already fill the cores. With `mode=pipelined` (opt-in) a tick asks its
labels inline, then its reward-model training runs in the background while the policy takes
the next `tick_steps` steps on the model it has; the next tick waits for that training and
installs its model. The background is a forked copy of the seed's process (`forked.py`: the
policy keeps Python's lock to itself, and the copy reads the pipeline exactly as it was at the
fork), or a thread on a frozen copy of the store where there is no `fork` or with
`BACKFLIP_FORK=0`: the same numbers either way (tested). What the training reads is fixed when
it starts (the segments stored so far, the observations' normalizer: the policy's new
observations reach the normalizer at the next tick) and its results are installed at a fixed
step, so a run is as reproducible as sync, with the policy's reward one tick behind; the policy
stops idling while the model trains, which pays when a core is free (one seed per two cores).
With `mode=async` (opt-in) labeling and training run in a background thread at their own pace,
paced on the agent's step clock: faster on a free core, but the interleaving of the two threads
differs between runs, so results are not reproducible.

**Waiting for a person.** A human-labeled seed never runs ahead of its label schedule by more
than `max_debt` labels: when more due labels than that are unanswered, the policy pauses inside its
env step (status `waiting`, with the labels needed, in status.json, the progress line and the UI)
and goes on once answers bring the debt down to half the bound. The default bound, 0, is lockstep:
each label is asked when it falls due and the policy waits for its answer, so the reward model at
every step has seen exactly the labels the schedule says, and the run is a function of the seed
and the answers (the same person, or a scripted one, gives the same curves, however fast they
answer). A larger bound lets the policy train on while the person catches up: less waiting on
the wall clock, but when each answer arrives then changes the run. A person can end labeling
early from the page ("train on with the labels I gave"): the seed then trains on without asking
for more, and its result records when and by whom. Synthetic labelers answer at once and never
wait.

Stages (Rahtz's split modes, `prefs.stage`): `full` (everything), `gather` (stage 1 only),
`pretrain` (stage 2 on existing labels only), `policy` (stage 3 on a saved, frozen reward model).
Each seed keeps `prefs.sqlite` and `reward_model.pt` in its folder.

Health metrics (docs/metrics.md, "Preferences") are logged through the seed's telemetry: rates in
and out of each store, queue depth, database size, time since the last label, reward-model
losses, accuracy and L2, the correlation of predicted with true returns (of the policy's
episodes, and of its segments: the unit the model is trained to rank), how many labeled segments
gained or lost true reward, and what the episodes' ends say (how often the env terminated them,
and whether their length carries the learned return). A queue that stops moving (Rahtz's starved
segment queue) shows as `prefs/labels_per_s` at 0 with a growing `prefs/label_debt` and
`prefs/seconds_since_label`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from backflip.algos import values_ends
from backflip.config import PrefsConfig, TrainConfig
from backflip.envs import steps_per_second
from backflip.envs.horizon import horizon_wrapper
from backflip.envs.wrappers import Chain, RenderFrames, rendered
from backflip.errors import UserError
from backflip.prefs import forked
from backflip.prefs.db import PreferenceDB
from backflip.prefs.derive import check_action_input
from backflip.prefs.labelers import teacher_for
from backflip.prefs.phases import EXPLORING, GATHERING, INITIAL_LABELS, PRETRAINING
from backflip.prefs.reward_model import PairSet, RewardModel
from backflip.prefs.segments import LabelSchedule, SegmentRecorder, SegmentStore, select_pairs
from backflip.runs.archive import save_torch
from backflip.runs.layout import PREFS_DB, REWARD_MODEL, seed_dir
from backflip.video import playback

# segment_corr: over the policy's last this many segments (Pong: ~25k agent steps)
SEGMENT_CORR_WINDOW = 1000
PROGRESS_EVERY_S = 2.0  # a long phase's progress goes to the seed's status at most this often
# gathering random clips gives up after this many env steps per clip wanted (episodes that end
# before a clip fills never give one: a variable horizon on an env that ends early)
GATHER_STEPS_PER_CLIP = 200
# the reward's offset and scale are recomputed after each training round over this many steps,
# half of recent experience, half of the labeled clips (`train_round`)
CALIBRATION_STEPS = 2048


def train_seed(cfg: TrainConfig, run) -> None:
    """One seed of a preference run, stage by stage (the module's docstring)."""
    from backflip.algos import get_algo

    pcfg = cfg.prefs
    if run.out_dir is None:
        raise UserError("a preference run needs an output folder for its database")
    pipe = Pipeline(cfg, run)
    try:
        pipe.start_from()  # 0. labels of an earlier run, a frozen reward model
        pipe.gather()  # 1. random clips and the initial labels
        if pcfg.stage == "gather" or run.stopping:  # a stop: `interrupted`, every label kept
            return
        pipe.pretrain()  # 2. the reward model on the labels so far
        if pcfg.stage == "pretrain" or run.stopping:
            return
        pipe.train_policy(get_algo(cfg.algo))  # 3. the policy on r̂, with its ticks
    finally:
        pipe.close()


class Pipeline:
    """Segments, labels and the reward model of one seed, its stages and its health metrics.

    The stages are its methods, in the order `train_seed` calls them: `start_from`, `gather`,
    `pretrain`, `train_policy` (whose env steps come back through `on_step` and its `tick`s).
    Everything the pipeline changes is its own: the seed's `SeedRun` sees it only through the
    hooks it declares (the training envs' wrappers, the replay buffers it may relabel, the seed's
    status and telemetry)."""

    def __init__(self, cfg: TrainConfig, run):
        from backflip.envs import make_env

        pcfg = cfg.prefs
        self.cfg, self.run = pcfg, run
        self.env_id, self.env_opts = cfg.env_id, cfg.env
        self.steps = cfg.steps
        # the policy's discount: the value of an end under prefs.horizon=terminal (wrapper.py)
        self.gamma = float(getattr(cfg.hp, "gamma", 0.99))
        self.folder = Path(run.out_dir)
        # every env this pipeline makes for the policy and for its clips: a fixed horizon, and
        # for a person the env's own rendered frames of every step (what the page shows)
        self.horizon = horizon_wrapper(pcfg, values_ends(cfg.algo))
        self.render_mode = None
        if pcfg.labeler == "human":
            why = renders(self.env_id, self.env_opts)
            if why is None:
                self.render_mode = "rgb_array"
            else:  # the page draws frames from the observations instead
                run.warn(f"the labeling page shows frames drawn from observations: {why}")
        probe = make_env(self.env_id, self.env_opts)
        # a person's clips play at the env's real speed, a frame rendered every `stride`-th step
        self.stride, clip_fps = playback(steps_per_second(probe), pcfg.render_stride)
        frames = functools.partial(RenderFrames, stride=self.stride, length=pcfg.segment_length)
        self.wrap = Chain(self.horizon, frames if self.render_mode else None)
        self.obs_space, self.act_space = probe.observation_space, probe.action_space
        self.human = pcfg.labeler == "human"
        self.teacher = teacher_for(pcfg)
        self.db = PreferenceDB(self.folder / PREFS_DB)
        self.db.set_meta(
            env_id=self.env_id,
            segment_length=pcfg.segment_length,
            labels_target=pcfg.labels,
            labeler=pcfg.labeler,
            teacher="" if self.human else self.teacher.spec,
            task=pcfg.task,
            obs_shape=",".join(map(str, self.obs_space.shape)),
            fps=clip_fps,  # frames a second of a clip as shown (the env's speed / stride)
            clip_stride=self.stride,
        )
        probe.close()
        self.rng = np.random.default_rng(run.seed + 7919)
        self.share_rng = np.random.default_rng(run.seed + 15485863)  # which queries go to two
        check_action_input(pcfg, hasattr(self.act_space, "n"), self.act_space)
        self.model = build_reward_model(pcfg, self.obs_space, self.act_space, run.seed)
        self.frozen = False
        self.snap = self.model.snapshot(informed=False)  # no label yet: the same for every step
        self.pairs = PairSet(
            pcfg.members, np.random.default_rng(run.seed + 1299709), pcfg.buffer_labels
        )
        self.store = SegmentStore(pcfg.store_size)
        self.recorder = SegmentRecorder(1, pcfg.segment_length, self.stride)
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
        # per env copy: the running env episode's learned and true return and length; finished
        # ones (with whether the env terminated them) for metrics
        self.ep_pred = self.ep_true = self.ep_len = np.zeros(0)
        self.finished: deque = deque(maxlen=20)
        self.env_terminations = 0
        # the policy's recent segments: (learned reward paid, true return), for segment_corr
        self.paid = deque(maxlen=SEGMENT_CORR_WINDOW)
        self.worker: threading.Thread | None = None
        self.stop_event = threading.Event()
        self.worker_error: BaseException | None = None
        # mode=pipelined: the tick's training in the background, what it stages for the next
        # tick (snapshot, stats), and observations held back from the normalizer meanwhile
        self.job: threading.Thread | forked.Forked | None = None
        self.staged: dict | None = None
        self.rows_read: list | None = None  # a forked round: the label rows it trained on
        self.held_obs: list[np.ndarray] = []
        self.next_tick = pcfg.tick_steps
        self.explore_row = pcfg.tick_steps  # while exploring: the next step that publishes
        self._last_publish = 0.0
        self.answered = 0  # labeled + skipped queries when the database was last read
        self.labels_read_at = 0.0  # when the reward model last read its labels
        self.ended: dict | None = None  # a person ended labeling early: when, by whom
        self.wait_s = 0.0  # time the policy spent waiting for the person
        self.model_version = 0  # reward-model snapshots made while the policy trains
        self.relabeled_version = 0  # the snapshot the replay buffers' rewards come from
        self.relabels = 0
        self.relabel_s = 0.0
        self._waiting_for: int | None = None  # labels the seed waits for, as last announced
        self._phase: tuple[str, float, int] | None = None  # long phase: name, start, done then
        self._phase_said = 0.0  # when its progress was last announced
        # prefs.explore_steps: the policy's first steps on a novelty bonus, the initial labels
        # asked when they end (`end_exploration`)
        self.exploring = False
        self.initial_target = 0
        self.bonus = None

    def close(self) -> None:
        self.stop_worker()
        self.stop_event.set()  # a pipelined round under way ends after its current update
        with contextlib.suppress(BaseException):  # an error of its own was raised already
            self.finish_job()
        self.db.close()

    # -- 0. what the run starts from -----------------------------------------------------------

    def start_from(self) -> None:
        """Labels of an earlier run (`prefs.import_from`, once: a resumed seed has them) and a
        saved reward model to use frozen (`prefs.reward_model`)."""
        if self.cfg.import_from:
            src = PreferenceDB(seed_files(self.cfg.import_from, self.run.seed) / PREFS_DB)
            n = 0
            if self.db.counts()["labeled"] == 0:
                n = self.db.import_from(src, origin=str(self.cfg.import_from))
            src.close()
            self.run.tel.log(**{"prefs/labels_imported": float(n)})
        if self.cfg.reward_model:
            saved, _ = read_reward_model(self.cfg.reward_model, self.run.seed)
            self.model.load_state_dict(saved["model"])
            self.snap = self.model.snapshot()
            self.frozen = True

    # -- 1. random clips and the initial labels ------------------------------------------------

    def gather(self) -> None:
        """Clips of a random policy and the initial labels on them (also fills the reward
        model's input normalizer); on a run that only fits a model (stage pretrain, or a frozen
        model), the segments of the labels it has."""
        pcfg = self.cfg
        if pcfg.stage in ("full", "gather") and not self.frozen and pcfg.labels > 0:
            initial = (
                pcfg.labels if pcfg.stage == "gather" else round(pcfg.labels * pcfg.initial_frac)
            )
            have = self.n_answered()
            need = max(initial - have, 0)
            clips = min(pcfg.store_size, max(2 * need, 2 * pcfg.random_envs, 16))
            steps, ends = self.gather_random(clips, self.run.env_seed + 777)
            self.run.tel.log(
                **{"prefs/random_steps": float(steps), "prefs/random_ends": float(ends)}
            )
            target = max(initial, have)
            self.asked = have
            # exploration first (a seed that has labels, resumed or imported, goes on from them)
            self.exploring = pcfg.stage == "full" and pcfg.explore_steps > 0 and have == 0
            if self.exploring:
                self.initial_target = target
            else:
                self.schedule = LabelSchedule(target, target, 1)
                self.wait_for_labels(target)
        elif pcfg.stage == "pretrain" or (pcfg.stage == "full" and self.frozen):
            # no random rollouts: calibrate on the labeled segments themselves
            for _, left, right, _ in self.db.labels():
                for sid in (left, right):
                    seg = self.db.segment(sid)
                    self.store.add([seg])
                    self.model.observe(seg.obs)
        if pcfg.stage == "gather":
            self.end_phase()
            self.publish()
            self.run.log(0)

    def gather_random(self, n_segments: int, seed: int) -> tuple[int, int]:
        """Fill the store with `n_segments` clips of a uniformly random policy on `random_envs`
        env copies (each from its own reset); the env steps it took, and how many episodes the
        env ended early (terminated: what `LearnedReward` counts as an end)."""
        from backflip.envs import make_vec
        from backflip.prefs.wrapper import env_ends

        envs = make_vec(
            self.env_id,
            self.cfg.random_envs,
            self.env_opts,
            wrap=self.wrap,
            render_mode=self.render_mode,
        )
        rec = SegmentRecorder(envs.num_envs, self.cfg.segment_length, self.stride)
        envs.action_space.seed(seed)
        obs, info = envs.reset(seed=seed)
        frames = self.frames_of(info, envs.num_envs)
        prev_done = np.zeros(envs.num_envs, bool)
        steps, ends, cap = 0, 0, GATHER_STEPS_PER_CLIP * n_segments * self.cfg.segment_length
        phase = GATHERING
        try:
            while self.store.added < n_segments and not self.run.stopping:
                self.progress(phase, self.store.added, n_segments, "clips")
                if steps > cap:
                    raise UserError(
                        f"{self.env_id}: {self.store.added} of {n_segments} clips of "
                        f"{self.cfg.segment_length} steps in {steps:,} random steps: its episodes "
                        "end before a clip fills; use prefs.horizon=restart (not "
                        f"{self.cfg.horizon}) or a shorter prefs.segment_length"
                    )
                actions = envs.action_space.sample()
                next_obs, r, term, trunc, info = envs.step(actions)
                done = term | trunc
                absorbing, ended = env_ends(term, info, envs.num_envs)
                ends += int((ended & ~prev_done).sum())
                segs = rec.add(
                    obs,
                    actions,
                    np.asarray(r, np.float64),
                    ~prev_done,
                    done,
                    0,
                    None,
                    absorbing,
                    frames,
                )
                if segs:
                    self.store.add(segs)
                    self.model.observe(np.concatenate([s.obs for s in segs]))
                obs, prev_done = next_obs, done
                frames = self.frames_of(info, envs.num_envs)
                steps += envs.num_envs
        finally:
            envs.close()
        self.progress(phase, n_segments, n_segments, "clips")
        return steps, ends

    def wait_for_labels(self, target: int) -> None:
        """Keep asking until `target` labels are answered (a person may take a while, or end
        labeling early)."""
        last_row = time.monotonic()
        if not self.human:  # a person's progress shows as the labels the seed waits for
            self.progress(INITIAL_LABELS, self.n_answered(), target, "labels")
        while self.n_answered() < target and not self.run.stopping:
            self.ask(target - self.asked)
            if not self.human:
                if self.cfg.stall_labels_after >= 0 and self.asked >= self.cfg.stall_labels_after:
                    return
                continue
            if self.check_ended():
                return
            self.announce_wait(target - self.answered)
            if time.monotonic() - last_row > 2.0:  # the labels so far, for the UI's charts
                last_row = time.monotonic()
                self.publish()
                self.run.log(self.step)
            time.sleep(0.1)
        if self.human:
            self.announce_wait(None)
        else:
            self.progress(INITIAL_LABELS, self.n_answered(), target, "labels")

    # -- 2. pretraining ------------------------------------------------------------------------

    def pretrain(self) -> None:
        """`pretrain_updates` reward-model updates on the labels so far, in rounds, then the
        model is saved (a `gather`/`pretrain` run ends here)."""
        pcfg = self.cfg
        if self.exploring:  # no labels yet: the model is trained when exploration ends
            return
        if not self.frozen and pcfg.stage in ("full", "pretrain"):
            total, phase = pcfg.pretrain_updates, PRETRAINING
            done = 0

            def one_update():
                nonlocal done
                done += 1
                self.progress(phase, done, total, "updates")

            if total > 0:
                self.progress(phase, 0, total, "updates")
            left = total
            while left > 0 and not self.run.stopping:
                n = min(left, pcfg.round_updates)
                self.train_round(n, one_update, stopped=lambda: self.run.stopping)
                left -= n
                self.publish()
                self.run.log(self.step)
            self.save_model()
        self.end_phase()
        if self.run.stopping:
            return
        if pcfg.stage == "full" and self.model.updates == 0 and not self.frozen:
            raise UserError(
                "no labels to train the reward model on (--labels 0 needs --reward-model)"
            )

    # -- 3. the policy on the learned reward, with its ticks -----------------------------------

    def train_policy(self, spec) -> None:
        """The algorithm's own loop on training envs whose reward is r̂ (`LearnedReward`, one
        of the seed's declared env hooks); labeling and reward-model training go on in its
        steps (`on_step`, `tick`). The remaining labels fall due by `label_until` of the
        budget."""
        from backflip.prefs.wrapper import LearnedReward

        pcfg, run = self.cfg, self.run
        self.updates_done = 0
        self.relabeled_version = self.model_version  # the replay buffers start empty
        if self.exploring:  # no label falls due before exploration ends
            from backflip.prefs.explore import NoveltyBonus

            self.schedule = LabelSchedule(0, 0, 1)
            self.bonus = NoveltyBonus(
                self.model.normalize_obs, pcfg.reward_std, image=len(self.obs_space.shape) == 3
            )
            self.next_tick = pcfg.explore_steps
        else:
            self.labels_from_here()

        def learned_reward(envs):
            self.recorder = SegmentRecorder(envs.num_envs, pcfg.segment_length, self.stride)
            self.episode_reset()
            return LearnedReward(envs, self)

        if not self.exploring:
            self.start_worker()
        with run.training_envs(copy=self.wrap, vector=learned_reward, render_mode=self.render_mode):
            spec.train(run.cfg.hp, run)
        self.finish_job()  # pipelined: the last tick's training, whole, installed
        self.stop_worker()
        if self.cfg.mode == "async" and not self.frozen and not run.stopping:
            # the worker paces itself and may lag the step clock (a loaded machine): the labels
            # due by the end are asked all the same (CI: 39 of 40 once)
            self.ask(self.schedule.due(self.step) - self.asked)
        self.publish()  # the pipeline's final state (async: after the worker stops)
        run.log(self.step)
        run.keep(labels=self.db.counts()["labeled"])
        if not self.frozen:
            self.save_model()

    def labels_from_here(self) -> None:
        """The schedule of the labels still to ask while the policy trains: all of them due by
        `label_until` of the budget."""
        pcfg = self.cfg
        until = int(self.steps * pcfg.label_until)
        self.schedule = LabelSchedule(pcfg.labels, self.n_answered(), until, pcfg.label_decay)
        self.asked = self.n_answered()

    def end_exploration(self) -> None:
        """`prefs.explore_steps` are done: the initial labels, asked on the clips in the store
        (the random policy's and the exploring policy's), the reward model's pretraining, and
        from the next step on the policy's reward is r̂ (a replay buffer is relabeled with it)."""
        self.end_phase()
        self.exploring = False
        self.finished.clear()  # its episodes were paid the bonus, not r̂
        self.schedule = LabelSchedule(self.initial_target, self.initial_target, 1)
        self.asked = self.n_answered()
        self.wait_for_labels(self.initial_target)
        if self.run.stopping:
            return
        with torch.inference_mode(False), torch.enable_grad():
            self.pretrain()
        self.labels_from_here()
        self.updates_done = int(self.cfg.rm_updates_per_kstep * self.step / 1000)
        self.next_tick = (self.step // self.cfg.tick_steps + 1) * self.cfg.tick_steps  # the grid
        self.start_worker()

    def frames_of(self, info: dict, n: int) -> list | None:
        """The frames a vector step rendered for a person (None: no one is shown frames)."""
        return rendered(info, n) if self.render_mode else None

    def episode_reset(self) -> None:
        n = len(self.recorder.buf)
        self.ep_pred, self.ep_true, self.ep_len = np.zeros(n), np.zeros(n), np.zeros(n)

    def on_step(
        self, obs, actions, true_reward, reward, valid, done, ended, absorbing=None, frames=None
    ) -> None:
        """One vector step of the policy's training envs (called by `LearnedReward`): the
        segments it completes, the episodes it ends; then, when due, the person's pace, the
        replay buffers' relabeling and a tick. `ended`: the env terminated the copy's episode
        at this step (under a fixed horizon it goes on, absorbed or restarted); `absorbing`: the
        step was taken in the absorbing state; `frames`: the env's rendered frames of `obs`
        (a person labels the run)."""
        self.step += len(valid)
        with self.run.tel.timer("prefs_segments"):
            segs = self.recorder.add(
                obs, actions, true_reward, valid, done, self.step, reward, absorbing, frames
            )
            if segs:
                if not self.exploring:  # what r̂ paid (the bonus says nothing of the task)
                    self.paid.extend((seg.predicted, seg.true_return) for seg in segs)
                with self.lock:
                    self.store.add(segs)
                    if not self.frozen:
                        self.observe(np.concatenate([s.obs for s in segs]))
        # the env's own episodes (what the true return reports): a step in the absorbing state
        # belongs to none; one ends where the env terminates it, or with the fixed-horizon
        # episode it was still in
        live = valid if absorbing is None else valid & ~absorbing
        if live.all():  # most steps: the same sums without the masks
            self.ep_pred += reward
            self.ep_true += true_reward
            self.ep_len += 1.0
        else:
            self.ep_pred += np.where(live, reward, 0.0)
            self.ep_true += np.where(live, true_reward, 0.0)
            self.ep_len += live
        if ended.any() or done.any():  # an episode ends (most steps: none)
            ended = ended & valid
            self.env_terminations += int(ended.sum())
            for i in np.flatnonzero(ended | (done & valid & (self.ep_len > 0))):
                self.finished.append(
                    (self.ep_pred[i], self.ep_true[i], self.ep_len[i], float(ended[i]))
                )
                # the task's return episode by episode, for the doctor (episodes.csv holds r̂)
                self.run.tel.true_episode(self.step, self.ep_true[i], int(self.ep_len[i]))
                self.ep_pred[i] = self.ep_true[i] = self.ep_len[i] = 0.0
        if self.worker_error is not None:
            raise RuntimeError("the preference worker thread failed") from self.worker_error
        if self.exploring:
            self.progress(
                EXPLORING, min(self.step, self.cfg.explore_steps), self.cfg.explore_steps, "steps"
            )
            if self.step >= self.cfg.explore_steps:
                self.end_exploration()
            elif self.step >= self.explore_row:  # on the ticks' grid, not the clock: the same
                tick = self.cfg.tick_steps  # rows run after run
                self.explore_row = (self.step // tick + 1) * tick
                self.publish()
            return
        if self.cfg.relabel and self.model_version != self.relabeled_version:
            self.relabel_replay()
        # the person's pace bounds the policy's (`answered` is refreshed before pausing)
        if self.human and self.schedule.due(self.step) - self.answered > self.cfg.max_debt:
            self.wait_for_person()
        if self.cfg.mode != "async":
            if self.step >= self.next_tick:
                self.next_tick += self.cfg.tick_steps
                with self.run.tel.timer("prefs_train"):  # pipelined: the wait for the last round
                    if self.cfg.mode == "pipelined":
                        self.pipelined_tick()
                    else:
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

    def pipelined_tick(self) -> None:
        """mode=pipelined: install the last tick's training, ask the labels that are due, and
        start this tick's training in the background on what the pipeline holds now (the
        policy goes on with the model it has until the next tick): in a forked process where
        there is one (`forked.py`: the policy keeps Python's lock to itself), else a thread on
        a frozen copy of the store; the same numbers either way."""
        self.finish_job()
        if self.frozen:
            return
        self.ask(self.schedule.due(self.step) - self.asked)
        step = self.step
        self.staged = {}
        if forked.available():
            self.job = forked.Forked(functools.partial(self._forked_round, step))
            return
        self.job = threading.Thread(
            target=self._job, args=(self.store.frozen(), step), name="prefs-round", daemon=True
        )
        self.job.start()

    def _job(self, store, step: int) -> None:
        try:
            with torch.inference_mode(False), torch.enable_grad():
                self.train_owed(step, store)
        except BaseException as e:  # noqa: BLE001 — re-raised in the main thread by finish_job
            self.worker_error = e

    def _forked_round(self, step: int) -> dict:
        """In the forked process: the round on the pipeline as it was at the fork, and what it
        changed, for `finish_job` to install in the parent. The label rows it read go back
        rather than the pairs they load (Atari clips: gigabytes); the parent loads the same."""
        self.db = PreferenceDB(self.db.path)  # never the parent's connection
        self.rows_read = []
        with torch.inference_mode(False), torch.enable_grad():
            self.train_owed(step)
        return {
            "model": self.model,
            "rng": self.rng.bit_generator.state,
            "updates_done": self.updates_done,
            "staged": self.staged,
            "rows_read": self.rows_read,
            "labels_read_at": self.labels_read_at,
        }

    def finish_job(self) -> None:
        """mode=pipelined: wait for the round under way, then install what it staged (its
        snapshot and metrics) and give the normalizer the observations held back meanwhile. A
        forked round under way when the seed stops is ended and dropped."""
        if self.job is None:
            return
        job, self.job = self.job, None
        if isinstance(job, forked.Forked):
            self.staged = None  # the child's copy is the one it filled
            if self.rounds_stopped():
                job.kill()
                staged = {}
            else:
                try:  # tensors unpickled under the rollout's inference mode could not train
                    with torch.inference_mode(False):
                        done = job.join()
                except BaseException as e:
                    raise RuntimeError("the reward model's training round failed") from e
                self.install_forked(done)
                staged = done["staged"] or {}
        else:
            job.join()
            staged, self.staged = self.staged or {}, None
            if self.worker_error is not None:
                raise RuntimeError(
                    "the reward model's training round failed"
                ) from self.worker_error
        if "snap" in staged:
            self.snap = staged["snap"]
            self.model_version += staged["versions"]
        with self.lock:
            self.rm_stats.update(staged.get("stats", {}))
        for obs in self.held_obs:
            self.model.observe(obs)
        self.held_obs = []

    def install_forked(self, done: dict) -> None:
        """A forked round's changes, made here as the round made them there: the pairs synced
        to the rows it read (their bootstrap weights and splits drawn from the same
        generator), its model, the pipeline's generator and update count."""
        for rows in done["rows_read"]:
            self.pairs.sync(rows, self.load_segment)
        self.labels_read_at = done["labels_read_at"]
        vars(self.model).update(vars(done["model"]))  # the same object: references stay valid
        self.rng.bit_generator.state = done["rng"]
        self.updates_done = done["updates_done"]

    def observe(self, obs: np.ndarray) -> None:
        """New observations for the reward model's input normalizer (held back while a
        pipelined round trains on it)."""
        if self.job is not None:
            self.held_obs.append(obs)
        else:
            self.model.observe(obs)

    def rounds_stopped(self) -> bool:
        """Reward-model rounds end: the worker is told to stop, or the seed is."""
        return self.stop_event.is_set() or self.run.stopping

    def train_owed(self, step: int | None = None, store: SegmentStore | None = None) -> None:
        """Reward-model rounds owed by the step clock (`rm_updates_per_kstep`) at `step` (now),
        calibrated over `store` (the pipeline's)."""
        if self.frozen:
            return
        step = self.step if step is None else step
        owed = int(self.cfg.rm_updates_per_kstep * step / 1000) - self.updates_done

        while owed > 0 and not self.rounds_stopped():
            n = min(owed, self.cfg.round_updates)
            self.train_round(n, stopped=self.rounds_stopped, store=store)
            owed -= n
            if len(self.pairs.train) == 0:
                break

    def reward(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        next_obs: np.ndarray,
        absorbing=None,
        absorbing_next=None,
    ) -> np.ndarray:
        """The policy's reward for taking `actions` in `obs` and reaching `next_obs` (either of
        them the absorbing state where `absorbing`, `absorbing_next` say so)."""
        with self.run.tel.timer("prefs_reward"):
            if self.exploring:  # a step taken in the absorbing state reaches nothing new
                return self.bonus(next_obs, absorbing)
            return policy_reward(
                self.snap,
                self.cfg.reward_input,
                obs,
                actions,
                next_obs,
                absorbing,
                absorbing_next,
            )

    def relabel_replay(self) -> None:
        """Recompute the rewards in the algorithm's replay buffers with the newest reward model
        (PEBBLE): an off-policy learner must not train on the judgements of models it has
        since replaced. Runs in the algorithm's thread, between two of its env steps."""
        version, snap = self.model_version, self.snap
        if version == self.relabeled_version or not self.run.replay_buffers:
            return
        t0 = time.perf_counter()
        kind, absorb = self.cfg.reward_input, self.horizon is not None

        def relabeled(obs, act, nxt, env_action):
            # a buffer keeps no info: a step in the absorbing state is one whose observation is
            # held (a transition that leaves the observation exactly as it was, a gridworld's
            # wall, is taken for one: docs/preferences.md, "The horizon")
            held = held_steps(obs, nxt) if absorb else None
            return policy_reward(snap, kind, obs, env_action(act), nxt, held, held)

        for buffer, env_action in self.run.replay_buffers:
            buffer.relabel(
                lambda obs, act, nxt, env_action=env_action: relabeled(obs, act, nxt, env_action)
            )
        self.relabel_s += time.perf_counter() - t0
        self.relabels += 1
        self.relabeled_version = version

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
        """mode=async: labeling and reward-model training in a background thread."""
        if self.cfg.mode == "async" and not self.frozen:
            self.stop_event.clear()
            self.worker = threading.Thread(target=self._work, name="prefs-worker", daemon=True)
            self.worker.start()

    def stop_worker(self) -> None:
        self.stop_event.set()
        if self.worker is not None:
            self.worker.join()
            self.worker = None

    def save_model(self) -> None:
        """The reward model and the settings it was built with (`read_reward_model`)."""
        payload = {"model": self.model.state_dict(), "prefs": self.cfg.to_dict()}
        save_torch(payload, self.folder / REWARD_MODEL)

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
                self.run.keep(labels_ended_early=self.ended)
        return self.ended is not None

    def ask(self, n: int) -> int:
        """Choose `n` more queries from the store; the synthetic labeler answers them at once. A
        person's wait in `backlog` and go to the database as its pending queries leave room
        (`max_pending`): the pairs are chosen when they are asked for, all at once, so which
        pairs a person sees never depends on how fast they answer. Returns how many were chosen."""
        if self.check_ended():
            return 0
        # a pipelined round reads the pairs and draws from the same generator: a person's
        # queries, asked between ticks, wait for it (a synthetic labeler asks only at ticks)
        self.finish_job()
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
            answered = []
            for i, (left, right) in enumerate(pairs):
                if self._phase is not None and self._phase[0] == INITIAL_LABELS:
                    self.progress(INITIAL_LABELS, self.asked + i, self.schedule.total, "labels")
                label = self.teacher.label(left, right, self.rng, thresholds)
                answered.append((left, right, label, label is None))
            if answered:  # one transaction: the teacher's answers arrive together
                self.db.add_queries(answered, self.step, self.cfg.selection, self.teacher.spec)
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
            if self.cfg.mode != "async":  # async: the worker thread asks
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
        self.labels_read_at = time.time()  # answers before this are trained on from now
        rows = self.db.labels(limit=self.cfg.buffer_labels)
        if self.rows_read is not None:  # a forked round: the parent syncs to the same rows
            self.rows_read.append(rows)
        return self.pairs.sync(rows, self.load_segment)

    def load_segment(self, sid: int):
        seg = self.db.segment(sid)
        return seg.obs, seg.actions, seg.absorbing

    def calibration_steps(self, store: SegmentStore | None = None):
        """(obs, actions, absorbing) over which the reward's offset and scale are computed:
        half recent experience, half the labeled clips. Over the policy's experience alone the
        scale shrank as the policy got good (every recent step alike): the model's leftover
        variation, and an end's value with it, grew up to 25x (CartPole, 16 seeds: out_std at
        its floor on 5 seeds, ends worth down to -3,600, gradient spikes 100-1,200x; with the
        labeled clips out_std stayed >= 0.5 and ends in [-170, -105]: docs/preferences.md)."""
        store = self.store if store is None else store
        obs, act, absorbing = store.sample_steps(CALIBRATION_STEPS // 2, self.rng)
        labeled = self.pairs.sample_steps(CALIBRATION_STEPS // 2, self.rng)
        if labeled is None:
            return obs, act, absorbing
        return (
            np.concatenate([obs, labeled[0]]),
            np.concatenate([act, labeled[1]]),
            np.concatenate([absorbing, labeled[2]]),
        )

    def train_round(self, n: int, on_update=None, stopped=None, store=None) -> None:
        """`n` updates on the current labels, then validation, L2 adaptation, recalibration
        over `store` (the pipeline's: recent experience) and a new snapshot for the policy;
        `on_update()` after each update (progress). A round whose `stopped()` turns true ends
        after the update under way (a Ctrl-C during a long pretraining takes effect within one
        update, not one round). In a pipelined round the snapshot and the metrics are staged
        for the next tick (`finish_job`)."""
        store = self.store if store is None else store
        self.refresh_pairs()
        if len(self.pairs.train) == 0 or n <= 0:
            return
        losses = []
        for _ in range(n):
            losses.append(self.model.train_step(self.pairs))
            if on_update is not None:
                on_update()
            if stopped is not None and stopped():
                break
        self.updates_done += len(losses)
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
        probe = None  # one step's input, whose reward in the absorbing state is logged
        with self.lock:
            if len(store):
                obs, act, absorbing = self.calibration_steps(store)
                probe = obs[:1], act[:1]
                moves = None
                if self.cfg.reward_input == "progress":  # the scale of one-step changes
                    moves = store.sample_transitions(2048, self.rng)
                self.model.calibrate(obs, act, moves, absorbing)
        snap = self.model.snapshot(informed=self.pairs.informative())
        staged = self.staged
        if staged is None:
            self.snap = snap
            self.model_version += 1
        else:
            staged["snap"], staged["versions"] = snap, staged.get("versions", 0) + 1
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
        if (
            probe is not None
            and self.cfg.horizon != "variable"
            and self.cfg.reward_input != "progress"
        ):
            # what a step in the absorbing state pays the policy (an end under
            # prefs.horizon=terminal: this over 1 - gamma), beside the other steps' rewards
            held = snap.reward(*probe, np.ones(1, bool))
            stats["reward_model/absorbing_reward"] = float(held[0])
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
        if staged is None:
            with self.lock:
                self.rm_stats.update(stats)
        else:
            staged.setdefault("stats", {}).update(stats)
        if self.human:  # the page shows the accuracy, and which answers were trained on
            self.db.set_meta(
                trained_at=self.labels_read_at,
                **{
                    k: stats[f"reward_model/{k}"]
                    for k in ("val_acc",)
                    if f"reward_model/{k}" in stats
                },
            )

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
                "prefs/labels_equal": float(counts["equal"]),
                "prefs/labels_due": float(self.schedule.due(self.step)),
                # labels owed: none once a person ended labeling
                "prefs/label_debt": 0.0
                if self.ended is not None
                else float(max(0, self.schedule.due(self.step) - labels)),
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
        out["prefs/env_terminations"] = float(self.env_terminations)
        if self.cfg.explore_steps:  # the doctor reads where the reward changed from the bonus
            out["prefs/exploring"] = float(self.exploring)
        if self.finished:
            pred, true, length, ended = np.array(self.finished).T
            out["prefs/true_return_mean"] = float(true.mean())
            out["prefs/pred_return_mean"] = float(pred.mean())
            out["prefs/terminated_frac"] = float(ended.mean())
            if len(pred) >= 3 and pred.std() > 0 and true.std() > 0:
                out["reward_model/return_corr"] = float(np.corrcoef(pred, true)[0, 1])
            # under a variable horizon: does an episode's length carry its learned return? (a
            # fixed horizon's env episodes differ in length, but the policy is not paid by it)
            if self.horizon is None and len(pred) >= 3 and pred.std() > 0 and length.std() > 0:
                out["prefs/len_return_corr"] = float(np.corrcoef(length, pred)[0, 1])
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


# --- what the stages share ------------------------------------------------------------------


def policy_reward(
    model: RewardModel,
    reward_input: str,
    obs,
    actions,
    next_obs,
    absorbing=None,
    absorbing_next=None,
) -> np.ndarray:
    """The policy's reward for the transitions (obs, actions, next_obs) under `prefs.reward_input`:
    r̂(o, a), r̂(o') (next-obs) or the change r̂(o') − r̂(o) (progress); `absorbing`
    (`absorbing_next`): the step was taken in (leads to) the absorbing state of a fixed horizon,
    worth the model's one learned value there. The env wrapper and the relabeling of replay
    buffers both use it, so they agree."""
    if reward_input == "progress":
        return model.progress(obs, next_obs, absorbing, absorbing_next)
    if reward_input == "next-obs":
        return model.reward(next_obs, actions, absorbing_next)
    return model.reward(obs, actions, absorbing)


def held_steps(obs: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """Transitions whose next observation equals their observation exactly: the absorbing
    state's held observation."""
    axes = tuple(range(1, np.ndim(obs)))
    return np.all(np.asarray(obs) == np.asarray(next_obs), axis=axes)


def seed_files(run_dir: str | Path, seed: int) -> Path:
    """The seed folder of `run_dir` holding its preference database and reward model (same
    seed, else the run's first seed)."""
    from backflip.runs.archive import read_record

    run_dir = Path(run_dir)
    folder = seed_dir(run_dir, seed)
    if (folder / PREFS_DB).exists():
        return folder
    seeds = read_record(run_dir)["config"]["seeds"]
    return seed_dir(run_dir, seeds[0])


def build_reward_model(pcfg: PrefsConfig, obs_space, act_space, seed: int) -> RewardModel:
    """The reward-model ensemble `pcfg` describes, freshly initialized (a saved one's state then
    loads into it: `read_reward_model`)."""
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
        min_std=1 / pcfg.segment_length,
        use_actions=pcfg.reward_input == "obs+action",  # next-obs, progress: r̂(o)
        action_heads=pcfg.action_input == "heads",
        cnn=pcfg.cnn,
    )


def read_reward_model(run_dir: str | Path, seed: int) -> tuple[dict, PrefsConfig]:
    """A run's saved reward model for `seed` (`Pipeline.save_model`'s payload) and its
    settings."""
    path = seed_files(run_dir, seed) / REWARD_MODEL
    if not path.exists():
        raise UserError(f"no saved reward model in {path.parent}")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        return saved, PrefsConfig.from_dict(saved["prefs"])
    except Exception as e:  # noqa: BLE001 — a truncated or foreign file: one line
        raise UserError(f"cannot read reward model {path}: {type(e).__name__}: {e}") from None


def renders(env_id: str, opts) -> str | None:
    """Why the env cannot show a person its own frames (render_mode="rgb_array": MuJoCo needs
    an OpenGL library, classic control pygame), or None when it can."""
    from backflip.envs import make_env

    try:
        env = make_env(env_id, opts, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            frame = env.render()
        finally:
            env.close()
    except Exception as e:  # noqa: BLE001 — any failure to render means: draw from observations
        return f"{env_id} cannot render ({type(e).__name__}: {str(e)[:120]})"
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] != 3:
        return f"{env_id}'s render() gave no RGB frame"
    return None
