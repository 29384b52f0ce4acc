"""The README's two commands are the contract with new users; CI must run the same test command."""

import re

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
