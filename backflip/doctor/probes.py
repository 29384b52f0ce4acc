"""`backflip probe ALGO`: train an algorithm on Jones's probe environments and check what it learned.

Each probe (`backflip/envs/probes.py`) has a known answer. The algorithm trains on it in-process
through the same `SeedRun` as `backflip train` (so a monkeypatched bug in a test reaches it), then
its final checkpoint is loaded with the module's `load(checkpoint, obs_space, act_space)` and the
resulting `Agent` is asked for values (`Agent.value`: V(s) or max_a Q(s, a)) and greedy actions
(`Agent.act`) on the probe's observations:

| probe | checks | a failure means |
|---|---|---|
| 1 | V(0) = 1 | value loss or optimizer broken |
| 2 | V(+1) = +1, V(−1) = −1 | the value net can't use its input (backprop, batching) |
| 3 | V(0) = γ, V(1) = 1 (γ = 0.5 if the algorithm has `gamma`) | discounting / bootstrapping |
| 4 | act(0) = 0, V(0) = 1 (Box: act(0) = 0.5) | policy loss / advantage sign |
| 5 | act(±1) matches the sign (Box: ±0.5), V(±1) = 1 | policy–value interplay, batching |

Probe 3 runs with γ = 0.5 so that a discount applied twice (γ² = 0.25) is far outside the
tolerance. An algorithm may tune a probe through its `PRESETS` (`algos/settings/<algo>.py`)
under the probe's env id (e.g. `"backflip/Probe4Box-v0": {"steps": 20000}`); otherwise the
budgets below apply. An
algorithm without a value function (`Agent.value is None`) skips the value checks.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backflip.runs.layout import CHECKPOINTS, FINAL_CHECKPOINT

VALUE_TOL = 0.1
ACTION_TOL = 0.1
PROBE_GAMMA = 0.5
# default budgets (env steps) when the algorithm's PRESETS name none for the probe
STEPS = {1: 3000, 2: 3000, 3: 4000, 4: 3000, 5: 6000}
BOX_STEPS = {1: 3000, 2: 3000, 3: 4000, 4: 12000, 5: 16000}
MEANING = {
    1: "value loss or optimizer broken",
    2: "the value net can't use its input (backprop, batching)",
    3: "discounting / bootstrapping broken",
    4: "policy loss / advantage broken",
    5: "policy–value interplay or batching broken",
}


@dataclass
class Check:
    name: str
    measured: float
    expected: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return bool(
            np.isfinite(self.measured) and abs(self.measured - self.expected) <= self.tolerance
        )

    def text(self) -> str:
        tol = f" ± {self.tolerance:.2f}" if self.tolerance else ""
        mark = "ok" if self.passed else "WRONG"
        return f"{self.name} = {self.measured:.2f} (expected {self.expected:.2f}{tol}) {mark}"


@dataclass
class ProbeResult:
    probe: int
    env_id: str
    kind: str
    steps: int
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    @property
    def passed(self) -> bool | None:
        """True/False, or None when nothing could be checked (no value function, say)."""
        return all(c.passed for c in self.checks) if self.checks else None

    def to_dict(self) -> dict:
        return {
            "probe": self.probe,
            "env_id": self.env_id,
            "kind": self.kind,
            "steps": self.steps,
            "passed": self.passed,
            "means_if_failed": MEANING[self.probe],
            "checks": [
                {**dataclasses.asdict(c), "passed": c.passed, "text": c.text()} for c in self.checks
            ],
            "seconds": round(self.seconds, 2),
            "note": self.note,
        }


def probe_kinds(spec) -> list[bool]:
    """Which probe families an algorithm takes: False = discrete actions, True = Box."""
    return [kind == "box" for kind in ("discrete", "box") if kind in spec.action_spaces]


def run_probe(algo: str, k: int, box: bool, seed: int = 0, steps: int | None = None):
    """Train `algo` on probe k (Box actions if `box`) and check the learned agent."""
    import torch

    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.envs import make_env
    from backflip.envs.probes import probe_id
    from backflip.seedrun import SeedRun

    spec = get_algo(algo)
    env_id = probe_id(k, box)
    preset = spec.presets.get(env_id, {})
    steps = steps or preset.get("steps") or (BOX_STEPS if box else STEPS)[k]
    fields = {f.name for f in dataclasses.fields(spec.config)}
    sets = {"telemetry": "false", "eval_episodes": "1", "checkpoint_every": str(steps)}
    if k == 3 and "gamma" in fields and "gamma" not in preset:
        sets["gamma"] = str(PROBE_GAMMA)
    cfg = resolve(algo, env_id, [seed], steps, set_values=sets)
    result = ProbeResult(k, env_id, "box" if box else "discrete", steps)
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="backflip-probe-") as tmp:
            run = SeedRun(cfg, seed, tmp)
            try:
                spec.train(cfg.hp, run)
            finally:
                run.close()
            checkpoint = torch.load(
                Path(tmp) / CHECKPOINTS / FINAL_CHECKPOINT, weights_only=False, map_location="cpu"
            )
    finally:
        torch.set_num_threads(threads)
    env = make_env(env_id)
    agent = spec.load(checkpoint, env.observation_space, env.action_space)
    env.close()
    gamma = float(getattr(cfg.hp, "gamma", 1.0))
    result.checks = _checks(k, box, agent, gamma)
    if agent.value is None and k <= 3:
        result.note = "skipped: the algorithm has no value function"
    result.seconds = time.perf_counter() - t0
    return result


def _checks(k: int, box: bool, agent, gamma: float) -> list[Check]:
    obs = {
        0: np.array([[0.0]], np.float32),
        1: np.array([[1.0]], np.float32),
        -1: np.array([[-1.0]], np.float32),
    }

    def v(o) -> float:
        return float(np.asarray(agent.value(obs[o]), np.float64).reshape(-1)[0])

    def a(o) -> float:
        return float(np.asarray(agent.act(obs[o]), np.float64).reshape(-1)[0])

    checks = []
    has_v = agent.value is not None
    if k == 1 and has_v:
        checks.append(Check("V(0)", v(0), 1.0, VALUE_TOL))
    elif k == 2 and has_v:
        checks += [Check("V(+1)", v(1), 1.0, VALUE_TOL), Check("V(-1)", v(-1), -1.0, VALUE_TOL)]
    elif k == 3 and has_v:
        checks += [Check("V(0)", v(0), gamma, VALUE_TOL), Check("V(1)", v(1), 1.0, VALUE_TOL)]
    elif k == 4:
        if box:
            checks.append(Check("action(0)", a(0), 0.5, ACTION_TOL))
        else:
            checks.append(Check("action(0)", a(0), 0.0, 0.0))
            if has_v:
                checks.append(Check("V(0)", v(0), 1.0, VALUE_TOL))
    elif k == 5:
        if box:
            checks += [
                Check("action(+1)", a(1), 0.5, ACTION_TOL),
                Check("action(-1)", a(-1), -0.5, ACTION_TOL),
            ]
        else:
            checks += [Check("action(+1)", a(1), 1.0, 0.0), Check("action(-1)", a(-1), 0.0, 0.0)]
            if has_v:
                checks += [
                    Check("V(+1)", v(1), 1.0, VALUE_TOL),
                    Check("V(-1)", v(-1), 1.0, VALUE_TOL),
                ]
    return checks


def run_probes(
    algo: str,
    seed: int = 0,
    probes: list[int] | None = None,
    kinds: list[bool] | None = None,
    on_result=None,
) -> list[ProbeResult]:
    """Every probe (or the chosen ones) for every action-space kind the algorithm takes."""
    from backflip.algos import get_algo

    spec = get_algo(algo)
    results = []
    for box in kinds if kinds is not None else probe_kinds(spec):
        for k in probes or [1, 2, 3, 4, 5]:
            r = run_probe(algo, k, box, seed)
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


def result_line(r: ProbeResult) -> str:
    status = {True: "pass", False: "FAIL", None: "skip"}[r.passed]
    checks = "; ".join(c.text() for c in r.checks) or r.note
    line = f"{status:4} probe {r.probe} {r.kind:8} {checks}  [{r.steps:,} steps, {r.seconds:.1f} s]"
    if r.passed is False:
        line += f"\n       a failure here usually means: {MEANING[r.probe]}"
    return line
