"""A checkpoint loads back into an Agent that acts like the trained policy (evaluation, probes)."""

import pytest
import torch

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.envs import make_vec
from backflip.runs.layout import eval_seed
from backflip.seedrun import SeedRun, evaluate

CASES = [
    ("ppo", "CartPole-v1", 4096, {"epochs": "4", "norm_obs": "true"}),
    ("a2c", "CartPole-v1", 4096, {"norm_obs": "true"}),
    ("a2c", "Pendulum-v1", 2048, {}),
    ("vpg", "CartPole-v1", 4096, {"norm_obs": "true"}),
    ("cem", "CartPole-v1", 2048, {}),
    ("cem", "Pendulum-v1", 2048, {"population": "4"}),
]


@pytest.mark.parametrize(("algo", "env", "steps", "sets"), CASES)
def test_final_checkpoint_reproduces_the_final_evaluation(tmp_path, algo, env, steps, sets):
    cfg = resolve(algo, env, [0], steps, set_values=sets)
    run = SeedRun(cfg, 0, tmp_path)
    spec = get_algo(algo)
    spec.train(cfg.hp, run)
    run.close()
    checkpoint = torch.load(tmp_path / "checkpoints" / "final.pt", weights_only=False)
    envs = make_vec(env, cfg.run.eval_episodes)
    agent = spec.load(checkpoint, envs.single_observation_space, envs.single_action_space)
    rets, _ = evaluate(agent.act, envs, cfg.run.eval_episodes, eval_seed(run.seed))
    assert rets.mean() == run.result["eval_return"]
    if agent.value is not None:
        assert agent.value(envs.reset(seed=0)[0]).shape == (cfg.run.eval_episodes,)
