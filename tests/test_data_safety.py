"""Data safety (issue 23 part 5): budgets are exact or stated before training, `bench` writes the
docs only when asked and only its own rows, the README's commands leave a git working tree
clean, and custom env modules import from the current directory for `train` and `rerun`.
(Duplicate seeds and `--workers 0`: tests/test_bad_input.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backflip.algos import ALGOS, budget_line, get_algo, planned_budget
from backflip.config import resolve
from backflip.envs import episode_limit
from backflip.seedrun import SeedRun

# --- budgets ---------------------------------------------------------------------------------

# (env, a budget no algorithm's rollout or generation divides, settings that keep it cheap)
BUDGET_CASES = {
    "ppo": ("CartPole-v1", 1000, {"epochs": 1}),  # 256-step rollouts: 768
    "a2c": ("CartPole-v1", 1000, {}),  # 128-step rollouts: 896
    "vpg": ("CartPole-v1", 1000, {}),  # one 1,024-step rollout: more than asked
    "cem": ("CartPole-v1", 1000, {"population": 8}),  # whole generations
    "dqn": ("CartPole-v1", 1001, {}),
    "ddpg": ("Pendulum-v1", 301, {}),
    "td3": ("Pendulum-v1", 301, {}),
    "sac": ("Pendulum-v1", 301, {"learning_starts": 250}),
}


def test_every_algorithm_has_a_budget_case():
    assert set(BUDGET_CASES) == set(ALGOS)


@pytest.mark.parametrize("algo", list(BUDGET_CASES))
def test_each_algorithm_takes_the_steps_its_budget_states(tmp_path, algo):
    env, steps, sets = BUDGET_CASES[algo]
    sets = {**sets, "eval_episodes": 1}
    cfg = resolve(algo, env, [0], steps, set_values={k: str(v) for k, v in sets.items()})
    budget = planned_budget(cfg, episode_limit(cfg.env_id, cfg.env))
    run = SeedRun(cfg, 0, tmp_path)
    get_algo(algo).train(cfg.hp, run)
    run.close()
    assert budget["requested"] == steps
    if budget["planned"] is not None:  # known in advance: exactly what ran
        assert run.step == budget["planned"], (algo, budget, run.step)
        assert (budget["why"] is None) == (run.step == steps)
    else:  # CEM: whole generations, within the bound it states
        most = int(budget["why"].split(": at most ")[1].split()[0].replace(",", ""))
        assert steps <= run.step <= most, (budget, run.step)
    line = budget_line(budget)
    if run.step != steps:  # a budget that is not exact is stated, with its reason
        assert line.startswith(f"budget: {steps:,} steps requested, ") and "(" in line, line


def test_train_states_the_budget_before_training_and_records_both(cli, home):
    proc = cli(
        "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "1000",
        "--set", "epochs=1", "--set", "eval_episodes=1", "--no-progress", "--no-ask",
    )  # fmt: skip
    stated = (
        "budget: 1,000 steps requested, 768 will run (ppo collects whole rollouts of "
        "num_envs × num_steps = 8 × 32 = 256 steps: 3 rollouts)"
    )
    assert stated in proc.stderr, proc.stderr
    (run,) = [p for p in home.iterdir() if (p / "run.json").exists()]
    record = json.loads((run / "run.json").read_text())
    assert record["budget"]["requested"] == 1000 and record["budget"]["planned"] == 768
    status = json.loads((run / "seeds" / "0" / "status.json").read_text())
    assert status["steps"] == 768
    assert "budget:" in cli("show", run.name).stdout


def test_an_exact_budget_is_recorded_and_not_announced(cli, home):
    proc = cli(
        "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "512",
        "--set", "epochs=1", "--set", "eval_episodes=1", "--no-progress", "--no-ask",
    )  # fmt: skip
    assert "budget:" not in proc.stderr + proc.stdout
    (run,) = [p for p in home.iterdir() if (p / "run.json").exists()]
    budget = json.loads((run / "run.json").read_text())["budget"]
    assert budget == {"requested": 512, "planned": 512, "why": None}


# --- custom env modules ----------------------------------------------------------------------

CORRIDOR = '''"""A corridor of 5 cells: step right (action 1) to reach the end."""
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        done = self.pos >= 4
        return np.array([self.pos / 4], np.float32), float(done), done, False, {}


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
'''


def backflip_here(*args, cwd: Path, home: Path, check: bool = True):
    """`backflip ARGS` as the console script runs it: the current directory is not on the
    Python path (`-P`; `python -m` would put it there) and PYTHONPATH is unset."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(BACKFLIP_HOME=str(home), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "backflip", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_custom_env_module_in_the_current_directory_trains_and_reruns(tmp_path):
    project, elsewhere, home = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "runs"
    project.mkdir()
    elsewhere.mkdir()
    (project / "myenvs.py").write_text(CORRIDOR)
    backflip_here(
        "train", "ppo", "--env", "myenvs:Corridor-v0", "--seeds", "1", "--steps", "256",
        "--set", "epochs=1", "--set", "eval_episodes=1", "--no-progress", "--no-ask",
        cwd=project, home=home,
    )  # fmt: skip
    (first,) = [p for p in home.iterdir() if (p / "run.json").exists()]
    record = json.loads((first / "run.json").read_text())
    assert record["status"] == "finished" and record["import_paths"] == [str(project.resolve())]
    # from another directory: found where the original run found it
    backflip_here("rerun", first.name, "--no-progress", cwd=elsewhere, home=home)
    rerun = [p for p in home.iterdir() if (p / "run.json").exists() and p != first]
    assert json.loads((rerun[0] / "run.json").read_text())["status"] == "finished"
    # gone from everywhere: one line that says where it looked and what to do
    (project / "myenvs.py").unlink()
    proc = backflip_here("rerun", first.name, cwd=elsewhere, home=home, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: cannot import 'myenvs' for env 'Corridor-v0'")
    assert "run from the folder that holds myenvs.py" in proc.stderr
    assert len([p for p in home.iterdir() if (p / "run.json").exists()]) == 2  # nothing created
