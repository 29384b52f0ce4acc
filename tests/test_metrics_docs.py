"""Every metric an algorithm logs is documented in docs/metrics.md under the same name."""

import re

import pytest

from backflip.config import resolve
from backflip.seedrun import SeedRun
from tests.conftest import ROOT


def documented_names() -> set[str]:
    """Names in backticks; a `_suffix` token extends the stem of the full name before it."""
    names, stem = set(), None
    for token in re.findall(r"`([^`\s]+)`", (ROOT / "docs" / "metrics.md").read_text()):
        if "/" in token:
            names.add(token)
            stem = token.rsplit("_", 1)[0]
        elif token.startswith("_") and stem:
            names.add(stem + token)
    return names


def logged_names(algo, env, steps, **sets) -> set[str]:
    cfg = resolve(algo, env, [0], steps, set_values={k: str(v) for k, v in sets.items()})
    from backflip.algos import get_algo

    names: set[str] = set()
    run = SeedRun(cfg, 0, on_row=lambda step, row: names.update(row))
    get_algo(algo).train(cfg.hp, run)
    run.close()
    return names


CASES = [
    ("ppo", "CartPole-v1", 1024, {"epochs": 1}),
    ("ppo", "Pendulum-v1", 2048, {"epochs": 1, "num_steps": 256, "scale_reward": True}),
    ("a2c", "CartPole-v1", 2048, {"log_interval": 500}),
    ("a2c", "Pendulum-v1", 2048, {"scale_reward": True}),
    ("vpg", "CartPole-v1", 2048, {}),
    ("vpg", "Pendulum-v1", 2048, {"num_steps": 128, "scale_reward": True}),
    ("cem", "CartPole-v1", 2048, {}),
    ("cem", "Pendulum-v1", 2048, {"population": 4}),
]


@pytest.mark.parametrize(("algo", "env", "steps", "sets"), CASES)
def test_logged_metrics_are_documented(algo, env, steps, sets):
    missing = logged_names(algo, env, steps, **sets) - documented_names()
    assert not missing, f"undocumented metrics: {sorted(missing)}"
