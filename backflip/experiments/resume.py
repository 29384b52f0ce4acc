"""`backflip resume ID`: continue an interrupted or failed run from each seed's last checkpoint.

A checkpoint (`SeedRun.save_checkpoint`) holds the algorithm's `state()` (networks, optimizer,
normalizer statistics, replay buffer, counters, and — when they pickle — the envs mid-episode),
the global RNG states and the telemetry's episode window. Resuming a seed restores all of it,
drops the rows its metrics.csv/episodes.csv got after the checkpoint (they are logged again),
and appends from there, so the seed's files read as if it had never stopped. For an algorithm
that saves everything (PPO does; see docs/experiments.md), the resumed run is identical to an
uninterrupted one with the same seed.

Seeds that finished are left alone; a seed with no checkpoint starts again from step 0. What
cannot be continued exactly (envs that cannot be pickled mid-episode, a preference run's reward
model) is said before the seeds start (`not_exact`) and recorded with the resume in run.json.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from backflip.config import TrainConfig
from backflip.envs import check_env_id, module_paths, why_no_snapshot
from backflip.errors import UserError
from backflip.launch import diagnose_finished, run_jobs
from backflip.launch.job import SeedJob, last_checkpoint
from backflip.runs import index
from backflip.runs.archive import load_run, now_iso, pid_alive, read_record, run_lock, write_record
from backflip.runs.layout import seed_dir
from backflip.runs.records import finalize_run, held_signals


def resume_jobs(run_dir: Path) -> tuple[dict, list[SeedJob], dict[int, int | None]]:
    """(record, one job per unfinished seed, {seed: step it resumes from (None: restart)})."""
    record = load_run(run_dir)
    host_here = record.get("host") == socket.gethostname()
    if record.get("status") == "running" and host_here and pid_alive(record.get("pid")):
        raise UserError(f"run {record['id']} is still running (pid {record['pid']})")
    jobs, plan = [], {}
    config = record["config"]
    # the env module where the run found it (its folder, or the one it was launched from)
    check_env_id(config["env_id"], [*record.get("import_paths", []), record.get("cwd")])
    paths = module_paths()
    for st in record["seeds"]:
        seed = st["seed"]
        if st.get("status") == "finished":
            continue
        if st.get("status") == "running" and host_here and pid_alive(st.get("pid")):
            if record.get("orphans"):
                raise UserError(
                    f"run {record['id']}: its launcher died, but seed {seed} still trains "
                    f"(pid {st['pid']}); the run is finalized when its seeds end"
                )
            raise UserError(f"seed {seed} of run {record['id']} is still running (pid {st['pid']})")
        found = last_checkpoint(seed_dir(run_dir, seed))
        if found is None:
            jobs.append(SeedJob(str(run_dir), seed, config, import_paths=paths))
            plan[seed] = None
        else:
            path, step = found
            jobs.append(
                SeedJob(str(run_dir), seed, config, True, resume_from=str(path), import_paths=paths)
            )
            plan[seed] = step
    return record, jobs, plan


def not_exact(record: dict, plan: dict[int, int | None]) -> list[str]:
    """What will differ from an uninterrupted run when the seeds in `plan` continue from their
    checkpoints, one sentence each (empty: nothing; a seed that starts over is exact)."""
    if all(step is None for step in plan.values()):
        return []

    cfg = TrainConfig.from_dict(record["config"])
    notes = []
    try:
        reason = why_no_snapshot(cfg.env_id, cfg.env)
    except Exception as e:  # noqa: BLE001 — the seeds will say more; the user hears it now
        reason = f"it could not be created to check ({type(e).__name__}: {e})"
    if reason:
        notes.append(
            f"{cfg.env_id} cannot be saved mid-episode: {reason}. Each resumed seed restarts its "
            "envs from a reset and goes on with its networks, optimizer, statistics and replay "
            "buffer, but its episodes, metrics and final return will differ from an "
            "uninterrupted run's"
        )
    if cfg.kind == "prefs":
        notes.append(
            "a preference run's reward model and labeling schedule are not in its checkpoints: "
            "each resumed seed trains a new reward model from the labels in its database, so it "
            "will differ from an uninterrupted run"
        )
    return notes


def resume_run(
    home: Path,
    run_dir: Path,
    workers: int | None = None,
    progress: bool = True,
    backend: str = "local",
    address: str | None = None,
    on_plan=None,
) -> dict:
    """Resume every unfinished seed of a run in parallel; the updated record. `on_plan(record,
    plan, notes)` hears, before any seed starts, where each seed resumes and what will differ
    from an uninterrupted run (`not_exact`)."""
    record, jobs, plan = resume_jobs(run_dir)
    if not jobs:
        raise UserError(f"run {record['id']} has no unfinished seed: nothing to resume")
    notes = not_exact(record, plan)
    if on_plan is not None:
        on_plan(record, plan, notes)
    with run_lock(run_dir):
        stored = read_record(run_dir)
        if stored.get("status") == "running" and stored.get("pid") != record.get("pid"):
            raise UserError(f"run {record['id']} is being resumed by another process")
        previous_duration = stored.get("duration_s") or 0.0
        stored.update(status="running", pid=os.getpid(), host=socket.gethostname())
        entry = {
            "at": now_iso(),
            "from_step": {str(k): v for k, v in plan.items()},
            "backend": backend,
        }
        if notes:
            entry["not_exact"] = notes
        stored.setdefault("resumes", []).append(entry)
        write_record(run_dir, stored)
    index.upsert(home, {**stored, "seeds": record["seeds"]})
    workers = max(1, workers or os.cpu_count() or 1)
    started = time.time()
    try:
        run_jobs(jobs, min(workers, len(jobs)), progress, backend=backend, address=address)
    finally:
        with held_signals():
            final = finalize_run(home, run_dir, started, previous_duration)
    # what the run's summary says is refreshed with it: the doctor reads the resumed seeds
    final["findings"] = diagnose_finished(run_dir)
    return final
