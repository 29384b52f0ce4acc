"""Seeds as Slurm jobs through submitit: `--backend slurm [--slurm KEY=VALUE ...]` (optional extra:
`pip install backflip[slurm]`).

The seeds of a launch go to Slurm as one job array (`submit_array`, at most `workers` tasks at
once: `slurm_array_parallelism`), one task per seed and one CPU each. Each task is a `SeedTask`:
it trains its seed with the same `seed.run_seed` as a local seed process, writing the same files
into the same run directory, so the archive must be on a filesystem the nodes share and every
node needs the same backflip installed. submitit keeps its own files (pickled tasks, Slurm logs)
in `<archive>/slurm/<batch id>/`.

Preemption and time limits follow submitit's checkpointing protocol. The seed trains in a child
process of the task; when Slurm signals the task — SIGUSR2, which submitit asks Slurm to send
before the time limit or a preemption (`--signal USR2@90`), or a plain SIGTERM — the task asks
its seed to stop at the next iteration boundary, which writes a final checkpoint (as Ctrl-C does
locally), and `SeedTask.checkpoint` hands submitit the task that continues from it; submitit
requeues the job (`scontrol requeue`), and the requeued task resumes the seed exactly as
`backflip resume` would (`job.last_checkpoint`; metrics logged after the checkpoint are redone),
so a preempted seed ends with the numbers of an uninterrupted one. A task whose seed finished
returns its outcome at once if it is started again.

`--slurm KEY=VALUE` sets submitit's parameters: the shared ones (`timeout_min`, `mem_gb`,
`cpus_per_task`, `gpus_per_node`, `name`) as they are, anything else as a Slurm one
(`partition=dev` is `slurm_partition`; `slurm_`-prefixed keys pass unchanged), and `cluster`:
`slurm` (the default when `sbatch` is found), or `local` — submitit's local executor, which runs
the tasks as processes on this machine with the same protocol (the tests use it; it runs every
submitted task at once, so at most `workers` are submitted at a time).

Ctrl-C (or `should_stop()`, how `backflip tune` prunes a trial) asks every seed to stop at its
next iteration boundary through a stop file in the batch folder (checkpoint written, status
`interrupted`, resumable); a second Ctrl-C cancels the jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import yaml

from backflip.errors import UserError
from backflip.launch.display import Display
from backflip.launch.job import Pool, SeedJob, complete, final_status, last_checkpoint
from backflip.runs.archive import seed_status
from backflip.runs.layout import new_run_id, seed_dir
from backflip.telemetry import last_logged

SUBMITIT_DIR = "slurm"  # <archive>/slurm/<batch id>/: submitit's pickles and logs
STOP_FILE = "STOP"  # in the batch folder: every seed of the batch stops at its next iteration
POLL_S = 0.5
CLUSTERS = ("slurm", "local")
# submitit's parameters shared by every executor; any other key is a Slurm one
GENERIC = {"name", "timeout_min", "mem_gb", "nodes", "cpus_per_task", "gpus_per_node"}
GENERIC |= {"tasks_per_node", "stderr_to_stdout"}
DEFAULTS = {"name": "backflip", "timeout_min": 60, "cpus_per_task": 1, "tasks_per_node": 1}


def _submitit():
    try:
        import submitit  # an optional extra (backflip[slurm]): only for --backend slurm
    except ImportError:
        raise UserError("--backend slurm needs submitit: pip install 'backflip[slurm]'") from None
    return submitit


def parse_options(items: list[str]) -> dict:
    """`--slurm KEY=VALUE` items -> {key: value} (values read as YAML scalars: 60 is an int)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UserError(f"--slurm expects KEY=VALUE, got {item!r}")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key] = value
    cluster = out.get("cluster", "slurm")
    if cluster not in CLUSTERS:
        raise UserError(f"--slurm cluster={cluster}: choose one of {', '.join(CLUSTERS)}")
    with tempfile.TemporaryDirectory() as tmp:  # submitit checks them: before any run exists
        _executor(Path(tmp), out, 1)
    return out


def executor_parameters(options: dict, workers: int) -> dict:
    """submitit parameters: backflip's defaults (one CPU per seed, an hour per task), the
    array's parallelism, then the user's (`partition` -> `slurm_partition`)."""
    params = {**DEFAULTS, "slurm_array_parallelism": workers}
    for key, value in options.items():
        if key == "cluster":
            continue
        params[key if key in GENERIC or key.startswith("slurm_") else f"slurm_{key}"] = value
    return params


# --- the task: one seed, on a node ----------------------------------------------------------------


class _StopConn:
    """What `run_seed` polls: the task's stop request, or the launcher's stop file."""

    def __init__(self, event, stop_file: str):
        self.event, self.stop_file = event, stop_file

    def send(self, msg) -> None:  # the launcher reads progress from the seed's files
        pass

    def stop_requested(self) -> bool:
        return self.event.is_set() or os.path.exists(self.stop_file)


def _seed_child(job: SeedJob, event, stop_file: str) -> None:
    """The seed's own process; it ignores signals (inherited from the task): its task stops it."""
    os.environ["OMP_NUM_THREADS"] = "1"
    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    # the seed's code imports torch: in the Slurm task, never in the launcher
    from backflip.launch.seed import redirected_output, run_seed

    with redirected_output(folder, job.append):
        run_seed(job, _StopConn(event, stop_file), handle_signals=False)


def _preempt_signal() -> int:
    """submitit's preemption signal (SIGUSR2 unless $SUBMITIT_PREEMPT_SIGNAL says otherwise)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


class SeedTask:
    """One seed as a submitit task (a callable with `checkpoint`: submitit's Checkpointable
    protocol). The seed trains in a child process, so a signal reaches this process while the
    seed runs on: the seed is asked to stop at its next iteration boundary (its final checkpoint
    written) before the job is requeued."""

    def __init__(self, job: SeedJob, stop_file: str):
        self.job, self.stop_file = job, stop_file
        self._proc = self._event = None
        self._preempted = False

    def __getstate__(self):
        return {"job": self.job, "stop_file": self.stop_file}

    def __setstate__(self, state):
        self.__init__(state["job"], state["stop_file"])

    def __call__(self) -> dict:
        run_dir = Path(self.job.run_dir)
        if seed_status(run_dir, self.job.seed).get("status") == "finished":
            return seed_status(run_dir, self.job.seed)  # started again after it finished
        # fork: this process has imported the seed's code (torch included) and runs no threads,
        # so the seed starts at once instead of importing everything again (~20 s under load)
        ctx = mp.get_context("fork")
        self._event = ctx.Event()
        self._proc = ctx.Process(
            target=_seed_child, args=(self.job, self._event, self.stop_file), daemon=False
        )
        # The child ignores the signals (it inherits the ignored dispositions); this process
        # decides: SIGTERM here is a preemption without submitit's warning signal
        handled = (signal.SIGINT, signal.SIGTERM, _preempt_signal())
        saved = {s: signal.signal(s, signal.SIG_IGN) for s in handled}
        try:
            self._proc.start()
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._proc.join()
        if self._preempted and not os.path.exists(self.stop_file):
            # hand over to submitit's handler: checkpoint (below), requeue, exit
            os.kill(os.getpid(), _preempt_signal())
            time.sleep(60)  # the handler exits this process
        return final_status(self.job, self._proc.exitcode)

    def _on_sigterm(self, signum, frame) -> None:
        self._preempted = True
        if self._event is not None:
            self._event.set()

    def checkpoint(self, *args, **kwargs):
        """Called by submitit (in its SIGUSR2 handler) before it requeues the job: stop the seed
        at its next iteration boundary, then resubmit this seed from its last checkpoint."""
        from submitit.helpers import DelayedSubmission  # we run under submitit here

        if self._proc is not None and self._proc.is_alive():
            self._event.set()
            self._proc.join()
        folder = seed_dir(Path(self.job.run_dir), self.job.seed)
        found = last_checkpoint(folder)
        if seed_status(Path(self.job.run_dir), self.job.seed).get("status") == "finished":
            job = self.job  # the requeued task returns the outcome at once
        elif found is None:  # nothing saved yet: start the seed again
            job = dataclasses.replace(self.job, append=False, resume_from=None)
        else:
            job = dataclasses.replace(self.job, append=True, resume_from=str(found[0]))
        return DelayedSubmission(SeedTask(job, self.stop_file))


# --- the launcher ---------------------------------------------------------------------------------


def _executor(folder: Path, options: dict, workers: int):
    submitit = _submitit()
    cluster = options.get("cluster", "slurm")
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise UserError(
            "--backend slurm: no Slurm here (sbatch not found); `--slurm cluster=local` runs the "
            "tasks on this machine through submitit's local executor"
        )
    executor = submitit.AutoExecutor(folder=folder / "%j", cluster=cluster)
    try:
        executor.update_parameters(**executor_parameters(options, workers))
    except (NameError, AssertionError, ValueError) as e:
        first = str(e).strip().splitlines()[0]
        raise UserError(f"--slurm: {first}") from None
    return executor


class SlurmPool(Pool):
    """Seeds as tasks of Slurm job arrays through submitit; their progress read from their own
    metrics.csv (the seeds run elsewhere), a stop asked through a file they poll."""

    def __init__(self, jobs: list[SeedJob], display: Display, options: dict, workers: int):
        folder = Path(jobs[0].run_dir).parent / SUBMITIT_DIR / new_run_id()
        folder.mkdir(parents=True, exist_ok=True)
        self.executor = _executor(folder, options, workers)
        self.stop_file = folder / STOP_FILE
        self.jobs, self.display = jobs, display
        self.tasks = [SeedTask(job, str(self.stop_file)) for job in jobs]
        self.seen: dict[int, tuple[int, float]] = {}  # job -> (step, when) of its last progress

    def submit_all(self, indices):
        if self.executor.cluster != "slurm":
            return {}
        # one array; Slurm runs at most `workers` at once
        array = self.executor.submit_array([self.tasks[i] for i in indices])
        return dict(zip(indices, array, strict=True))

    def submit(self, i: int):
        return self.executor.submit(self.tasks[i])

    def ended(self, active):
        time.sleep(POLL_S)
        out = []
        for i, job in active.items():
            _show_progress(self.display, i, self.jobs[i], self.seen)
            if not job.done():
                continue
            why = None
            try:
                job.result()
            except Exception as e:  # noqa: BLE001 — a failed task is recorded, not raised
                lines = [x for x in str(e).strip().splitlines() if x.strip()]
                why = f"the Slurm task failed: {lines[-1] if lines else type(e).__name__}"
            out.append((i, why))
        return out

    def stop(self, first: bool, active) -> None:
        self.stop_file.touch()
        if not first:  # second signal: cancel the jobs
            for job in active.values():
                with contextlib.suppress(Exception):
                    job.cancel(check=False)


def run_jobs_slurm(
    jobs: list[SeedJob], workers: int, display: Display, address=None, should_stop=None
) -> dict[int, dict]:
    """The jobs as tasks of Slurm job arrays. `address`: the `--slurm` options (parse_options)."""
    pool = SlurmPool(jobs, display, dict(address or {}), workers)
    return complete(jobs, workers, display, should_stop, pool)


def _show_progress(display: Display, i: int, job: SeedJob, seen: dict) -> None:
    """A seed's progress as its metrics.csv shows it (the seed runs elsewhere)."""
    step, _ = last_logged(seed_dir(Path(job.run_dir), job.seed))
    now = time.monotonic()
    last = seen.get(i)
    if last is not None and step == last[0]:
        return
    sps = (step - last[0]) / (now - last[1]) if last and step > last[0] else None
    seen[i] = (step, now)
    display.update(i, step=step, sps=sps, status="running")
