"""The algorithm registry.

Each algorithm is two modules in this package:

- `settings/<name>.py`, what it accepts, plain data that imports no torch: `Config` (a dataclass
  of hyperparameters, each field with a one-line docstring), `ACTION_SPACES` (the action-space
  kinds it handles, "discrete", "box"; `BOUNDED_ACTIONS = True` where Box actions are squashed
  into the bounds, which must be finite), `DEFAULT_STEPS` and `PRESETS` (per-env overrides,
  optionally with a `steps` budget); optionally `ABLATIONS` ({switch name: settings that turn it
  off}, for `backflip ablate`), `BENCHMARKS` ({env id: steps}, the reference envs of `backflip
  bench`; default: `PRESETS`), `ACTION_DEFAULTS` ({action-space kind: settings} for an env
  without a preset: `config.resolve`, `runconfig.resolve_on_env`) and `budget(hp, steps,
  episode_limit)` (below);
- `<name>.py`, the algorithm: `train(cfg, run)`, the training loop (`run` is a
  `backflip.seedrun.SeedRun`; DQN, DDPG, TD3 and SAC hand their pieces to the loop they share,
  `offpolicy.train`); `load(checkpoint, obs_space, act_space, device="cpu") -> Agent` (see
  `algos/common.py`); and a `state()` dict for checkpoints that lets `backflip resume` continue
  exactly (docs/experiments.md, "What an algorithm must put in state()").

`get_algo(name)` reads the settings at once and imports the algorithm (torch, 1.5-4 s) only when
`train`, `load` or `module` is used: resolving a config, `backflip show`, `--help` and the
launcher never import torch; the seed processes do.

Budgets: an algorithm that cannot stop exactly at `--steps` (whole rollouts, whole generations)
defines `budget(hp, steps, episode_limit) -> (steps it will take or None if unknown until it
ran, why)`; `planned_budget(cfg)` is what every run records and states before it trains.

`common.py` (GAE, agents, health metrics) and `offpolicy.py` (the off-policy loop) are shared
helpers, not algorithms.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from backflip.errors import UserError, did_you_mean

ALGOS: dict[str, str] = {
    "ppo": "Proximal Policy Optimization (clipped surrogate, GAE)",
    "vpg": "Vanilla Policy Gradient (REINFORCE with a learned value baseline, GAE)",
    "a2c": "Advantage Actor-Critic (synchronous, n-step or GAE advantages)",
    "cem": "Cross-Entropy Method over policy parameters (gradient-free)",
    "dqn": "Deep Q-Network (replay, target network, Double-DQN target, Huber loss)",
    "ddpg": "Deep Deterministic Policy Gradient (deterministic actor, Q critic, replay)",
    "td3": "Twin Delayed DDPG (clipped double-Q, delayed actor, target smoothing)",
    "sac": "Soft Actor-Critic (squashed Gaussian, twin critics, automatic entropy temperature)",
}


@dataclass(frozen=True)
class AlgoSpec:
    name: str
    config: type
    action_spaces: tuple[str, ...]
    default_steps: int
    presets: dict[str, dict]
    settings: Any  # the settings module: Config, PRESETS, ABLATIONS, BENCHMARKS, budget
    action_defaults: dict[str, dict] = dataclasses.field(default_factory=dict)
    bounded_actions: bool = False
    """its Box actions are squashed into the space's bounds, which must then be finite"""

    @property
    def module(self):
        """The algorithm's module (imports torch: only where a seed trains or an agent loads)."""
        return importlib.import_module(f"backflip.algos.{self.name}")

    @property
    def train(self):
        return self.module.train

    @property
    def load(self):
        return self.module.load


def get_algo(name: str) -> AlgoSpec:
    if name not in ALGOS:
        raise UserError(
            f"unknown algorithm {name!r}{did_you_mean(name, ALGOS)}; available: {', '.join(ALGOS)}"
        )
    mod = importlib.import_module(f"backflip.algos.settings.{name}")
    return AlgoSpec(
        name=name,
        config=mod.Config,
        action_spaces=tuple(mod.ACTION_SPACES),
        default_steps=int(mod.DEFAULT_STEPS),
        presets=getattr(mod, "PRESETS", {}),
        settings=mod,
        action_defaults=getattr(mod, "ACTION_DEFAULTS", {}),
        bounded_actions=bool(getattr(mod, "BOUNDED_ACTIONS", False)),
    )


def planned_budget(cfg, episode_limit: int | None = None) -> dict:
    """The env steps each seed of `cfg` (a `TrainConfig`) will take, before it trains:
    {"requested": --steps, "planned": the steps it will take (None: known only once it ran),
    "why": the reason they differ, or None when the budget is exact}. `episode_limit`: the env's
    time limit, for algorithms that finish whole episodes."""
    rule = getattr(get_algo(cfg.algo).settings, "budget", None)
    planned, why = (cfg.steps, None) if rule is None else rule(cfg.hp, cfg.steps, episode_limit)
    if planned == cfg.steps:
        why = None
    return {"requested": cfg.steps, "planned": planned, "why": why}


def budget_line(budget: dict) -> str | None:
    """`budget: 1,000 steps requested, 768 will run (why)`, or None for an exact budget."""
    if not budget.get("why"):
        return None
    planned = budget.get("planned")
    will = f"{planned:,}" if planned is not None else f"at least {budget['requested']:,}"
    return f"budget: {budget['requested']:,} steps requested, {will} will run ({budget['why']})"


def values_ends(algo: str) -> bool:
    """True for the learners that can be paid an episode's end as it happens (PPO, A2C, VPG:
    a discount, and rewards used as they arrive): `prefs.horizon=terminal`'s r̂_abs/(1 − γ).
    Not a replay learner (DQN, DDPG, TD3, SAC: a preference run relabels its stored rewards,
    which would drop the end's value) nor one without a discount (CEM)."""
    from backflip.algos.settings.offpolicy import Settings as OffPolicy

    spec = get_algo(algo)
    has_gamma = any(f.name == "gamma" for f in dataclasses.fields(spec.config))
    return has_gamma and not issubclass(spec.config, OffPolicy)
