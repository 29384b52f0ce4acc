"""Per-env settings for preference runs: the policy's hyperparameters, the pipeline's and the
agent-step budget. Precedence as for `backflip train`: these < `--config FILE` < `--set`.

Each carries `task`, the one line the labeling page shows a person: what makes a clip better.

Atari (Pong, Enduro) has two: `cpu` (the default; budgets a 2-core CPU runs in hours) and
`paper` (Christiano et al.'s settings, GPU-scale), chosen with `backflip prefs train --preset`;
docs/preferences.md says why each CPU setting is what it is.
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "MovingDotLowDim-v0": {
        "steps": 200_000,
        # The reward changes until the last labels: the policy keeps its learning rate and clip
        # range (no annealing to zero while the model still moves) and an entropy bonus, so it
        # can follow the model rather than freeze where an earlier one pointed (a person's runs
        # stopped 15-25 px short of the centre with annealing; docs/preferences.md).
        "policy": {
            "ppo": {
                "num_envs": 8,
                "num_steps": 128,
                "gamma": 0.98,
                "anneal_lr": False,
                "anneal_clip": False,
                "ent_coef": 0.01,
            }
        },
        # half the labels up front, queries chosen by ensemble disagreement, 200k steps. The
        # initial clips come from 64 random-policy copies: a 1,000-step episode of a random walk
        # stays near its start, so 8 copies covered 8 neighbourhoods of the screen and the first
        # reward model extrapolated (its top at a corner); 64 starts cover the screen
        "prefs": {
            "task": "move the dot to the centre of the screen (the cross)",
            "labels": 500,
            "initial_frac": 0.5,
            "random_envs": 64,
            "pretrain_updates": 1000,
            "rm_updates_per_kstep": 20,
            "selection": "disagreement",
        },
    },
    "MovingDot84-v0": {
        # 1e5 steps: greedy 0.98, 1.13, 1.13 of PPO on the true reward on seeds 0-2 (at 5e4:
        # 0.72, 0.94, 1.07, seed 0's greedy policy still standing still in places where its
        # reward model was right; docs/benchmarks.md)
        "steps": 100_000,
        # The policy reads the dot's position as the reward CNN does (keypoints): with NatureCNN
        # its greedy action was a no-op in much of the screen after 50k steps, on the learned and
        # the true reward alike (9 and 10 of 20 greedy episodes at 0). Entropy bonus and no
        # annealing as the low-dimensional preset, for the same reason
        "policy": {
            "ppo": {
                "num_envs": 8,
                "num_steps": 128,
                "gamma": 0.98,
                "cnn": "keypoints",
                "anneal_lr": False,
                "anneal_clip": False,
                "ent_coef": 0.01,
            }
        },
        # The reward CNN learns which move goes towards the centre only with one output per
        # action (the paper's one-hot beside 784 conv features learns where clips were, not what
        # the actions did), on every step of short segments (summing every 5th step of 25, the
        # Atari CPU preset's shortcut, drowned each label's signal in sampling noise), without
        # dropout on a 2x2-pixel dot, and best from coordinates (with a NatureCNN policy at 5e4
        # steps, keypoints: greedy 90.4, 32.2, 64.6 on seeds 0-2; the paper's CNN with action
        # heads 91.2, 6.8, 25.1); labels as the low-dimensional preset (docs/preferences.md,
        # "From frames")
        "prefs": {
            "task": "move the dot to the centre of the screen (the cross)",
            "labels": 500,
            "initial_frac": 0.5,
            "random_envs": 64,
            "selection": "disagreement",
            "segment_length": 10,
            "action_input": "heads",
            "cnn": "keypoints",
            "dropout": 0.0,
            "store_size": 300,
            "rm_updates_per_kstep": 10,
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
    # Atari on a CPU (docs/preferences.md, "Atari on a CPU"): see CPU_ATARI below
    "PongNoFrameskip-v4": {},
    "EnduroNoFrameskip-v4": {},
}

# The paper's Atari settings (GPU-scale): 25-step segments, 500 of 5,500 labels from a random
# policy, long pretraining, dropout 0.5, reward std 0.05, queries by disagreement. On this
# project's 2-core CPU the paper's reward CNN did ~0.13 updates/s before the fast paths: 20,000
# pretraining updates were ~40 hours. `--preset paper` (the default with `--set device=cuda`).
PAPER_ATARI = {
    "steps": 10_000_000,
    "policy": {"ppo": {}},
    "prefs": {
        # a game ends on the score or the clock (no time limit to fix a horizon at): the
        # measured Pong runs kept the games' own episodes (docs/preferences.md, "The horizon")
        "horizon": "variable",
        "cnn": "paper",
        "labels": 5500,
        "initial_frac": 0.09,
        "dropout": 0.5,
        "reward_std": 0.05,
        "pretrain_updates": 20000,
        "selection": "disagreement",
    },
}
# A CPU's budget: fewer labels and steps, the reward CNN trained on every 4th step of each
# segment, shorter pretraining (each choice justified in docs/preferences.md). The reward CNN
# reads the ball and paddles as coordinates (keypoints, no dropout): with the paper's CNN a
# 90-minute Pong run stayed at -20.9, its model never learning that a point won is good from
# the 13 clips of one it was shown; with keypoints the same budget passed -10 at 1.0M steps
# (docs/benchmarks.md)
CPU_ATARI = {
    "steps": 2_000_000,
    "policy": {"ppo": {}},
    "prefs": {
        "horizon": "variable",  # as the paper preset's
        "labels": 1500,
        "initial_frac": 0.2,
        "cnn": "keypoints",
        "dropout": 0.0,
        "reward_std": 0.05,
        "frame_stride": 4,
        "pretrain_updates": 150,
        "rm_updates_per_kstep": 1.0,
        "round_updates": 100,
        "eval_pairs": 64,
        "store_size": 400,
        "buffer_labels": 1500,
        "selection": "disagreement",
        "oversample": 4,
        "tick_steps": 16384,
    },
}
TASKS = {
    "PongNoFrameskip-v4": "win points: you are the green paddle (right); get the ball past the "
    "orange one",
    "EnduroNoFrameskip-v4": "drive fast and pass as many cars as possible without hitting them",
}
PAPER: dict[str, dict] = {}
for _env, _task in TASKS.items():
    PRESETS[_env] = {**CPU_ATARI, "prefs": {**CPU_ATARI["prefs"], "task": _task}}
    PAPER[_env] = {**PAPER_ATARI, "prefs": {**PAPER_ATARI["prefs"], "task": _task}}

PRESET_NAMES = ("cpu", "paper")


def preset_for(env_id: str, name: str = "cpu") -> dict:
    """The preset `name` for `env_id`: `cpu` (every env's default, sized for a CPU) or `paper`
    (the paper's GPU-scale settings, where there are some). An env without one gets {}."""
    if name == "paper":
        if env_id not in PAPER:
            from backflip.errors import UserError

            raise UserError(
                f"no paper preset for {env_id} (there are for {', '.join(sorted(PAPER))})"
            )
        return PAPER[env_id]
    return PRESETS.get(env_id, {})
