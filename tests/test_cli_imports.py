"""Fast answers (issue 23 part 6): commands that only read the archive, and the launcher of a
training run, never import the heavy libraries (torch alone takes 1.5-4 s on this project's CPUs).
Each command runs in a fresh interpreter that reports which of them ended up in `sys.modules`;
how long the commands take is measured by benchmarks/cli_latency.py, not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backflip.config import resolve
from backflip.runs.records import create_run
from tests.conftest import ROOT

HEAVY = ("torch", "scipy", "matplotlib", "flask", "tensorboard", "ray", "gymnasium", "pandas")

PROBE = f"""
import json, sys
from backflip.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
heavy = {HEAVY!r}
print("LOADED " + json.dumps([m for m in heavy if m in sys.modules]))
"""


def loaded_by(args: list[str], home: Path) -> list[str]:
    env = dict(os.environ, BACKFLIP_HOME=str(home), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True, text=True, env=env, cwd=home.parent, timeout=600,
    )  # fmt: skip
    line = [x for x in proc.stdout.splitlines() if x.startswith("LOADED ")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1].removeprefix("LOADED "))


@pytest.fixture
def archive(tmp_path) -> tuple[Path, str]:
    """An archive with one run record (real files, no training)."""
    home = tmp_path / "runs"
    config = resolve("ppo", "CartPole-v1", [0, 1], 1000).to_dict()
    run_dir, _ = create_run(home, config, ["backflip", "train"], "a question")
    return home, run_dir.name


@pytest.mark.parametrize(
    "args",
    [["--help"], ["runs"], ["show", "last"], ["train", "ppo", "--env", "CartPole-v1", "--help"]],
)
def test_reading_commands_import_no_heavy_library(archive, args):
    home, _ = archive
    assert loaded_by(args, home) == []


def test_the_launcher_of_a_training_run_never_imports_torch(archive):
    """The seeds import torch in their own processes; the launcher checks, records and waits."""
    home, _ = archive
    args = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "256"]
    args += ["--set", "epochs=1", "--set", "eval_episodes=1", "--no-progress", "--no-ask"]
    loaded = loaded_by(args, home)
    assert "torch" not in loaded and "tensorboard" not in loaded, loaded
    runs = [p for p in home.iterdir() if (p / "run.json").exists()]
    finished = [json.loads((p / "run.json").read_text())["status"] for p in runs]
    assert sorted(finished) == ["finished", "running"]  # it trained (the other is the fixture's)
