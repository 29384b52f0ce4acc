"""The doctor during training: a `SeedRun` monitor that checks the live rules as rows arrive.

`launch.seed.train_one` adds a `LiveDoctor` to the seed's monitors (`SeedRun.add_monitor`) (unless `doctor.live=false`). Every
row is kept; every `every_s` seconds (and at the fifth row) the rules marked `live` run on the
rows so far. Each rule that fires with severity warning or error is reported as one line that
starts with its severity (`error: kl-large at step 2,048: ...`; the progress display prints it
as the line's only severity), once, and again only if its severity changes as training goes on
(a rule that reads the return can't call a collapse an error before the return can be judged).
When the seed ends, `final` runs the same rules on the seed's files — exactly what the summary's
diagnosis reads — and reports every announced rule whose verdict differs from its last line, so
the last word printed live is the summary's. Non-finite values are not checked here: `SeedRun`
stops the seed on them itself (`doctor.stop_on_nan`).
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import defaultdict

import numpy as np

from backflip.doctor import diagnose
from backflip.doctor.series import RunData, planned_steps
from backflip.returns import is_preference_run


class LiveDoctor:
    """`monitor(step, row) -> [warning, ...]` for `SeedRun.add_monitor`."""

    def __init__(self, cfg, every_s: float = 2.0):
        self.every_s = every_s
        self._steps: dict[str, list] = defaultdict(list)
        self._values: dict[str, list] = defaultdict(list)
        self._rows = 0
        self._last = time.monotonic()
        self.fired: dict[str, str] = {}
        """rule -> the severity last announced"""
        self.data = RunData(
            label="",  # the console line already names the seed
            metrics={},
            source="backflip",
            algo=cfg.algo,
            env_id=cfg.env_id,
            hp=dataclasses.asdict(cfg.hp),
            env_opts=dataclasses.asdict(cfg.env),
            budget=planned_steps({"steps": cfg.steps, "run": dataclasses.asdict(cfg.run)}),
            prefs=cfg.prefs.to_dict() if cfg.prefs is not None else {},
        )
        self.preference = cfg.kind == "prefs"

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
        # the seed's kind says whether it trains on a learned reward (rows say it for a config
        # built by hand)
        self.data.learned_reward = self.preference or is_preference_run(None, self.data.metrics)
        try:
            findings = diagnose(self.data, live=True)
        except Exception:  # noqa: BLE001 — the doctor must never stop a training run
            if "doctor-error" in self.fired:
                return []
            self.fired["doctor-error"] = "warning"
            return ["the live doctor failed: " + traceback.format_exc(limit=2).strip()[-300:]]
        return self._announce(findings, f"at step {self.data.end:,}")

    def _announce(self, findings, when: str, withdraw: bool = False) -> list[str]:
        """Lines for new warnings and errors and for changed severities (with `withdraw`, also
        for announced rules that no longer fire as a warning or an error)."""
        out, seen = [], {}
        for f in findings:
            seen.setdefault(f.rule, f)
        for rule, f in seen.items():
            before = self.fired.get(rule)
            if f.severity == "info" or before == f.severity:
                continue
            self.fired[rule] = f.severity
            was = f" (was {_a(before)} {before})" if before else ""
            out.append(f"{f.severity}: {rule} {when}{was}: {f.message}")
        if withdraw:
            for rule, before in list(self.fired.items()):
                f = seen.get(rule)
                if rule == "doctor-error" or (f is not None and f.severity != "info"):
                    continue
                del self.fired[rule]
                what = f"now info: {f.message}" if f is not None else "no longer fires"
                out.append(f"info: {rule} {when} (was {_a(before)} {before}): {what}")
        return out

    def final(self, folder, config: dict) -> list[str]:
        """At the end of the seed: the live rules on its files (metrics.csv, episodes.csv), as
        the end-of-training diagnosis reads them; lines where the verdict differs from the last
        one printed."""
        from backflip.doctor.sources import load_seed

        try:
            d = load_seed(folder, config)
            findings = diagnose(d, live=True)
        except Exception:  # noqa: BLE001 — the doctor must never fail a finished seed
            return []
        for f in findings:
            f.message = f.message.removeprefix(f"{d.label}: ")
        return self._announce(findings, "at the end of training", withdraw=True)


def _a(severity: str) -> str:
    return "an" if severity[0] in "aeiou" else "a"
