"""The algorithm registry.

Each algorithm is one module in this package that defines, at module level:

- `Config`: a dataclass of hyperparameters, each field with a one-line docstring;
- `train(cfg, run)`: the training loop (`run` is a `backflip.seedrun.SeedRun`); DQN, DDPG, TD3
  and SAC hand their pieces to the loop they share, `offpolicy.train`;
- `ACTION_SPACES`: the action-space kinds it handles ("discrete", "box");
- `DEFAULT_STEPS` and `PRESETS` (per-env overrides, optionally with a `steps` budget);
- `load(checkpoint, obs_space, act_space, device="cpu") -> Agent` (see `algos/common.py`);
- a `state()` dict for checkpoints that lets `backflip resume` continue exactly
  (docs/experiments.md, "What an algorithm must put in state()").

Optional: `ABLATIONS` ({switch name: settings that turn it off}, for `backflip ablate`) and
`BENCHMARKS` ({env id: steps}, the reference envs of `backflip bench`; default: `PRESETS`).

`common.py` (GAE, agents, health metrics) and `offpolicy.py` (the off-policy loop) are shared
helpers, not algorithms. Modules are imported lazily so that commands which only read the
archive never import torch.
"""

from __future__ import annotations

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
    train: Any
    action_spaces: tuple[str, ...]
    default_steps: int
    presets: dict[str, dict]
    load: Any
    module: Any


def get_algo(name: str) -> AlgoSpec:
    if name not in ALGOS:
        raise UserError(
            f"unknown algorithm {name!r}{did_you_mean(name, ALGOS)}; available: {', '.join(ALGOS)}"
        )
    mod = importlib.import_module(f"backflip.algos.{name}")
    return AlgoSpec(
        name=name,
        config=mod.Config,
        train=mod.train,
        action_spaces=tuple(mod.ACTION_SPACES),
        default_steps=int(mod.DEFAULT_STEPS),
        presets=getattr(mod, "PRESETS", {}),
        load=mod.load,
        module=mod,
    )
