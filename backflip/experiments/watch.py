"""`backflip watch ID`: one greedy episode of a checkpoint, as MP4 (docs/videos.md).

The agent comes from the algorithm's `load(checkpoint, obs_space, act_space) -> Agent`; the
episode is seeded like the run's evaluation copies (`layout.eval_seed`), on a rendering env copy
with the run's `env.*` wrappers (`backflip.video`).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from backflip.algos import get_algo
from backflip.config import TrainConfig
from backflip.errors import UserError
from backflip.runs.archive import load_checkpoint, load_run
from backflip.runs.layout import VIDEOS, eval_seed, seed_dir
from backflip.video import make_render_env, record_video


def watch(
    run_dir: Path, seed: int | None = None, checkpoint: str | None = None, out: Path | None = None
) -> dict:
    """Render one greedy episode of a checkpoint to MP4; returns the path and the episode's return."""
    record = load_run(run_dir)
    seeds = record["config"]["seeds"]
    seed = seeds[0] if seed is None else seed
    if seed not in seeds:
        raise UserError(f"run {record['id']} has seeds {seeds}, not {seed}")
    path, ckpt = load_checkpoint(run_dir, seed, checkpoint)
    cfg = TrainConfig.from_dict(ckpt.get("config") or record["config"])
    env = make_render_env(cfg.env_id, cfg.env)
    try:
        agent = get_algo(cfg.algo).load(ckpt, env.observation_space, env.action_space)
        if out is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            out = seed_dir(run_dir, seed) / VIDEOS / f"watch_{path.stem}_{stamp}.mp4"
        with torch.inference_mode():
            info = record_video(agent.act, env, Path(out), eval_seed(seed))
    finally:
        env.close()
    info.update(checkpoint=str(path), step=ckpt.get("step"), seed=seed)
    return info
