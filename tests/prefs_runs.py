"""Preference runs laid out as `backflip prefs train` leaves them, with chosen returns.

A real preference run takes seconds per seed but its returns are whatever training gives; the
doctor's and the UI's tests need a run whose learned-reward return and true return diverge in a
chosen way. The files are written by backflip's own telemetry and archive code, so they are
the files a real run has: `rollout/ep_return_*` and `episodes.csv` hold the learned reward r̂
(what the algorithm saw), `prefs/true_return_mean` the true return, plus the pipeline's
`prefs/*` and `reward_model/*` series and a final greedy evaluation on the true reward.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

STEPS = 200_000
EPISODE = 1_000  # MovingDot's fixed horizon


def write_preference_run(
    home: Path, true_returns, learned_returns, seeds: tuple[int, ...] = (0,)
) -> Path:
    """A finished preference run in archive `home`: one metrics row per value of
    `true_returns` (evenly spaced over `STEPS`), the `learned_returns` as finished training
    episodes spread evenly over the rows. Returns the run directory."""
    from backflip.runs.archive import write_json
    from backflip.runs.layout import seed_dir
    from backflip.runs.records import create_run, finalize_run
    from backflip.telemetry import Telemetry

    true_returns = np.asarray(true_returns, float)
    learned_returns = np.asarray(learned_returns, float)
    config = {
        "algo": "ppo",
        "env_id": "MovingDotLowDim-v0",
        "seeds": list(seeds),
        "steps": STEPS,
        "hp": {"gamma": 0.98, "norm_obs": False},
        "run": {"eval_episodes": 10, "eval_every": 0},
        "env": {},
        "prefs": {"labels": 500, "labeler": "synthetic", "stage": "full"},
    }
    run_dir, _ = create_run(home, config, ["backflip", "prefs", "train", "ppo"], "prefs test")
    rows = len(true_returns)
    chunks = np.array_split(learned_returns, rows)
    for seed in seeds:
        folder = seed_dir(run_dir, seed)
        tel = Telemetry(folder, tensorboard=False)
        for i, (true, learned) in enumerate(zip(true_returns, chunks, strict=True)):
            step = (i + 1) * STEPS // rows
            for ret in learned:
                tel.episode(step, float(ret), EPISODE)
            frac = (i + 1) / rows
            tel.log(
                **{
                    "prefs/true_return_mean": float(true),
                    "prefs/pred_return_mean": float(learned.mean()) if len(learned) else 0.0,
                    "prefs/labels": float(round(500 * min(1.0, 0.25 + frac))),
                    "prefs/label_debt": 0.0,
                    "prefs/labels_per_s": 3.0 if frac < 0.8 else 0.0,
                    "reward_model/val_acc": 0.6 + 0.3 * frac,
                    "reward_model/segment_corr": 0.85,
                    "reward_model/return_corr": 0.9,
                    "reward_model/val_train_loss_ratio": 1.3,
                    "train/entropy_norm": 0.9 - 0.4 * frac,
                    "env/reward_min": -2.0,
                    "env/reward_max": 2.0,
                }
            )
            if i == rows - 1:  # the final greedy evaluation, on the true reward
                tel.log(**{"eval/return_mean": float(true), "eval/return_max": float(true)})
            tel.dump(step)
        tel.close()
        write_json(
            folder / "status.json",
            {
                "seed": seed,
                "status": "finished",
                "steps": STEPS,
                "final_eval_return": float(true_returns[-1]),
            },
        )
    finalize_run(home, run_dir, started=0.0)
    return run_dir
