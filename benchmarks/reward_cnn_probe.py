"""Can the reward CNN learn MovingDot84's reward from preferences? A probe without a policy.

Random-policy clips of `MovingDot84-v0` (from 64 starts, as the preset's first labels), labeled
by the oracle on their true returns, train one reward-model member (backflip's `RewardModel`)
per variant; the probe prints, per variant and every 250 updates:

- val_acc: accuracy on held-out labeled pairs (1/e of them, as the pipeline);
- corr: over a grid of dot positions x 5 actions, the correlation of r̂(o, a) with the true
  r(o, a) after removing each position's mean (what a policy's choice between actions sees);
- towards: the share of grid positions whose argmax_a r̂(o, a) moves the dot towards the centre
  (a random choice: about 0.4).

    python benchmarks/reward_cnn_probe.py                       # the variants below
    python benchmarks/reward_cnn_probe.py --variants heads,keypoints --labels 1000
    python benchmarks/reward_cnn_probe.py --run runs/ID     # a preference run's saved models

Variants (`prefs.*` settings): concat (the paper's CNN, the action one-hot beside its features),
heads (`action_input=heads`), keypoints (`action_input=heads`, `cnn=keypoints`), each on
10-step segments and every step; stride5 is heads on the 25-step segments with `frame_stride=5`
that the preset used before. A low-dimensional reference (`MovingDotLowDim-v0`, the MLP) runs
with --variants lowdim.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import backflip.envs  # noqa: F401  (registers MovingDot)
from backflip.envs import moving_dot as md
from backflip.prefs.reward_model import PairSet, RewardModel

VARIANTS = {
    "concat": {"segment_length": 10},
    "heads": {"segment_length": 10, "action_heads": True},
    "keypoints": {"segment_length": 10, "action_heads": True, "cnn": "keypoints"},
    "stride5": {"segment_length": 25, "action_heads": True, "frame_stride": 5},
    "lowdim": {"segment_length": 10, "lowdim": True},
}


def clips(env_id: str, n: int, length: int, rng) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """n clips of `length` random steps, cut in turn from 64 random walks (each episode 1,000
    steps from a random start), with their true returns."""
    envs = [gym.make(env_id) for _ in range(64)]
    obs = [e.reset(seed=int(rng.integers(1 << 30)))[0] for e in envs]
    out = []
    for i in range(n):
        k = i % 64
        o, a, ret = [], [], 0.0
        for _ in range(length):
            act = int(rng.integers(5))
            o.append(obs[k])
            a.append(act)
            obs[k], r, _, truncated, _ = envs[k].step(act)
            ret += r
            if truncated:
                obs[k] = envs[k].reset()[0]
        out.append((np.stack(o), np.array(a), ret))
    return out


def grid(lowdim: bool):
    """Observations of dot positions every 4 px, and the true reward of each action there."""
    pos = np.array(
        [
            (x, y)
            for x in range(0, md.WIDTH - md.DOT + 1, 4)
            for y in range(0, md.HEIGHT - md.DOT + 1, 4)
        ]
    )
    if lowdim:
        obs = (pos / [md.WIDTH, md.HEIGHT]).astype(np.float32)
    else:
        obs = np.stack([md.draw(p, 84, 84)[None, :, :, 0] for p in pos])
    _, true = md.move(pos[:, None], np.arange(len(md.MOVES)))
    return obs, true


def score(pred: np.ndarray, true: np.ndarray) -> dict:
    """corr and towards (the module docstring) of rewards `pred` (positions, actions) against
    the true rewards of the grid."""
    centred = [x - x.mean(1, keepdims=True) for x in (pred, true)]
    return {
        "corr": round(float(np.corrcoef(centred[0].ravel(), centred[1].ravel())[0, 1]), 3),
        "towards": round(float(np.mean(true[np.arange(len(true)), pred.argmax(1)] > 0)), 3),
    }


def saved_models(run_dir: Path) -> None:
    """Score each seed's saved reward model (`reward_model.pt`) of a MovingDot84 preference run:
    the rewards its policy saw at the end (the ensemble's normalized mean)."""
    from backflip.config import PrefsConfig
    from backflip.prefs.pipeline import build_reward_model
    from backflip.runs.archive import load_run

    record = load_run(run_dir)
    env = gym.make(record["config"]["env_id"])
    g_obs, g_true = grid(lowdim=len(env.observation_space.shape) == 1)
    print("| seed | corr | towards |\n|---|---|---|")
    for path in sorted(run_dir.glob("seeds/*/reward_model.pt")):
        saved = torch.load(path, weights_only=False)
        cfg = PrefsConfig.from_dict(saved["prefs"])
        model = build_reward_model(cfg, env.observation_space, env.action_space, seed=0)
        model.load_state_dict(saved["model"])
        pred = np.stack([model.reward(g_obs, np.full(len(g_obs), a)) for a in range(5)], 1)
        row = score(pred, g_true)
        print(f"| {path.parent.name} | {row['corr']} | {row['towards']} |")


def probe(name: str, args) -> list[dict]:
    v = dict(VARIANTS[name])
    lowdim = v.pop("lowdim", False)
    length = v.pop("segment_length")
    env_id = "MovingDotLowDim-v0" if lowdim else "MovingDot84-v0"
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    segs = clips(env_id, 2 * args.labels, length, rng)
    rows = []
    for q in range(args.labels):
        r1, r2 = segs[2 * q][2], segs[2 * q + 1][2]
        rows.append((q, 2 * q, 2 * q + 1, 0.5 if r1 == r2 else float(r1 > r2)))
    env = gym.make(env_id)
    model = RewardModel(
        env.observation_space,
        env.action_space,
        members=1,
        dropout=0.0,
        rng=np.random.default_rng(args.seed + 1),
        **v,
    )
    model.observe(np.concatenate([s[0] for s in segs]))
    pairs = PairSet(1, np.random.default_rng(args.seed + 2), capacity=len(rows))
    pairs.sync(rows, lambda i: segs[i][:2])
    g_obs, g_true = grid(lowdim)
    log, t0 = [], time.time()
    for u in range(1, args.updates + 1):
        model.train_step(pairs)
        if u % 250 and u != args.updates:
            continue
        train_loss, _ = model.evaluate(pairs, pairs.train)
        val_loss, val_acc = model.evaluate(pairs, pairs.val)
        model.adapt_l2(train_loss, val_loss)
        pred = np.stack([model.raw_rewards(g_obs, np.full(len(g_obs), a))[0] for a in range(5)], 1)
        row = {
            "variant": name,
            "updates": u,
            "val_acc": round(float(val_acc[0]), 3),
            **score(pred, g_true),
            "seconds": round(time.time() - t0),
        }
        print(json.dumps(row), flush=True)
        log.append(row)
    return log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--variants", default="concat,heads,keypoints,stride5")
    ap.add_argument("--labels", type=int, default=500)
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run", type=Path, help="score the saved reward models of this run instead")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.run:
        return saved_models(args.run)
    results = {}
    for name in args.variants.split(","):
        if name not in VARIANTS:
            ap.error(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
        results[name] = probe(name, args)
    print("\n| variant | val_acc | corr | towards | seconds |\n|---|---|---|---|---|")
    for name, log in results.items():
        last = log[-1]
        print(
            f"| {name} | {last['val_acc']} | {last['corr']} | {last['towards']} | "
            f"{last['seconds']} |"
        )


if __name__ == "__main__":
    main()
