"""Envs a user brings, registered as a user's own module would: `--env user_envs:ID`.

MinAtar (Young & Tian 2019, `pip install minatar`) registers its Gymnasium envs only when asked
(`minatar.gym.register_envs()`): 10x10 frames of booleans, channels last (MinAtar/Breakout-v1:
10x10x4; Freeway 10x10x7; SpaceInvaders 10x10x6), no time limit. Importing this module does it,
which is what `--env user_envs:MinAtar/Breakout-v1` asks backflip to do first (run from
benchmarks/, or with benchmarks/ on PYTHONPATH).
"""

from __future__ import annotations

import gymnasium as gym

try:
    import minatar.gym
except ImportError as e:  # the `bench` extra has it
    raise ImportError("MinAtar envs need `pip install minatar` (backflip's bench extra)") from e

if "MinAtar/Breakout-v1" not in gym.registry:
    minatar.gym.register_envs()
