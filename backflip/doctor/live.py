"""The doctor during training: a `SeedRun` monitor that checks the live rules as rows arrive.

`launch.seed.run_seed` appends a `LiveDoctor` to `run.monitors` (unless `doctor.live=false`). Every
row is kept; every `every_s` seconds (and at the fifth row) the rules marked `live` run on the
rows so far, and each rule that fires with severity warning or error is reported once, as a
warning line on the console. Non-finite values are not checked here: `SeedRun` stops the seed
on them itself (`doctor.stop_on_nan`).
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import defaultdict

import numpy as np

from backflip.doctor import diagnose
from backflip.doctor.series import RunData
from backflip.returns import is_preference_run


class LiveDoctor:
    """`monitor(step, row) -> [warning, ...]` for `SeedRun.monitors`."""

    def __init__(self, cfg, every_s: float = 2.0):
        self.every_s = every_s
        self._steps: dict[str, list] = defaultdict(list)
        self._values: dict[str, list] = defaultdict(list)
        self._rows = 0
        self._last = time.monotonic()
        self.fired: set[str] = set()
        self.data = RunData(
            label="",  # the console line already names the seed
            metrics={},
            source="backflip",
            algo=cfg.algo,
            env_id=cfg.env_id,
            hp=dataclasses.asdict(cfg.hp),
            env_opts=dataclasses.asdict(cfg.env),
            budget=cfg.steps,
        )

    def __call__(self, step: int, row: dict) -> list[str]:
        for name, value in row.items():
            self._steps[name].append(step)
            self._values[name].append(value)
        self._rows += 1
        now = time.monotonic()
        if self._rows != 5 and (self._rows < 5 or now - self._last < self.every_s):
            return []
        self._last = now
        return self.check()

    def check(self) -> list[str]:
        """Run the live rules on every row so far; new warnings and errors, once per rule."""
        self.data.metrics = {
            k: (np.asarray(self._steps[k]), np.asarray(self._values[k], np.float64))
            for k in self._steps
        }
        # the seed's config does not say whether it trains on a learned reward; its rows do
        self.data.learned_reward = is_preference_run(None, self.data.metrics)
        try:
            findings = diagnose(self.data, live=True)
        except Exception:  # noqa: BLE001 — the doctor must never stop a training run
            if "doctor-error" in self.fired:
                return []
            self.fired.add("doctor-error")
            return ["the live doctor failed: " + traceback.format_exc(limit=2).strip()[-300:]]
        out = []
        for f in findings:
            if f.severity == "info" or f.rule in self.fired:
                continue
            self.fired.add(f.rule)
            out.append(f"{f.rule} ({f.severity}) at step {self.data.end:,}: {f.message}")
        return out
