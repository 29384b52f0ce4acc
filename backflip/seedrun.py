"""`SeedRun`: everything an algorithm's training loop sees of the outside world.

An algorithm's `train(cfg, run)` reads its budget and environment from `run`, makes its training
envs with `run.make_vec(n)` (an off-policy one also shows its replay buffer to
`run.register_replay`), writes metrics through `run.tel`, and at each iteration boundary calls

    run.log(step)                       # one metrics row; live checks; progress
    if run.eval_due(step): run.evaluate(step, act)
    if run.checkpoint_due(step): run.save_checkpoint(step, state())

and stops early when `run.stopping` becomes true (Ctrl-C or SIGTERM), finishing with
`run.finish(step, act, state())`, which evaluates greedily (unless interrupted) and writes the
final checkpoint. Nothing in here calls back into the algorithm.

What others attach to a seed goes through the hooks declared here, never through its
attributes:

    run.training_envs(copy=, vector=, render_mode=)  # a block: wrappers of the training envs
                                                     # (a preference run's horizon, its reward)
    run.register_replay(buffer, env_action)          # an algorithm's buffer; `replay_buffers`
                                                     # reads them (a preference run relabels)
    run.add_monitor(monitor)                          # called with every row (the live doctor)
    run.request_stop()                               # a signal, a backend's stop request
    run.set_status("waiting", labels_needed=3)       # what the seed does besides training
    run.keep(labels_ended_early=...)                 # part of the seed's result, recorded now
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from backflip.config import TrainConfig, check_device
from backflip.envs import episode_limit, make_vec
from backflip.envs.wrappers import FiniteObservations
from backflip.errors import NonFiniteError, UserError
from backflip.runs.archive import save_torch
from backflip.runs.layout import (
    CHECKPOINTS,
    FINAL_CHECKPOINT,
    VIDEOS,
    checkpoint_name,
    env_seed,
    eval_seed,
    video_name,
)
from backflip.telemetry import Telemetry
from backflip.video import make_render_env, record_video


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# the longest greedy evaluation episode of an env without a time limit: the Atari protocol's
# 108,000 frames at frame skip 4 (Machado et al. 2018), the longest the field evaluates. Without
# it an env that never ends its episodes (a continuing task, a greedy policy walking into a
# wall forever) held the seed in its evaluation for ever, after training had finished
EVAL_MAX_STEPS = 27_000


def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    envs,
    episodes: int,
    seed: int,
    max_steps: int | None = None,
):
    """Greedy returns and lengths of one episode on each of `episodes` env copies, each cut
    after `max_steps` (None: run to their ends; a cut one has that length)."""
    obs, _ = envs.reset(seed=seed)
    running = np.ones(episodes, bool)
    ret, length = np.zeros(episodes), np.zeros(episodes, np.int64)
    while running.any():
        obs, r, term, trunc, _ = envs.step(act(obs))
        ret += np.where(running, r, 0.0)
        length += running
        running &= ~(term | trunc)
        if max_steps is not None and length.max() >= max_steps:
            break
    return ret, length


def count_params(state: dict) -> int:
    """Trainable parameters in an algorithm's `state()`: the tensors of its networks' state dicts,
    not counting optimizer state, target networks (copies) or buffers and statistics.
    Convention (docs/experiments.md): networks are stored under keys that do not start with
    `target`, `opt`, `replay`, `buffer`, or end in `_norm`/`_scaler` (statistics) or
    `_target`/`_targ` (target copies: `q_target`, `critic_targ`)."""
    skip_prefix = ("target", "opt", "replay", "buffer")
    total = 0
    for key, value in state.items():
        if key.startswith(skip_prefix) or key.endswith(("_norm", "_scaler", "_target", "_targ")):
            continue
        if (
            isinstance(value, dict)
            and value
            and all(isinstance(v, torch.Tensor) for v in value.values())
        ):
            total += sum(v.numel() for v in value.values() if v.is_floating_point())
    return int(total)


class SeedRun:
    """One seed of one run: budget, env, telemetry, evaluation, checkpoints, stop flag."""

    def __init__(
        self,
        cfg: TrainConfig,
        seed: int,
        out_dir: str | Path | None = None,
        on_row: Callable[[int, dict], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
        append: bool = False,
        on_status: Callable[[str, dict], None] | None = None,
        on_result: Callable[[dict], None] | None = None,
    ):
        self.cfg, self.seed = cfg, seed
        self.env_id, self.env_opts, self.steps = cfg.env_id, cfg.env, cfg.steps
        self.opts = cfg.run
        check_device(cfg.run.device)
        self.device = torch.device(cfg.run.device)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        # set by a signal, by reaching `target_return`, `max_wall_s` or `max_steps`
        self.stopping = False
        self.solved = False
        self.timed_out = False  # stopped by `max_wall_s` or `max_steps`: finishes as at the end
        # the final evaluation ran: the seed is finished even if a stop request lands after it
        # began (it would be `interrupted`, and a resume would evaluate and log it twice)
        self.completed = False
        self.result: dict = {}
        self._on_row, self._on_warning, self._on_status = on_row, on_warning, on_status
        self._on_result = on_result
        # The training envs' hooks (`training_envs`): a wrapper of each env copy and wrappers of
        # the vector env, on every *training* env this seed makes (`make_vec`), never on the
        # evaluation envs: how a preference run has any algorithm train on a learned reward
        # with a fixed horizon.
        self._checked_envs: list[FiniteObservations] = []
        self._copy_wrapper: Callable | None = None
        self._vec_wrappers: list[Callable] = []
        self._render_mode: str | None = None
        # Replay buffers of an off-policy algorithm (`register_replay`), with the map from their
        # stored actions to the env's: a learned reward relabels them when its model changes.
        self._replay_buffers: list[tuple[object, Callable]] = []
        self._warned: set[str] = set()
        self.tel = Telemetry(
            self.out_dir, enabled=cfg.run.telemetry, on_row=self._row, append=append
        )
        self._eval_envs = None
        self._next_eval = cfg.run.eval_every or math.inf
        self._video_env = None
        self._next_video = cfg.run.video_every or math.inf
        self._last_video_step = -1
        self._video_broken = False  # a video failed (no ffmpeg, the env's render): no more
        self._eval_cut_said = False  # evaluation episodes were cut (an env without a time limit)
        self._next_log: int | None = None  # set by the first log_due call
        every = cfg.run.checkpoint_every or max(1, cfg.steps // 4)
        self._ckpt_every, self._next_ckpt = every, every
        self.t_start = time.perf_counter()
        self.eval_time = 0.0
        self._monitors: list[Callable[[int, dict], list[str]]] = []
        # Set by `backflip resume` before `train` runs: the checkpoint's `state` dict and step.
        # An algorithm loads its networks, optimizer and statistics from `restored` and
        # continues counting from `start_step`.
        self.restored: dict | None = None
        self.start_step = 0
        self._rng: dict | None = None  # the checkpoint's RNG states until restore_rng()
        seed_everything(seed)

    @property
    def env_seed(self) -> int:
        """Seed of the first training env copy; copy i gets env_seed + i (`runs/layout.py`)."""
        return env_seed(self.seed)

    def make_vec(self, num_envs: int):
        """The algorithm's training envs: `num_envs` copies of the run's env (NEXT_STEP
        autoreset, `backflip.envs.make_vec`), wrapped as `training_envs` says."""
        envs = self._checked(
            make_vec(
                self.env_id,
                num_envs,
                self.env_opts,
                wrap=self._copy_wrapper,
                render_mode=self._render_mode,
            )
        )
        for wrap in self._vec_wrappers:
            envs = wrap(envs)
        return envs

    @contextlib.contextmanager
    def training_envs(
        self,
        copy: Callable | None = None,
        vector: Callable | None = None,
        render_mode: str | None = None,
    ):
        """Within the block, every training env the algorithm makes has each copy wrapped by
        `copy(env)` (picklable: it is pickled into checkpoints with the envs), made with
        `render_mode`, and the vector env wrapped by `vector(envs)`. The hook a preference run
        trains through: a fixed horizon on each copy (`envs/horizon.py`) and, for a person,
        its rendered frames, the learned reward on the vector env (`prefs/wrapper.py:
        LearnedReward`). Evaluation envs are never wrapped."""
        saved = self._copy_wrapper, list(self._vec_wrappers), self._render_mode
        self._copy_wrapper = copy or self._copy_wrapper
        self._render_mode = render_mode or self._render_mode
        if vector is not None:
            self._vec_wrappers.append(vector)
        try:
            yield
        finally:
            self._copy_wrapper, self._vec_wrappers, self._render_mode = saved

    def _checked(self, envs):
        """With doctor.stop_on_nan, a NaN or infinite observation stops the seed at once, naming
        the env copy and the element, before the network turns it into a torch error."""
        if self.cfg.doctor.stop_on_nan and FiniteObservations.applies(envs):
            envs = FiniteObservations(envs)
            self._checked_envs.append(envs)
        return envs

    @property
    def nonfinite_reward(self) -> tuple[int, int, float] | None:
        """The first non-finite reward any of this seed's checked envs gave: (env step, env
        copy, value), or None."""
        return next((e.bad_reward for e in self._checked_envs if e.bad_reward), None)

    def add_monitor(self, monitor: Callable[[int, dict], list[str]]) -> None:
        """`monitor(step, row) -> [warning, ...]` is called with every metrics row; its lines
        are said once each (`warn`): the live doctor (`doctor/live.py`)."""
        self._monitors.append(monitor)

    @property
    def monitors(self) -> tuple:
        return tuple(self._monitors)

    def request_stop(self) -> None:
        """Stop at the next iteration boundary, with a final checkpoint (a signal, a backend's
        stop request): the loop reads `stopping`."""
        self.stopping = True

    def register_replay(self, buffer, env_action: Callable | None = None) -> None:
        """An off-policy algorithm's replay buffer, whose stored rewards a learned reward model
        may recompute (`buffer.relabel`); `env_action` maps stored actions to what the env was
        given (e.g. [-1, 1] to the action bounds), which is what the reward model judges."""
        self._replay_buffers.append((buffer, env_action or (lambda a: a)))

    @property
    def replay_buffers(self) -> tuple[tuple[object, Callable], ...]:
        """The registered replay buffers with their action maps (read-only: `register_replay`
        adds one), which a preference run relabels when its reward model changes."""
        return tuple(self._replay_buffers)

    def keep(self, **values) -> None:
        """Add `values` to the seed's result now (status.json, `backflip show`), not only at its
        end: what a preference run records when a person ends labeling early."""
        self.result.update(values)
        if self._on_result is not None:
            self._on_result(values)

    def set_status(self, status: str, **detail) -> None:
        """Tell the launcher (status.json, progress line, UI) what the seed is doing when that is
        not plain training: `set_status("waiting", labels_needed=3)` while a preference run waits
        for its labeler, `set_status("running")` when it goes on."""
        if self._on_status is not None:
            self._on_status(status, detail)

    # -- per-iteration -----------------------------------------------------------------------

    def log(self, step: int) -> dict:
        """Write one metrics row for `step` (telemetry, NaN check, live doctor, progress)."""
        if self._rng is not None:
            self._rng = None
            self.warn(
                f"resume: {self.cfg.algo} did not call run.restore_rng(); this resumed seed "
                "will not match an uninterrupted one"
            )
        self.step = step
        row = self.tel.dump(step)
        limit = self.opts.max_wall_s
        if limit and not self.stopping and time.perf_counter() - self.t_start >= limit:
            self.stopping = self.timed_out = True
            self.result["stopped_at_wall_s"] = limit
        if self.opts.max_steps and not self.stopping and step >= self.opts.max_steps:
            self.stopping = self.timed_out = True
            self.result["stopped_at_step"] = step
        return row

    def _row(self, step: int, row: dict) -> None:
        bad = [k for k, v in row.items() if not math.isfinite(v)]
        if bad:
            msg = f"non-finite values at step {step}: {', '.join(sorted(bad)[:6])}" + (
                " ..." if len(bad) > 6 else ""
            )
            if self.cfg.doctor.stop_on_nan:
                raise NonFiniteError(
                    msg + " — stopping this seed (doctor.stop_on_nan=false to go on)"
                )
            self.warn(msg, key="nonfinite")
        for monitor in self._monitors:
            for message in monitor(step, row):
                self.warn(message)
        if self._on_row is not None:
            self._on_row(step, row)

    def warn(self, message: str, key: str | None = None) -> None:
        """A live warning, printed once per key (to the console and the seed's stderr log)."""
        key = key or message
        if key in self._warned:
            return
        self._warned.add(key)
        if self._on_warning is not None:
            self._on_warning(message)

    def log_due(self, step: int, default_every: int = 1000) -> bool:
        """Is a metrics row due at `step`? Every `log_every` env steps (RunOptions), else the
        algorithm's `default_every`; rows fall on multiples of it, so a resume keeps them. Call
        it once per iteration (or env step), before the other reasons for a row."""
        every = self.opts.log_every or default_every
        if self._next_log is None:  # rows at multiples of `every` (also after a resume)
            self._next_log = (self.start_step // every + 1) * every
        if step >= self._next_log:
            self._next_log = (step // every + 1) * every
            return True
        return False

    def eval_due(self, step: int) -> bool:
        """True when a periodic evaluation is due (or a video: `evaluate` records it)."""
        if step >= self._next_eval:
            while self._next_eval <= step:
                self._next_eval += self.opts.eval_every
            return True
        return step >= self._next_video

    def checkpoint_due(self, step: int) -> bool:
        if step >= self._next_ckpt:
            while self._next_ckpt <= step:
                self._next_ckpt += self._ckpt_every
            return True
        return False

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(
        self, step: int, act: Callable[[np.ndarray], np.ndarray], final: bool = False
    ) -> float:
        """Greedy evaluation on separately seeded env copies; logs eval/* into this row.

        With `video_every` set, it also records one greedy episode as MP4 when a video is due
        and at the last evaluation (`final`, or `target_return` reached); the time it takes
        counts in `time/eval_s`.
        """
        t0 = time.perf_counter()
        if self._eval_envs is None:
            self._eval_envs = self._checked(
                make_vec(self.env_id, self.opts.eval_episodes, self.env_opts, evaluation=True)
            )
        limit = None if episode_limit(self.env_id, self.env_opts) else EVAL_MAX_STEPS
        with torch.inference_mode():
            rets, lens = evaluate(
                act,
                self._eval_envs,
                self.opts.eval_episodes,
                eval_seed(self.seed),
                limit,
            )
        cut = 0 if limit is None else int((lens >= limit).sum())
        if cut and not self._eval_cut_said:
            self._eval_cut_said = True
            self.warn(
                f"{cut} of {len(lens)} greedy evaluation episodes cut at {EVAL_MAX_STEPS:,} "
                f"steps: {self.env_id} has no time limit and they did not end (their return "
                "is up to the cut; env.max_episode_steps=N gives the env one)"
            )
        self.tel.log_stats("eval/return", rets)
        self.tel.log(**{"eval/len_mean": float(lens.mean())})
        if limit is not None:  # an env without a time limit: how many were cut
            self.tel.log(**{"eval/cut": float(cut)})
        target = self.opts.target_return
        solved_now = target is not None and rets.mean() >= target and not self.solved
        if solved_now:
            self.solved = self.stopping = True
            self.result.update(solved_step=step, solved_s=time.perf_counter() - self.t_start)
        # the last evaluation (end of budget, or target reached) is always filmed
        if self.out_dir is not None and (
            step >= self._next_video or ((final or solved_now) and self.opts.video_every)
        ):
            while self._next_video <= step:
                self._next_video += self.opts.video_every
            self.record_video(step, act)
        dt = time.perf_counter() - t0
        self.eval_time += dt
        self.tel.log(**{"time/eval_s": dt})
        self.result.update(
            eval_return=float(rets.mean()), eval_returns=rets.tolist(), eval_step=step
        )
        return float(rets.mean())

    def record_video(self, step: int, act: Callable[[np.ndarray], np.ndarray]) -> Path | None:
        """One greedy episode on a rendering env copy -> videos/step_<step>.mp4."""
        if self.out_dir is None or step == self._last_video_step or self._video_broken:
            return None
        self._last_video_step = step
        path = self.out_dir / VIDEOS / video_name(step)
        try:
            if self._video_env is None:
                self._video_env = make_render_env(self.env_id, self.env_opts)
            with torch.inference_mode():
                record_video(act, self._video_env, path, eval_seed(self.seed))
        except UserError as e:  # no ffmpeg, an env that cannot render: the training goes on
            self._video_broken = True
            self.warn(f"video at step {step:,} not recorded, and no more for this seed: {e}")
            return None
        return path

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(
        self,
        step: int,
        state: dict,
        name: str | None = None,
        telemetry: dict | None = None,
        rows_until: int | None = None,
    ) -> Path | None:
        if self.out_dir is None:
            return None
        # metrics first: a checkpoint on disk promises every row up to its step is too (resume)
        self.tel.flush()
        folder = self.out_dir / CHECKPOINTS
        folder.mkdir(exist_ok=True)
        path = folder / (name or checkpoint_name(step))
        payload = {
            "step": step,
            "algo": self.cfg.algo,
            "env_id": self.env_id,
            "seed": self.seed,
            "config": self.cfg.to_dict(),
            "state": state,
            "telemetry": telemetry or self.tel.state(),
            # metric rows a resume keeps (see `finish`); later ones are written again
            "rows_until": step if rows_until is None else rows_until,
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
        }
        save_torch(payload, path)  # atomic; a full disk raises OSError(ENOSPC)
        self.result["checkpoint"] = str(path)
        return path

    def restore(self, checkpoint: dict) -> None:
        """Continue from a checkpoint written by `save_checkpoint` (`backflip resume`).

        Sets `restored` (the algorithm's `state()` dict) and `start_step`, and puts back what
        SeedRun itself owns: the global RNG states, the telemetry's episode window and clock, and
        the evaluation and checkpoint schedules. The algorithm restores the rest from `restored`
        (see docs/experiments.md, "What an algorithm must put in state()") and then calls
        `restore_rng()`.
        """
        self.restored, self.start_step = checkpoint["state"], int(checkpoint["step"])
        self.step = self.start_step
        self._rng = checkpoint["rng"]
        self.tel.restore(checkpoint.get("telemetry"), self.start_step, checkpoint.get("rows_until"))
        if self.opts.eval_every:
            self._next_eval = self.opts.eval_every * (self.start_step // self.opts.eval_every + 1)
        self._next_ckpt = self._ckpt_every * (self.start_step // self._ckpt_every + 1)
        self.result["resumed_from_step"] = self.start_step

    def restore_rng(self) -> None:
        """Put back the checkpoint's global RNG states (torch, NumPy, Python). An algorithm calls
        this at the end of its restore block: building its networks consumed random numbers."""
        torch.set_rng_state(self._rng["torch"])
        np.random.set_state(self._rng["numpy"])
        random.setstate(self._rng["python"])
        self._rng = None

    def finish(self, step: int, act: Callable[[np.ndarray], np.ndarray], state: dict) -> None:
        """End of training: final greedy evaluation, row, final checkpoint.

        Skips the evaluation when interrupted, and when `target_return` was reached (the
        evaluation that reached it is the final one); a seed stopped by `max_wall_s` or `max_steps` evaluates.
        """
        self.step = step
        tel_state = rows_until = None
        if not self.stopping or self.timed_out:
            self.evaluate(step, act, final=True)
            self.tel.dump(step)
            self.completed = True
        elif self.tel.pending():
            # interrupted between two metrics rows: flush what was stored since the last one as
            # a row now (nothing is lost), while the checkpoint keeps it un-flushed so that a
            # resume drops this extra row and goes on exactly like an uninterrupted run
            tel_state, rows_until = self.tel.state(), self.tel.last_row_step
            self.tel.dump(step)
        self.save_checkpoint(
            step, state, name=FINAL_CHECKPOINT, telemetry=tel_state, rows_until=rows_until
        )
        self.result["steps"] = step
        self.result["params"] = count_params(state)
        train_time = time.perf_counter() - self.t_start - self.eval_time
        self.result["sps"] = (step - self.start_step) / train_time if train_time > 0 else 0.0

    def close(self) -> None:
        self.tel.close()
        if self._eval_envs is not None:
            self._eval_envs.close()
        if self._video_env is not None:
            self._video_env.close()
