"""Same seed, same machine, same config: identical metrics (all but time/ and sys/) and episodes."""

import pytest

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.seedrun import SeedRun
from backflip.telemetry import read_metrics

# (algo, env, steps, --set values): one cheap case per algorithm and action-space kind
CASES = [
    ("ppo", "Pendulum-v1", 2048, {"num_steps": 256, "epochs": 2, "scale_reward": True}),
    ("ppo", "Pendulum-v1", 2048, {"num_steps": 256, "epochs": 2, "sde": True}),
    ("a2c", "CartPole-v1", 4096, {"log_every": 500}),
    ("a2c", "Pendulum-v1", 2048, {"num_envs": 4, "norm_obs": True, "scale_reward": True}),
    ("vpg", "CartPole-v1", 4096, {}),
    ("vpg", "Pendulum-v1", 2048, {"num_steps": 128, "norm_obs": True}),
    ("cem", "CartPole-v1", 4096, {}),
    ("cem", "Pendulum-v1", 2048, {"population": 4}),
]


def train_once(folder, algo, env, steps, sets, seed=3):
    cfg = resolve(algo, env, [seed], steps, set_values={k: str(v) for k, v in sets.items()})
    run = SeedRun(cfg, seed, folder)
    get_algo(algo).train(cfg.hp, run)
    run.close()
    metrics = read_metrics(folder / "metrics.csv")
    return (
        {k: v for k, v in metrics.items() if not k.startswith(("time/", "sys/"))},
        (folder / "episodes.csv").read_text(),
    )


@pytest.mark.parametrize(("algo", "env", "steps", "sets"), CASES)
def test_same_seed_gives_identical_metrics(tmp_path, algo, env, steps, sets):
    a, ep_a = train_once(tmp_path / "a", algo, env, steps, sets)
    b, ep_b = train_once(tmp_path / "b", algo, env, steps, sets)
    assert a.keys() == b.keys() and len(a) > 8
    for k in a:
        assert (a[k][0] == b[k][0]).all() and (a[k][1] == b[k][1]).all(), k
    assert ep_a == ep_b and ep_a.count("\n") > 2
