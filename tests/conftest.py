"""Shared fixtures: a fresh archive root per test and a helper that runs the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The suite's warm seed servers (backflip/launch/warm.py) live in a folder of their own, shared by
# xdist's workers (which inherit the variable), stopped when the run ends; they exit after 2 idle
# minutes in any case.
os.environ.setdefault("BACKFLIP_WARM_DIR", f"/tmp/backflip-warm-tests-{os.getuid()}-{os.getpid()}")
os.environ.setdefault("BACKFLIP_WARM_IDLE", "120")
# One thread per worker, as every seed process has: the suite runs a worker per core, and
# torch's and OpenBLAS's default of a thread per core had two workers' OpenMP threads spinning
# against each other (test_probes.py with test_user_env_spaces.py on two workers: 214 s -> 164 s,
# 202 -> 148 CPU seconds). Set before any test module imports torch; the workers inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# The files whose tests take longest (CI's `--durations`, summed per file), longest first. xdist
# hands out whole files (`--dist loadfile`, for the module-scoped fixtures) in collection order
# (`--no-loadscope-reorder` in pyproject.toml; xdist's default reorders by the number of tests in
# a file, which starts with the many quick ones). Started first, the long files share the two
# workers and the short ones fill in behind them, instead of one worker running a long file
# alone at the end. Unlisted files keep their order, after these.
HEAVIEST_FIRST = [
    "tests/test_learning_offpolicy.py",
    "tests/test_learning_ppo.py",
    "tests/ui/test_label_browser.py",
    "tests/test_prefs.py",
    "tests/test_doctor_runs.py",
    "tests/test_learning_onpolicy.py",
    "tests/test_prefs_config.py",
    "tests/test_prefs_learning.py",
    "tests/test_stop_anywhere.py",
    "tests/test_probes.py",
    "tests/test_resume.py",
    "tests/test_ray_backend.py",
    "tests/ui/test_label_atari.py",
]


def pytest_collection_modifyitems(config, items):
    if missing := [name for name in HEAVIEST_FIRST if not (ROOT / name).exists()]:
        raise pytest.UsageError(f"tests/conftest.py: HEAVIEST_FIRST names no such file: {missing}")
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    # a stable sort: within a rank (and among the unlisted files) the collection order stays
    items.sort(
        key=lambda item: rank.get(item.path.resolve().relative_to(ROOT).as_posix(), len(rank))
    )


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller stops them, after every worker is done
    from backflip.launch import warm

    running = warm.servers()
    for server in running:
        warm.stop(server["address"])
    if left := sum(server["seeds"] for server in running):  # a test's command SIGKILLed alone
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"warning: {left} seed(s) still running after the suite: a test stopped a command "
            "without its seeds (stop them with tests/conftest.py's stop_command)",
            yellow=True,
        )
    shutil.rmtree(warm.folder(), ignore_errors=True)  # their logs and locks


def strict_json(text: str):
    """`json.loads` that refuses NaN and Infinity, as a browser's `JSON.parse` does."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def stop_command(proc: subprocess.Popen, timeout: float = 60) -> tuple:
    """Stop a `backflip` command a test started as a person does, and return its output: SIGINT
    (the launcher forwards it to its seeds, which end at their next boundary, a wait for a
    person's labels included), SIGKILL only if it has not ended within `timeout`. A SIGKILL of
    the launcher alone leaves its seeds running by design (docs/architecture.md), and a seed
    waiting for labels would wait for ever."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def cli_env(home: Path) -> dict:
    env = dict(os.environ)
    env["BACKFLIP_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "archive"
    path.mkdir()
    return path


@pytest.fixture
def cli(home):
    """Run `backflip ARGS...` in a subprocess against the test's archive; returns the result."""

    def run(*args, check: bool = True, timeout: float = 600, **kwargs):
        proc = subprocess.run(
            [sys.executable, "-m", "backflip", *map(str, args)],
            capture_output=True,
            text=True,
            env=cli_env(home),
            timeout=timeout,
            cwd=kwargs.pop("cwd", ROOT),
            **kwargs,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"backflip {' '.join(map(str, args))} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    return run
