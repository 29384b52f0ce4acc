"""One seed, in its own process: the entry point of every seed, local or a Ray task.

`run_seed(job)` trains one seed of one run (`SeedJob`) and records its outcome in the seed's
status.json whatever happens: `finished`; `failed` (exception: traceback kept; killed by a
signal, e.g. the out-of-memory killer: noticed by the launcher, `final_status`); or
`interrupted` (SIGINT/SIGTERM: the loop stops at the next iteration boundary, metrics are
flushed and a final checkpoint written; a second signal stops at once). Progress goes to the
launcher as messages on a connection (`conn.send(tuple)`): ("progress", seed, step, steps/s,
return), ("status", seed, text), ("warning", seed, text), ("done", seed, status).

The backends (`local.py`, `ray.py`) start seeds; this module is what they share, and it runs in
the seed's process only (it imports torch): the launcher's side of a seed is `job.py`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

import torch

from backflip.algos import get_algo
from backflip.config import TrainConfig
from backflip.doctor.live import LiveDoctor
from backflip.launch.job import SeedJob, write_status
from backflip.prefs.pipeline import train_seed
from backflip.returns import TRAINING_RETURN, TRUE_RETURN
from backflip.runs.archive import (
    NO_SPACE,
    STATUS_RESERVE,
    is_enospc,
    now_iso,
    read_json,
    write_json,
)
from backflip.runs.layout import STATUS, STDERR, STDOUT, TRACEBACK, seed_dir
from backflip.seedrun import NonFiniteError, SeedRun
from backflip.summary import status_text
from backflip.telemetry import cpu_seconds, truncate_logs

PROGRESS_EVERY_S = 0.5
STATUS_EVERY_S = 5.0  # a running seed's step goes to its status.json at most this often


@contextlib.contextmanager
def redirected_output(folder: Path, append: bool):
    """Point this process's stdout/stderr (Python and C level) at the seed's log files, and
    back afterwards (a Ray worker process runs many tasks)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    old_py = sys.stdout, sys.stderr
    mode = "a" if append else "w"
    for fd, name in ((1, STDOUT), (2, STDERR)):
        f = open(folder / name, mode)
        os.dup2(f.fileno(), fd)
        f.close()
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)
        sys.stdout, sys.stderr = old_py


def run_seed(job: SeedJob, conn=None, handle_signals: bool = True) -> dict:
    """A launcher's job (`SeedJob`) as `train_one`: what every backend calls in the process it
    chose for the seed (a fork of the warm server, a Ray worker, a Slurm job, or the command's
    own process with `--inline`)."""
    for path in job.import_paths:  # where the launcher found the run's env module
        if path not in sys.path:
            sys.path.append(path)
    return train_one(
        job.config,
        job.seed,
        seed_dir(Path(job.run_dir), job.seed),
        resume_from=job.resume_from,
        append=job.append,
        conn=conn,
        handle_signals=handle_signals,
    )


def train_one(
    config: TrainConfig | dict,
    seed: int,
    out_dir: str | Path,
    *,
    resume_from: str | None = None,
    append: bool = False,
    conn=None,
    handle_signals: bool = True,
) -> dict:
    """Train one seed of `config` in this process and record its outcome in `out_dir` (the
    seed's folder): algorithm, telemetry, the live doctor, checkpoints (`resume_from`: continue
    from one), its status.json whatever happens. Returns that status.

    Which process it runs in, its stdout and its process group are the caller's (the
    backends'); the seed only sets one torch thread. `conn` receives progress messages
    (`conn.send(tuple)`); if it has `stop_requested()`, that is polled with the progress (how
    the Ray backend asks a seed to stop at an iteration boundary). With `handle_signals`,
    SIGINT and SIGTERM stop it at the next iteration boundary (a second one at once).
    """
    torch.set_num_threads(1)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    status = {
        "seed": seed,
        "status": "running",
        "pid": os.getpid(),
        "host": socket.gethostname(),  # whether `pid` can be checked from here (the label page)
        "started": now_iso(),
        "steps": 0,
    }
    checkpoint = None
    cfg_dict = config if isinstance(config, dict) else config.to_dict()
    before = {"wall_s": 0.0, "cpu_s": 0.0}  # a resumed seed's time so far: its totals go on
    if resume_from:
        checkpoint = torch.load(resume_from, map_location="cpu", weights_only=False)
        status["resumed_from_step"] = status["steps"] = int(checkpoint["step"])
        with contextlib.suppress(Exception):
            previous = read_json(folder / STATUS)
            before = {k: float(previous.get(k) or 0.0) for k in before}
        status["wall_s_before"] = before["wall_s"]
        # rows after the checkpoint are redone
        truncate_logs(folder, int(checkpoint["step"]), checkpoint.get("rows_until"))
    write_json(folder / STATUS, status, reserve=STATUS_RESERVE)  # room for the outcome
    t0 = time.perf_counter()
    run = None
    last_sent = [0.0]
    last_saved = [time.monotonic()]
    ending = [False]  # set before the handlers are reset: a pending one runs during the reset
    poll_stop = getattr(conn, "stop_requested", None)

    def send(*msg):
        if conn is not None:
            try:
                conn.send(msg)
            except (BrokenPipeError, OSError):
                pass

    def on_row(step, row):
        if time.monotonic() - last_saved[0] > STATUS_EVERY_S:  # `show` reads the live step
            last_saved[0] = time.monotonic()
            status["steps"] = int(step)
            write_json(folder / STATUS, status, reserve=STATUS_RESERVE)
        if time.monotonic() - last_sent[0] > PROGRESS_EVERY_S:
            last_sent[0] = time.monotonic()
            ret = row.get(TRUE_RETURN, row.get(TRAINING_RETURN))  # a preference run: the task's
            send("progress", seed, step, row.get("time/sps"), ret)
            if poll_stop is not None and poll_stop():
                run.request_stop()

    def on_warning(message):
        print(f"[doctor] {message}", file=sys.stderr, flush=True)
        send("warning", seed, message)

    detail_keys: set[str] = set()

    def on_result(values):  # something the seed's outcome will say, recorded now
        status.update(values)
        write_json(folder / STATUS, status, reserve=STATUS_RESERVE)

    def on_status(state, detail):  # e.g. a preference run waiting for its person
        for key in detail_keys - detail.keys() - {"steps"}:
            status.pop(key, None)
        detail_keys.clear()
        detail_keys.update(detail)
        status.update(detail, status=state)
        write_json(folder / STATUS, status, reserve=STATUS_RESERVE)
        send("status", seed, status_text(status))

    try:
        cfg = config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)
        cfg_dict = cfg.to_dict()
        spec = get_algo(cfg.algo)
        run = SeedRun(
            cfg,
            seed,
            folder,
            on_row=on_row,
            on_warning=on_warning,
            append=append,
            on_status=on_status,
            on_result=on_result,
        )
        if cfg.doctor.live:
            run.add_monitor(LiveDoctor(cfg))
        if checkpoint is not None:
            run.restore(checkpoint)

        def stop(signum, frame):
            if ending[0]:  # the outcome is being written: a late signal must not cut it short
                return
            if run.stopping:  # second signal: stop now
                raise KeyboardInterrupt
            run.request_stop()
            print(
                f"received {signal.Signals(signum).name}: stopping at the next iteration",
                file=sys.stderr,
                flush=True,
            )

        if handle_signals:
            signal.signal(signal.SIGINT, stop)
            signal.signal(signal.SIGTERM, stop)
            # a seed forked by the warm server starts with these blocked (`warm._handle`): a
            # request that came before this line is delivered to `stop` now
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        if cfg.kind == "prefs":  # the policy trains on a learned reward
            train_seed(cfg, run)
        else:
            spec.train(cfg.hp, run)
        stopped = run.stopping and not (run.solved or run.timed_out or run.completed)
        status["status"] = "interrupted" if stopped else "finished"
    except KeyboardInterrupt:
        status["status"] = "interrupted"
    except NonFiniteError as e:
        status.update(status="failed", error=failure_text(e, run), traceback=traceback.format_exc())
    except BaseException as e:  # noqa: BLE001 — any crash is recorded, never lost
        status.update(status="failed", error=failure_text(e, run), traceback=traceback.format_exc())
    finally:
        ending[0] = True
        if handle_signals:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if run is not None:
            try:
                run.close()
            except Exception as e:  # noqa: BLE001 — the outcome is recorded whatever happens
                if is_enospc(e) and status["status"] != "failed":
                    status.update(status="failed", error=failure_text(e, run))
                traceback.print_exc()
            # the live doctor's last word: the verdicts the summary will give, where they differ
            # from the lines it printed during training
            for monitor in run.monitors:
                if hasattr(monitor, "final") and status["status"] != "failed":
                    for line in monitor.final(folder, cfg_dict):
                        on_warning(line)
            status["steps"] = getattr(run, "step", 0)
            status.update({k: v for k, v in run.result.items() if k != "eval_returns"})
            if "eval_return" in run.result:
                status["final_eval_return"] = run.result["eval_return"]
                status["final_eval_returns"] = run.result["eval_returns"]
        for key in detail_keys - {"steps"}:  # what the seed was waiting for is over
            status.pop(key, None)
        status["wall_s"] = before["wall_s"] + time.perf_counter() - t0
        # this process's CPU time and its children's (a forked seed starts from zero), for
        # compute accounting
        status["cpu_s"] = before["cpu_s"] + cpu_seconds()
        status.pop("wall_s_before", None)
        status["ended"] = now_iso()
        write_status(folder, status)  # the small outcome first, then the traceback
        if status.get("traceback"):
            print(status["traceback"], file=sys.stderr, flush=True)
            try:
                (folder / TRACEBACK).write_text(status["traceback"])
            except OSError:  # a full disk: status.json and stderr.log have it
                (folder / TRACEBACK).unlink(missing_ok=True)
        send("done", seed, status)
    return status


# torch's words when a distribution gets NaN or infinite parameters (the policy's output)


TORCH_NONFINITE = ("probability tensor contains", "expected parameter", "found invalid values")


def failure_text(e: BaseException, run) -> str:
    """The error a failed seed records: no space left on device (a full disk), a non-finite
    policy output named as such (torch says only that a tensor holds NaN), or the exception."""
    if is_enospc(e):
        return f"{NO_SPACE}{f' ({e.filename})' if e.filename else ''}"
    text = str(e) if isinstance(e, NonFiniteError) else f"{type(e).__name__}: {e}"
    bad = getattr(run, "nonfinite_reward", None)
    if bad is not None:  # the env gave it: its learning rate is not to blame
        step, copy, value = bad
        return (
            f"non-finite reward from the environment ({value} at env step {step:,}, env copy "
            f"{copy}), carried into the learner — then: {text}"
        )
    if isinstance(e, NonFiniteError):
        return text
    if isinstance(e, ValueError | RuntimeError) and any(
        w in str(e).lower() for w in TORCH_NONFINITE
    ):
        step = getattr(run, "step", None)
        at = f" after env step {step:,}" if isinstance(step, int) else ""
        return (
            f"non-finite policy output{at}: the network's parameters or inputs became NaN or "
            f"infinite (an update blew up: lower the learning rate, clip gradients) — {text}"
        )
    return text
