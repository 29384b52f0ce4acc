"""Per-env settings for preference runs: the policy's hyperparameters, the pipeline's and the
agent-step budget. Precedence as for `backflip train`: these < `--config FILE` < `--set`.

Each carries `task`, the one line the labeling page shows a person: what makes a clip better.

Atari entries (Pong, Enduro) are the paper's configuration and are GPU-scale: the paper's reward
CNN does ~0.4 updates/s on this 2-core CPU, so they are documented, not tested here.
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "MovingDotLowDim-v0": {
        "steps": 200_000,
        "policy": {"ppo": {"num_envs": 8, "num_steps": 128, "gamma": 0.98}},
        # half the labels up front: a poor first reward model sends the policy into a corner
        # it is slow to leave (seen with 150 initial labels); queries chosen by ensemble
        # disagreement and 200k steps instead of 150k: greedy 90.0, 98.8, 90.0 on seeds 0-2
        # (random queries at 150k: 82.6, 84.3, 95.6; docs/benchmarks.md)
        "prefs": {
            "task": "move the dot to the centre of the screen (the cross)",
            "labels": 500,
            "initial_frac": 0.5,
            "pretrain_updates": 1000,
            "rm_updates_per_kstep": 20,
            "selection": "disagreement",
        },
    },
    "MovingDot84-v0": {
        "steps": 50_000,
        "policy": {"ppo": {"num_envs": 8, "num_steps": 128, "gamma": 0.98}},
        "prefs": {
            "task": "move the dot to the centre of the screen (the cross)",
            "labels": 200,
            "dropout": 0.5,
            "store_size": 300,
            "rm_updates_per_kstep": 4,
        },
    },
    # half the labels up front, queries by disagreement: greedy 499.4, 477.4, 478.0, 500.0,
    # 449.4, 498.4 on seeds 0-5, 5 of 6 at >= 0.9 of PPO's 500 (random queries, a quarter up
    # front: 489.0, 456.0, 465.4, 489.0, 500.0, 482.9, 4 of 6)
    "CartPoleFixedHorizon-v1": {
        "steps": 100_000,
        "policy": {"ppo": {}},
        "prefs": {
            "task": "keep the pole balanced upright (a pole that jumps back upright has just fallen)",
            "labels": 500,
            "initial_frac": 0.5,
            "selection": "disagreement",
        },
    },
    # queries by ensemble disagreement: greedy -261, -243, -184, -260, -196, -191 on seeds 0-5
    # (random queries: -365, -215, -232 on seeds 0-2)
    "Pendulum-v1": {
        "steps": 100_000,
        # SAC with its replay buffer relabeled after every reward-model update (PEBBLE): SAC's
        # own budget for Pendulum and half the labels (docs/benchmarks.md)
        "policy": {"ppo": {}, "sac": {"steps": 20_000, "prefs": {"labels": 100}}},
        "prefs": {
            "task": "swing the rod up and hold it upright, pointing at 12 o'clock",
            "labels": 200,
            "segment_length": 25,
            "selection": "disagreement",
        },
    },
    # The paper's Atari settings (GPU-scale; not run on CI): 25-step segments, 500 initial labels
    # from a random policy, 200 epochs of pretraining, dropout 0.5, reward std 0.05.
    "PongNoFrameskip-v4": {
        "steps": 10_000_000,
        "policy": {"ppo": {}},
        "prefs": {
            "task": "win points: you are the green paddle (right); get the ball past the orange one",
            "labels": 5500,
            "initial_frac": 0.09,
            "dropout": 0.5,
            "reward_std": 0.05,
            "pretrain_updates": 20000,
            "selection": "disagreement",
        },
    },
    "EnduroNoFrameskip-v4": {
        "steps": 10_000_000,
        "policy": {"ppo": {}},
        "prefs": {
            "task": "drive fast and pass as many cars as possible without hitting them",
            "labels": 5500,
            "initial_frac": 0.09,
            "dropout": 0.5,
            "reward_std": 0.05,
            "pretrain_updates": 20000,
            "selection": "disagreement",
        },
    },
}
