"""Seeds in parallel: each seed is its own OS process with one torch thread.

`run_jobs(jobs, workers)` keeps at most `workers` seed processes alive, shows their progress
(rich), and returns each job's final status. A job is one seed of one run, so a sweep's runs
share one pool. Processes come from a forkserver that has already imported torch and gymnasium,
so a seed starts in milliseconds, not seconds. `backend="ray"` runs the same jobs as Ray tasks
instead (`backflip/ray_backend.py`); the archive is written the same way either way.

Every seed process records its own outcome in `seeds/<seed>/status.json`, whatever happens:
`finished`; `failed` (exception: traceback kept; killed by a signal, e.g. the out-of-memory
killer: noticed by the parent); or `interrupted` (SIGINT/SIGTERM: the loop stops at the next
iteration boundary, metrics are flushed and a final checkpoint written; a second signal stops at
once). Seeds run in their own process groups, so Ctrl-C in the terminal (or `timeout -s INT`, or
SIGTERM) reaches the launcher alone, which forwards one SIGTERM to each seed, and SIGINT on a
second signal.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

from backflip.returns import TRAINING_RETURN, TRUE_RETURN
from backflip.runs.archive import (
    NO_SPACE,
    STATUS_RESERVE,
    is_enospc,
    now_iso,
    read_json,
    seed_dir,
    write_json,
)
from backflip.summary import status_text

PROGRESS_EVERY_S = 0.5
PHASE_PRINT_S = 30.0  # plain (non-terminal) output: a long phase's progress at most this often
BACKENDS = ("local", "ray")


@dataclass
class SeedJob:
    run_dir: str
    seed: int
    config: dict
    append: bool = False  # resume: append to existing metrics
    resume_from: str | None = None  # resume: the checkpoint to continue from
    label: str = ""  # how the progress display names the run (when several share a pool)


# --- inside the seed process ---------------------------------------------------------------------


@contextlib.contextmanager
def redirected_output(folder: Path, append: bool):
    """Point this process's stdout/stderr (Python and C level) at the seed's log files, and
    back afterwards (a Ray worker process runs many tasks)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    old_py = sys.stdout, sys.stderr
    mode = "a" if append else "w"
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
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
    """Train one seed and record its outcome; the entry point of a seed process.

    `conn` receives progress messages (`conn.send(tuple)`); if it has `stop_requested()`, that is
    polled with the progress (how the Ray backend asks a seed to stop at an iteration boundary).
    """
    import torch

    from backflip.algos import get_algo
    from backflip.config import TrainConfig
    from backflip.seedrun import NonFiniteError, SeedRun
    from backflip.telemetry import truncate_logs

    torch.set_num_threads(1)
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    status = {
        "seed": job.seed,
        "status": "running",
        "pid": os.getpid(),
        "host": socket.gethostname(),  # whether `pid` can be checked from here (the label page)
        "started": now_iso(),
        "steps": 0,
    }
    checkpoint = None
    before = {"wall_s": 0.0, "cpu_s": 0.0}  # a resumed seed's time so far: its totals go on
    if job.resume_from:
        checkpoint = torch.load(job.resume_from, map_location="cpu", weights_only=False)
        status["resumed_from_step"] = status["steps"] = int(checkpoint["step"])
        with contextlib.suppress(Exception):
            previous = read_json(folder / "status.json")
            before = {k: float(previous.get(k) or 0.0) for k in before}
        status["wall_s_before"] = before["wall_s"]
        # rows after the checkpoint are redone
        truncate_logs(folder, int(checkpoint["step"]), checkpoint.get("rows_until"))
    write_json(folder / "status.json", status, reserve=STATUS_RESERVE)  # room for the outcome
    t0 = time.perf_counter()
    run = None
    last_sent = [0.0]
    poll_stop = getattr(conn, "stop_requested", None)

    def send(*msg):
        if conn is not None:
            try:
                conn.send(msg)
            except (BrokenPipeError, OSError):
                pass

    def on_row(step, row):
        if time.monotonic() - last_sent[0] > PROGRESS_EVERY_S:
            last_sent[0] = time.monotonic()
            ret = row.get(TRUE_RETURN, row.get(TRAINING_RETURN))  # a preference run: the task's
            send("progress", job.seed, step, row.get("time/sps"), ret)
            if poll_stop is not None and poll_stop():
                run.stopping = True

    def on_warning(message):
        print(f"[doctor] {message}", file=sys.stderr, flush=True)
        send("warning", job.seed, message)

    detail_keys: set[str] = set()

    def on_status(state, detail):  # e.g. a preference run waiting for its person
        for key in detail_keys - detail.keys() - {"steps"}:
            status.pop(key, None)
        detail_keys.clear()
        detail_keys.update(detail)
        status.update(detail, status=state)
        write_json(folder / "status.json", status, reserve=STATUS_RESERVE)
        send("status", job.seed, status_text(status))

    try:
        cfg = TrainConfig.from_dict(job.config)
        spec = get_algo(cfg.algo)
        run = SeedRun(
            cfg,
            job.seed,
            folder,
            on_row=on_row,
            on_warning=on_warning,
            append=job.append,
            on_status=on_status,
        )
        if cfg.doctor.live:
            from backflip.doctor.live import LiveDoctor

            run.monitors.append(LiveDoctor(cfg))
        if checkpoint is not None:
            run.restore(checkpoint)

        def stop(signum, frame):
            if run.stopping:  # second signal: stop now
                raise KeyboardInterrupt
            run.stopping = True
            print(
                f"received {signal.Signals(signum).name}: stopping at the next iteration",
                file=sys.stderr,
                flush=True,
            )

        if handle_signals:
            signal.signal(signal.SIGINT, stop)
            signal.signal(signal.SIGTERM, stop)
        if "prefs" in job.config:  # a preference run: the policy trains on a learned reward
            from backflip.prefs.pipeline import train_seed

            train_seed(cfg, job.config["prefs"], run)
        else:
            spec.train(cfg.hp, run)
        stopped = run.stopping and not (run.solved or run.timed_out)
        status["status"] = "interrupted" if stopped else "finished"
    except KeyboardInterrupt:
        status["status"] = "interrupted"
    except NonFiniteError as e:
        status.update(status="failed", error=str(e), traceback=traceback.format_exc())
    except BaseException as e:  # noqa: BLE001 — any crash is recorded, never lost
        status.update(status="failed", error=failure_text(e, run), traceback=traceback.format_exc())
    finally:
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
                    for line in monitor.final(folder, job.config):
                        on_warning(line)
            status["steps"] = getattr(run, "step", 0)
            status.update({k: v for k, v in run.result.items() if k != "eval_returns"})
            if "eval_return" in run.result:
                status["final_eval_return"] = run.result["eval_return"]
                status["final_eval_returns"] = run.result["eval_returns"]
        for key in detail_keys - {"steps"}:  # what the seed was waiting for is over
            status.pop(key, None)
        status["wall_s"] = before["wall_s"] + time.perf_counter() - t0
        # this process's CPU time (a forked seed starts from zero), for compute accounting
        t = os.times()
        status["cpu_s"] = before["cpu_s"] + t.user + t.system
        status.pop("wall_s_before", None)
        status["ended"] = now_iso()
        write_status(folder, status)  # the small outcome first, then the traceback
        if status.get("traceback"):
            print(status["traceback"], file=sys.stderr, flush=True)
            try:
                (folder / "traceback.txt").write_text(status["traceback"])
            except OSError:  # a full disk: status.json and stderr.log have it
                (folder / "traceback.txt").unlink(missing_ok=True)
        send("done", job.seed, status)
    return status


def write_status(folder: Path, status: dict) -> None:
    """A seed's status.json; on a full disk without its traceback if the whole one does not fit
    (the launcher also has it in memory: the `done` message)."""
    try:
        write_json(folder / "status.json", status)
    except OSError as e:
        if not is_enospc(e):
            raise
        slim = {k: v for k, v in status.items() if k != "traceback"}
        try:
            write_json(folder / "status.json", slim)
        except OSError:
            print("could not record the outcome in status.json: disk full", file=sys.stderr)


# torch's words when a distribution gets NaN or infinite parameters (the policy's output)
TORCH_NONFINITE = ("probability tensor contains", "expected parameter", "found invalid values")


def failure_text(e: BaseException, run) -> str:
    """The error a failed seed records: no space left on device (a full disk), a non-finite
    policy output named as such (torch says only that a tensor holds NaN), or the exception."""
    if is_enospc(e):
        return f"{NO_SPACE}{f' ({e.filename})' if e.filename else ''}"
    text = f"{type(e).__name__}: {e}"
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


def _child(job: SeedJob, conn) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    # Out of the terminal's process group: a Ctrl-C reaches the launcher alone, which asks each
    # seed once (SIGTERM) to stop at its next iteration with a final checkpoint, and a second
    # Ctrl-C at once (SIGINT). In the terminal's group a seed would get the terminal's SIGINT
    # and the launcher's SIGTERM together, take them for two requests and stop unsaved.
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    with redirected_output(folder, job.append):
        run_seed(job, conn)
    conn.close()


# --- in the launcher -----------------------------------------------------------------------------


def _context():
    ctx = mp.get_context("forkserver")
    # torch._dynamo: imported by the first optimizer a seed builds (~2-5 s here); once, not per seed
    ctx.set_forkserver_preload(
        ["torch", "torch._dynamo", "gymnasium", "backflip.seedrun", "backflip.algos.ppo"]
    )
    return ctx


class Display:
    """A rich progress table, or plain lines when output is not a terminal. Rows are jobs."""

    def __init__(self, jobs: list[SeedJob], enabled: bool):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.progress = Progress(
            TextColumn("{task.fields[label]}seed {task.fields[seed]:>3}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[sps]:>7} steps/s"),
            TextColumn("return {task.fields[ret]:>8}"),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            disable=not self.live,
            transient=False,
        )
        self.jobs = jobs
        self.tasks = [
            self.progress.add_task(
                "",
                total=j.config["steps"],
                label=f"{j.label} " if j.label else "",
                seed=j.seed,
                sps="-",
                ret="-",
                status="pending",
            )
            for j in jobs
        ]
        self.enabled = enabled
        self.states: dict[int, str] = {}  # job -> its last status word (plain output)
        self.printed: dict[int, float] = {}  # job -> when its status was last printed (plain)

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def message(self, i: int, msg: tuple) -> None:
        """A message sent by job i's `run_seed`."""
        kind = msg[0]
        if kind == "progress":
            self.update(i, step=msg[2], sps=msg[3], ret=msg[4])
        elif kind == "status":
            self.update(i, status=msg[2])
            state = msg[2].split()[0]
            # plain output: on changes, and a long phase's progress every PHASE_PRINT_S
            now = time.monotonic()
            if not self.live and (
                state != self.states.get(i, "running")
                or ("ETA" in msg[2] and now - self.printed.get(i, 0.0) > PHASE_PRINT_S)
            ):
                self.print(f"{self._name(i)}: {msg[2]}")
                self.printed[i] = now
            self.states[i] = state
        elif kind == "warning":  # the live doctor's lines start with their own severity
            known = msg[2].split(":", 1)[0] in ("error", "warning", "info")
            self.print(f"{self._name(i)}: {msg[2] if known else 'warning: ' + msg[2]}")

    def update(self, i, step=None, sps=None, ret=None, status=None):
        fields = {}
        if sps is not None:
            fields["sps"] = f"{sps:,.0f}"
        if ret is not None:
            fields["ret"] = f"{ret:.1f}"
        if status is not None:
            fields["status"] = status
        self.progress.update(self.tasks[i], completed=step, **fields)

    def finished(self, i: int, status: dict) -> None:
        self.update(i, step=status.get("steps"), status=status["status"])
        prefix = f"{self.jobs[i].label}: " if self.jobs[i].label else ""
        self.print(prefix + seed_line(status))

    def _name(self, i: int) -> str:
        job = self.jobs[i]
        return f"{job.label} seed {job.seed}" if job.label else f"seed {job.seed}"

    def print(self, text: str):
        if self.enabled:
            self.console.print(text, markup=False, highlight=False)


def run_jobs(
    jobs: list[SeedJob],
    workers: int,
    progress: bool = True,
    backend: str = "local",
    address: str | None = None,
) -> list[dict]:
    """Run every job, at most `workers` at once; each job's final status, in job order."""
    if backend == "ray":
        from backflip.ray_backend import run_jobs_ray

        with Display(jobs, progress) as display:
            done = run_jobs_ray(jobs, workers, display, address)
    elif backend == "local":
        with Display(jobs, progress) as display:
            done = _run_jobs_local(jobs, workers, display)
    else:
        from backflip.errors import UserError

        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    for i, job in enumerate(jobs):  # never started because of a stop request
        if i not in done:
            done[i] = mark_not_started(job)
    return [done[i] for i in range(len(jobs))]


def run_seeds(jobs: list[SeedJob], workers: int, progress: bool = True) -> dict[int, dict]:
    """The jobs of one run: {seed: final status}."""
    return {j.seed: st for j, st in zip(jobs, run_jobs(jobs, workers, progress), strict=True)}


def _run_jobs_local(jobs: list[SeedJob], workers: int, display: Display) -> dict[int, dict]:
    ctx = _context()
    pending, active, done = list(range(len(jobs))), {}, {}
    reported: dict[int, dict] = {}  # each job's outcome as its process sent it
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        if stopping:  # second signal: children stop at once
            for proc, _ in active.values():
                if proc.pid:
                    os.kill(proc.pid, signal.SIGINT)
        stopping = True
        for proc, _ in active.values():  # forward: the terminal may not have signalled them
            if proc.pid and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or active:
            while pending and len(active) < workers and not stopping:
                i = pending.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_child,
                    args=(jobs[i], writer),
                    daemon=False,
                    name=f"backflip-seed-{jobs[i].seed}",
                )
                proc.start()
                writer.close()
                active[i] = (proc, reader)
                display.update(i, step=0, status="running")
            if stopping and not active:
                break
            owner = {id(r): i for i, (_, r) in active.items()}
            readers = [r for _, r in active.values()]
            for r in wait(readers, timeout=0.2) if readers else []:
                try:
                    msg = r.recv()
                except (EOFError, OSError):
                    continue
                if msg[0] == "done":  # kept: a full disk may have kept it off status.json
                    reported[owner[id(r)]] = msg[2]
                display.message(owner[id(r)], msg)
            for i, (proc, reader) in list(active.items()):
                if proc.is_alive():
                    continue
                proc.join()
                reader.close()
                del active[i]
                done[i] = final_status(jobs[i], proc.exitcode, reported=reported.get(i))
                display.finished(i, done[i])
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return done


def mark_not_started(job: SeedJob) -> dict:
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    if job.resume_from:  # a resumed seed keeps its old status: still resumable
        return read_json(folder / "status.json")
    status = {
        "seed": job.seed,
        "status": "interrupted",
        "steps": 0,
        "error": "not started: the launcher was stopped",
        "ended": now_iso(),
    }
    write_json(folder / "status.json", status)
    return status


def final_status(
    job: SeedJob, exitcode: int | None, why: str | None = None, reported: dict | None = None
) -> dict:
    """The seed's status.json, repaired when its process died without writing the outcome
    (`archive.close_dead_seed`: failed, with the steps its metrics show), or could not (a full
    disk: `reported` is the outcome the process sent, written here)."""
    from backflip.runs.archive import close_dead_seed, seed_status

    run_dir = Path(job.run_dir)
    status = seed_status(run_dir, job.seed)
    unfinished = ("running", "waiting", "pending", "unknown", "missing")
    if status.get("status") in unfinished and reported is not None:
        status = reported
        write_status(seed_dir(run_dir, job.seed), status)
    if status.get("status") in unfinished:
        if not why:
            if exitcode is not None and exitcode < 0:
                sig = signal.Signals(-exitcode).name
                extra = " (often the kernel's out-of-memory killer)" if sig == "SIGKILL" else ""
                why = f"the seed's process was killed by {sig}{extra}"
            else:
                why = f"the seed's process exited with code {exitcode} without a result"
        status = {**status, "seed": job.seed, "status": "running", "pid": None}
        status["host"] = socket.gethostname()  # its process is gone: nothing to wait for
        status = close_dead_seed(run_dir, status, why)
    return status


def seed_line(st: dict) -> str:
    ev = st.get("final_eval_return")
    result = f"eval return {ev:.1f}" if ev is not None else "no evaluation"
    line = f"seed {st['seed']}: {st['status']} after {st.get('steps', 0):,} steps, {result}"
    if st.get("wall_s"):
        line += f", {st['wall_s']:.1f} s"
    if st.get("error"):
        line += f" — {st['error']}"
    return line


# --- whole runs: archive, seeds, outcome ----------------------------------------------------------


def launch_runs(
    cfgs: list,
    home: Path,
    argv: list[str],
    messages: list[str] | None = None,
    workers: int | None = None,
    progress: bool = True,
    tags: list[list[str]] | None = None,
    labels: list[str] | None = None,
    backend: str = "local",
    address: str | None = None,
    rerun_of: str | None = None,
    on_created=None,
    extra: dict | list[dict] | None = None,
) -> list[dict]:
    """Archive one new run per config (TrainConfig), train all their seeds in one pool, record
    each outcome and the doctor's findings; the finished records, in order. `on_created(run_dir)`
    is called as soon as a run exists (the CLI prints its id then). `extra` adds sections to
    every stored config (`prefs` for a preference-learning run), or, as a list, to each config
    its own (preference runs with different pipeline settings in one pool)."""
    from backflip.config import check_tags
    from backflip.runs.archive import create_run, finalize_run

    workers = max(1, workers or os.cpu_count() or 1)
    n = len(cfgs)
    messages = messages or [""] * n
    tags = tags or [[] for _ in range(n)]
    for tag in tags:  # before any run exists
        check_tags(tag)
    labels = labels or [""] * n
    extras = extra if isinstance(extra, list) else [extra or {}] * n
    run_dirs, jobs = [], []
    for cfg, message, tag, label, more in zip(cfgs, messages, tags, labels, extras, strict=True):
        config = {**cfg.to_dict(), **more}
        run_dir, _ = create_run(
            home,
            config,
            argv,
            message,
            rerun_of=rerun_of,
            tags=tag,
            extra={"backend": {"name": backend, "address": address}},
        )
        run_dirs.append(run_dir)
        if on_created is not None:
            on_created(run_dir)
        jobs += [SeedJob(str(run_dir), s, config, label=label) for s in cfg.seeds]
    started = time.time()
    try:
        run_jobs(jobs, min(workers, len(jobs)), progress, backend=backend, address=address)
    finally:  # even if the launcher itself fails, every run gets an outcome
        records = [finalize_run(home, d, started) for d in run_dirs]
    for record, run_dir in zip(records, run_dirs, strict=True):
        record["findings"] = diagnose_finished(run_dir)
    return records


def diagnose_finished(run_dir: Path) -> list[dict]:
    """The doctor's findings on a finished run (also written to its findings.json)."""
    from backflip.errors import UserError

    try:
        from backflip.doctor import diagnose_run_dir

        return [f.to_dict() for f in diagnose_run_dir(Path(run_dir))]
    except UserError:  # no seed wrote metrics (all failed at once): nothing to diagnose
        return []
    except OSError as e:
        if not is_enospc(e):
            raise
        return []  # findings.json could not be written: `backflip doctor ID` later
    except Exception as e:  # noqa: BLE001 — a doctor bug must never cost a finished run
        traceback.print_exc()
        return [
            {
                "rule": "doctor-error",
                "severity": "info",
                "metric": None,
                "step": None,
                "message": f"the doctor failed on this run: {type(e).__name__}: {e}",
                "evidence": {},
            }
        ]


def launch_run(
    cfg,
    home: Path,
    argv: list[str],
    message: str = "",
    workers: int | None = None,
    progress: bool = True,
    rerun_of: str | None = None,
    tags: list[str] | None = None,
    on_created=None,
    backend: str = "local",
    address: str | None = None,
    extra: dict | None = None,
) -> dict:
    """Archive a new run of `cfg` (a TrainConfig), train its seeds in parallel, record the outcome.

    `on_created(run_dir)` is called as soon as the run exists (the CLI prints the id then).
    `extra` adds sections to the stored config (`prefs` for a preference-learning run).
    """
    return launch_runs(
        [cfg],
        home,
        argv,
        [message],
        workers,
        progress,
        tags=[list(tags or [])],
        backend=backend,
        address=address,
        rerun_of=rerun_of,
        on_created=on_created,
        extra=extra,
    )[0]
