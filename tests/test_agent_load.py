"""A checkpoint loads back into an Agent that acts like the trained policy (evaluation, probes)."""

import torch

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.envs import make_vec
from backflip.seedrun import EVAL_SEED_OFFSET, SeedRun, evaluate


def test_final_checkpoint_reproduces_the_final_evaluation(tmp_path):
    cfg = resolve("ppo", "CartPole-v1", [0], 4096, set_values={"epochs": "4", "norm_obs": "true"})
    run = SeedRun(cfg, 0, tmp_path)
    spec = get_algo("ppo")
    spec.train(cfg.hp, run)
    run.close()
    checkpoint = torch.load(tmp_path / "checkpoints" / "final.pt", weights_only=False)
    envs = make_vec("CartPole-v1", cfg.run.eval_episodes)
    agent = spec.load(checkpoint, envs.single_observation_space, envs.single_action_space)
    rets, _ = evaluate(agent.act, envs, cfg.run.eval_episodes, run.env_seed + EVAL_SEED_OFFSET)
    assert rets.mean() == run.result["eval_return"]
    assert agent.value(envs.reset(seed=0)[0]).shape == (cfg.run.eval_episodes,)
