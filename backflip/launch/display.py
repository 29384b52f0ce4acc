"""The launcher's view of its seeds: a rich progress table in a terminal, or plain lines when
output is not a terminal (a log file, CI). Rows are jobs; messages come from `seed.run_seed`."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from backflip.launch.job import SeedJob

PHASE_PRINT_S = 30.0  # plain (non-terminal) output: a long phase's progress at most this often


class Display:
    """A rich progress table, or plain lines when output is not a terminal. Rows are jobs."""

    def __init__(self, jobs: list[SeedJob], enabled: bool):
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


def seed_line(st: dict) -> str:
    ev = st.get("final_eval_return")
    result = f"eval return {ev:.1f}" if ev is not None else "no evaluation"
    line = f"seed {st['seed']}: {st['status']} after {st.get('steps', 0):,} steps, {result}"
    if st.get("wall_s"):
        line += f", {st['wall_s']:.1f} s"
    if st.get("error"):
        line += f" — {st['error']}"
    return line
