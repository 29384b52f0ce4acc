"""The README's two commands are the contract with new users; CI must run the same test command."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from backflip.runs.provenance import git_state
from tests.conftest import ROOT


def _commands():
    text = (ROOT / "README.md").read_text()
    first_section = text.split("\n## ")[1]
    return re.findall(r"```bash\n(.+?)\n```", first_section)


def test_readme_opens_with_exactly_two_commands():
    commands = _commands()
    assert len(commands) == 2
    assert "pip install -e " in commands[0] and "backflip train" in commands[0]
    assert "backflip report" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _commands()[1] in ci.splitlines()


def test_the_first_command_leaves_a_git_working_tree_clean(tmp_path):
    """The README's backflip commands (the training cut to a few hundred steps), run in a git
    repository with no .gitignore of its own, leave `git status` empty, and the code a next run
    records is clean: no report or archive files in its patch."""
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "train_me.py").write_text("print('my experiment')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "start"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "BACKFLIP_HOME"}
    env["OMP_NUM_THREADS"] = "1"
    steps = [c.strip() for c in _commands()[0].split("&&") if c.strip().startswith("backflip ")]
    assert [shlex.split(c)[1] for c in steps] == ["train", "report"]
    for command in steps:
        args = shlex.split(command)[1:]
        if args[0] == "train":
            args += ["--steps", "256", "--seeds", "1", "--set", "epochs=1"]
            args += ["--set", "eval_episodes=1", "--no-progress", "--no-ask"]
        proc = subprocess.run(
            [sys.executable, "-m", "backflip", *args],
            cwd=repo, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    report = Path(proc.stdout.strip().splitlines()[-1])
    assert (repo / report).is_file() and report.name == "index.html", proc.stdout
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "", status.stdout
    state = git_state(repo)
    assert state["dirty"] is False and state["patch"] == "" and state["untracked"] == []
