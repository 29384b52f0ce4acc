"""Launching runs: archive each run, train all their seeds in one pool, record the outcomes.

`launch_runs(cfgs, home, argv)` creates one run per config in the archive (`runs/records.py`,
with its provenance), turns every seed of every run into a `SeedJob`, and runs the jobs at most
`workers` at once (`run_jobs`) while showing their progress (`display.py`); then it records each
run's outcome and the doctor's findings. A job is one seed of one run, so a sweep's runs share one
pool. The jobs run as local processes (`local.py`), in the command's own process one after
another (`inline.py`, `--inline`: prints and `breakpoint()` reach the terminal), as Ray tasks
(`ray.py`, `--backend ray`) or as Slurm jobs through submitit (`slurm.py`, `--backend slurm`);
every way each seed is `seed.train_one` (through `seed.run_seed`), which writes the same files
into the same run directory.

The backends share one signature, `run_jobs_X(jobs, workers, display, address, should_stop)`
-> {job index: final status}: `address` is where the seeds go (a Ray cluster's address; for
Slurm, the `--slurm` options as a dict; unused locally), and `should_stop()`, polled while seeds
run, asks every seed to stop at its next iteration boundary as a first Ctrl-C does (how
`backflip tune` prunes a trial). Seeds that never started are marked `interrupted` here.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from backflip.algos import budget_line, planned_budget
from backflip.config import check_tags
from backflip.envs import episode_limit, module_paths
from backflip.errors import UserError
from backflip.launch.display import Display
from backflip.launch.inline import run_jobs_inline
from backflip.launch.job import SeedJob, mark_not_started
from backflip.launch.local import run_jobs_local, start_server
from backflip.launch.ray import run_jobs_ray
from backflip.launch.slurm import run_jobs_slurm
from backflip.runs.archive import is_enospc
from backflip.runs.records import create_run, finalize_run, held_signals

BACKENDS = {
    "local": run_jobs_local,
    "inline": run_jobs_inline,
    "ray": run_jobs_ray,
    "slurm": run_jobs_slurm,
}


def prepare(backend: str = "local") -> None:
    """Start, before a run exists, what its seeds will need: the local backend's warm seed
    server, whose imports (when it is new) then overlap the launcher's checks and bookkeeping
    (`launch_runs` calls it too; the CLI calls it first thing)."""
    if backend == "local":
        start_server()


def run_jobs(
    jobs: list[SeedJob],
    workers: int,
    progress: bool = True,
    backend: str = "local",
    address: str | dict | None = None,
    should_stop=None,
) -> list[dict]:
    """Run every job, at most `workers` at once; each job's final status, in job order."""
    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    with Display(jobs, progress) as display:
        done = BACKENDS[backend](jobs, workers, display, address, should_stop)
    for i, job in enumerate(jobs):  # never started because of a stop request
        if i not in done:
            done[i] = mark_not_started(job)
    return [done[i] for i in range(len(jobs))]


def run_seeds(jobs: list[SeedJob], workers: int, progress: bool = True) -> dict[int, dict]:
    """The jobs of one run: {seed: final status}."""
    return {j.seed: st for j, st in zip(jobs, run_jobs(jobs, workers, progress), strict=True)}


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
    address: str | dict | None = None,
    rerun_of: str | None = None,
    on_created=None,
    notes: list[list[str]] | None = None,
    should_stop=None,
) -> list[dict]:
    """Archive one new run per config (TrainConfig), train all their seeds in one pool, record
    each outcome and the doctor's findings; the finished records, in order. `on_created(run_dir)`
    is called as soon as a run exists (the CLI prints its id then). `notes`: per config, lines
    said at launch that its run's record keeps (a preference run's horizon, the settings derived
    from its env).
    `should_stop()`: see the module's docstring."""
    if workers is not None and workers < 1:  # the CLI refuses it too (commands.workers)
        raise UserError(f"workers must be at least 1 (seed processes at once), got {workers}")
    workers = workers or os.cpu_count() or 1
    prepare(backend)
    n = len(cfgs)
    messages = messages or [""] * n
    tags = tags or [[] for _ in range(n)]
    for tag in tags:  # before any run exists
        check_tags(tag)
    labels = labels or [""] * n
    notes = notes or [[] for _ in range(n)]
    run_dirs, jobs = [], []
    for cfg, message, tag, label, said in zip(cfgs, messages, tags, labels, notes, strict=True):
        config = cfg.to_dict()
        budget = planned_budget(cfg, episode_limit(cfg.env_id, cfg.env))  # imports env modules
        paths = module_paths()  # where the env module was found, for the seeds and reruns
        run_dir, _ = create_run(
            home,
            config,
            argv,
            message,
            rerun_of=rerun_of,
            tags=tag,
            extra={
                "backend": {"name": backend, "address": address},
                "budget": budget,
                "import_paths": paths,
                **({"notes": list(said)} if said else {}),
            },
        )
        run_dirs.append(run_dir)
        if on_created is not None:
            on_created(run_dir)
        line = budget_line(budget)
        if line:  # before any seed trains: the steps it will really take, and why
            where = f" ({label or run_dir.name})" if n > 1 else ""
            print(line.replace("budget:", f"budget{where}:", 1), file=sys.stderr, flush=True)
        jobs += [
            SeedJob(str(run_dir), s, config, label=label, import_paths=paths) for s in cfg.seeds
        ]
    started = time.time()
    try:
        run_jobs(
            jobs,
            min(workers, len(jobs)),
            progress,
            backend=backend,
            address=address,
            should_stop=should_stop,
        )
    finally:  # even if the launcher itself fails, every run gets an outcome, a Ctrl-C or not
        with held_signals():
            records = [finalize_run(home, d, started) for d in run_dirs]
    for record, run_dir in zip(records, run_dirs, strict=True):
        record["findings"] = diagnose_finished(run_dir)
    return records


def diagnose_finished(run_dir: Path) -> list[dict]:
    """The doctor's findings on a finished run (also written to its findings.json)."""
    # imported after training: the doctor's rules are not needed to start a run
    from backflip.doctor import diagnose_run_dir

    try:
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
    address: str | dict | None = None,
    notes: list[str] | None = None,
) -> dict:
    """Archive a new run of `cfg` (a TrainConfig), train its seeds in parallel, record the outcome.

    `on_created(run_dir)` is called as soon as the run exists (the CLI prints the id then);
    `notes` as `launch_runs`.
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
        notes=[list(notes or [])],
    )[0]
