"""What each algorithm accepts: one module per algorithm (`settings/ppo.py` for `algos/ppo.py`)
with its `Config` dataclass (the hyperparameters; each field's docstring documents it),
`ACTION_SPACES`, `DEFAULT_STEPS`, `PRESETS` (per-env overrides with their step budgets) and,
optionally, `BENCHMARKS`, `ABLATIONS` and `budget(hp, steps, episode_limit)` (the steps the
algorithm will really take, when it cannot stop exactly at the budget: `algos.planned_budget`).

Plain data and arithmetic, apart from the algorithms: checking a config, planning a sweep,
`backflip show` and `--help` read them without importing torch (1.5-4 s). The registry
(`algos/__init__.py`) reads them; an algorithm module imports its `Config` from here.

Shared by several: `box_probe_presets` (below, the off-policy algorithms' Box probes) and
`onpolicy.py` (what PPO, A2C and VPG share: their `Settings`, whole-rollout budgets, presets)
and `offpolicy.py` (what TD3, DDPG and SAC share: their `Settings`), which are not algorithms.
"""

from __future__ import annotations

# Budgets of `backflip probe` on the five Box probes: the default budgets (3,000-16,000 steps,
# one gradient step of 256 samples each) take over a minute; one-step episodes need far less
# (docs/doctor.md, "Probes").
BOX_PROBE_STEPS = {1: 800, 2: 1200, 3: 1500, 4: 2000, 5: 3000}


def box_probe_presets(probe3: dict, **settings) -> dict[str, dict]:
    """`PRESETS` entries for the Box probes: their budgets and `settings`; probe 3, the one that
    bootstraps, also gets `probe3` (faster target critics, say)."""
    presets = {
        f"backflip/Probe{k}Box-v0": {"steps": steps, **settings}
        for k, steps in BOX_PROBE_STEPS.items()
    }
    presets["backflip/Probe3Box-v0"].update(probe3)
    return presets
