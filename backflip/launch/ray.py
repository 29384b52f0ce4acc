"""Seeds as Ray tasks: `--backend ray [--address ADDR]` (optional extra: `pip install backflip[ray]`).

Each seed job becomes one Ray task (`num_cpus=1`) that calls the same `seed.run_seed` as a
local seed process, writing the same files into the same run directory — so the archive must be
on a filesystem every node sees (a single machine, or a shared mount) and every node needs the
same backflip installed. Without `--address` a private local cluster is started for the command
and shut down after it (its startup takes seconds: docs/benchmarks.md); with one, the tasks go to that
cluster and it is left running.

A small actor (`Channel`) carries progress messages back to the launcher and a stop flag out to
the seeds: Ctrl-C asks every seed to stop at its next iteration boundary (checkpoint written,
status `interrupted`), a second Ctrl-C cancels the tasks. `should_stop()` (polled with the
messages) makes the same request as a first Ctrl-C.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from backflip.errors import UserError
from backflip.launch.display import Display
from backflip.launch.job import Pool, SeedJob, complete
from backflip.runs.layout import seed_dir


def _ray():
    try:
        import ray  # an optional extra (backflip[ray]), and slow to import: only for --backend ray
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'backflip[ray]'") from None
    return ray


class _Channel:
    """Messages from seeds to the launcher, and the launcher's stop request (a Ray actor)."""

    def __init__(self):
        self.messages: list = []
        self.stop = False

    def put(self, item) -> None:
        self.messages.append(item)

    def drain(self) -> list:
        out, self.messages = self.messages, []
        return out

    def request_stop(self) -> None:
        self.stop = True

    def stopping(self) -> bool:
        return self.stop


class _Conn:
    """What `run_seed` expects of its connection: `send(msg)` and `stop_requested()`."""

    def __init__(self, channel, index: int):
        self.channel, self.index = channel, index

    def send(self, msg) -> None:
        self.channel.put.remote((self.index, msg))

    def stop_requested(self) -> bool:
        return _ray().get(self.channel.stopping.remote())


def _seed_task(job: SeedJob, index: int, channel) -> dict:
    """Body of the Ray task: one seed, its output in the seed's log files as locally."""
    # the seed's code imports torch: in the Ray worker, never in the launcher
    from backflip.launch.seed import redirected_output, run_seed

    folder = seed_dir(Path(job.run_dir), job.seed)
    folder.mkdir(parents=True, exist_ok=True)
    with redirected_output(folder, job.append):
        # Ray owns the worker's signal handlers; the stop request comes through the channel
        return run_seed(job, _Conn(channel, index), handle_signals=False)


class RayPool(Pool):
    """Seeds as Ray tasks; their progress comes back through one channel actor."""

    def __init__(self, jobs: list[SeedJob], display: Display, address: str | None):
        ray = self.ray = _ray()
        self.started_here = not ray.is_initialized()
        if self.started_here:
            kwargs = {"address": address} if address else {"num_cpus": os.cpu_count()}
            ray.init(
                **kwargs,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
            )
        self.jobs, self.display = jobs, display
        self.channel = ray.remote(num_cpus=0)(_Channel).remote()
        self.task = ray.remote(num_cpus=1, max_retries=0)(_seed_task)

    def submit(self, i: int):
        return self.task.remote(self.jobs[i], i, self.channel)

    def ended(self, active):
        refs = {ref: i for i, ref in active.items()}
        ready, _ = self.ray.wait(list(refs), num_returns=1, timeout=0.2)
        for i, msg in self.ray.get(self.channel.drain.remote()):
            self.display.message(i, msg)
        out = []
        for ref in ready:
            why = None
            try:
                self.ray.get(ref)
            except Exception as e:  # noqa: BLE001 — a dead worker is recorded as a failure
                why = f"the Ray task died: {type(e).__name__}: {str(e).splitlines()[0]}"
            out.append((refs[ref], why))
        return out

    def stop(self, first: bool, active) -> None:
        if first:
            self.channel.request_stop.remote()
        else:  # second signal: stop at once
            for ref in active.values():
                self.ray.cancel(ref, force=True)

    def close(self) -> None:
        if self.started_here:
            # give the last messages a moment, then leave no cluster behind
            time.sleep(0.05)
            self.ray.shutdown()


def run_jobs_ray(
    jobs: list[SeedJob], workers: int, display: Display, address: str | None, should_stop=None
) -> dict[int, dict]:
    """The jobs as Ray tasks (`address`: a cluster's, or a local one started here)."""
    return complete(jobs, workers, display, should_stop, RayPool(jobs, display, address))
