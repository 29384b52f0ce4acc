"""The warm seed server (backflip/launch/warm.py): later runs fork their seeds from a process that
has imported torch, and never run code or settings other than their command's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backflip.launch import warm

ROOT = Path(__file__).resolve().parent.parent
STARTED = "started a warm seed server"

ENV_MODULE = '''
import os
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class Seen(CartPoleEnv):
    """CartPole that writes what its process sees when it is made: a variable and the folder."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with open(os.environ["BF_SEEN_FILE"], "a") as f:
            f.write(os.environ.get("BF_SEEN_VALUE", "-") + " " + os.getcwd() + "\\n")


gym.register("Seen-v0", entry_point=Seen, max_episode_steps=200)
'''


def train(cwd: Path, env: dict, home: Path, *more: str, steps: int = 512) -> subprocess.Popen:
    args = ["train", "ppo", "--seeds", "1", "--steps", str(steps), "--no-ask", "--no-progress"]
    return subprocess.Popen(
        [sys.executable, "-m", "backflip", *args, "--json", "--home", str(home), *more],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out), err


def servers_in(folder: Path) -> list[dict]:
    env = {"BACKFLIP_WARM_DIR": str(folder)}
    code = "import json; from backflip.launch import warm; print(json.dumps(warm.servers()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.fixture
def world(tmp_path):
    """A folder with an env module, its own socket folder and archive; stops its servers after."""
    (tmp_path / "seenenv.py").write_text(ENV_MODULE)
    env = {
        **os.environ,
        "BACKFLIP_WARM_DIR": str(tmp_path / "sockets"),
        "BF_SEEN_FILE": str(tmp_path / "seen.txt"),
        "PYTHONPATH": str(ROOT),
    }
    yield tmp_path, env
    for server in servers_in(tmp_path / "sockets"):
        warm.stop(server["address"])
    # a folder this long has a short alias in the temp folder (warm.folder): remove it too
    saved = os.environ.get("BACKFLIP_WARM_DIR")
    os.environ["BACKFLIP_WARM_DIR"] = env["BACKFLIP_WARM_DIR"]
    try:
        shutil.rmtree(warm.folder(), ignore_errors=True)
    finally:
        os.environ["BACKFLIP_WARM_DIR"] = saved if saved is not None else ""
        if saved is None:
            del os.environ["BACKFLIP_WARM_DIR"]


def test_a_second_run_forks_from_the_same_server_in_its_commands_world(world):
    tmp, env = world
    other = tmp / "elsewhere"
    other.mkdir()
    shutil.copy(tmp / "seenenv.py", other / "seenenv.py")
    first, err = finish(
        train(tmp, {**env, "BF_SEEN_VALUE": "one"}, tmp / "runs", "--env", "seenenv:Seen-v0")
    )
    assert STARTED in err and first["status"] == "finished"
    (server,) = servers_in(tmp / "sockets")
    second, err = finish(
        train(other, {**env, "BF_SEEN_VALUE": "two"}, tmp / "runs", "--env", "seenenv:Seen-v0")
    )
    assert STARTED not in err and second["status"] == "finished"
    assert [s["pid"] for s in servers_in(tmp / "sockets")] == [server["pid"]]
    seen = {
        line.split()[0]: line.split()[1]
        for line in (tmp / "seen.txt").read_text().split("\n")
        if line
    }
    # each seed saw its own command's variable and folder, not the server's (started by the first)
    assert seen == {"one": str(tmp), "two": str(other)}
    listed = subprocess.run(
        [sys.executable, "-m", "backflip", "server", "--stop"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert f"pid {server['pid']}  0 seeds running" in listed.stdout, listed
    deadline = time.monotonic() + 20
    while servers_in(tmp / "sockets") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers_in(tmp / "sockets") == []


def test_an_edited_module_is_never_served_stale(world):
    """The server imported backflip's PPO; once the file changes, a run gets the new code."""
    tmp, env = world
    shutil.copytree(
        ROOT / "backflip", tmp / "pkg" / "backflip", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**env, "PYTHONPATH": str(tmp / "pkg")}
    _, err = finish(train(tmp, env, tmp / "runs", "--env", "CartPole-v1"))
    assert STARTED in err
    ppo = tmp / "pkg" / "backflip" / "algos" / "ppo.py"
    ppo.write_text(
        ppo.read_text() + '\nimport sys\n\nprint("EDITED PPO", file=sys.stderr, flush=True)\n'
    )
    second, err = finish(train(tmp, env, tmp / "runs", "--env", "CartPole-v1"))
    assert STARTED in err and second["status"] == "finished"  # the old server refused
    (server,) = servers_in(tmp / "sockets")  # the stale one left; the new one imported the edit
    assert "EDITED PPO" in Path(server["address"]).with_suffix(".log").read_text()


def test_off_means_no_server_outlives_the_command(world):
    tmp, env = world
    record, err = finish(
        train(tmp, {**env, "BACKFLIP_WARM": "0"}, tmp / "runs", "--env", "CartPole-v1")
    )
    assert record["status"] == "finished" and STARTED not in err
    deadline = time.monotonic() + 20
    while servers_in(tmp / "sockets") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers_in(tmp / "sockets") == []


def test_a_run_outlives_its_server(world):
    """Kill the server while a seed trains: the seed goes on, the command sees it end."""
    tmp, env = world
    proc = train(tmp, env, tmp / "runs", "--env", "CartPole-v1", steps=60_000)
    deadline = time.monotonic() + 120
    while not list((tmp / "runs").glob("*/seeds/0/metrics.csv")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (server,) = servers_in(tmp / "sockets")
    os.kill(server["pid"], signal.SIGKILL)
    record, _ = finish(proc)
    assert record["status"] == "finished"
    assert record["seeds"][0]["steps"] == record["budget"]["planned"]


def test_a_bad_idle_time_is_one_error_line(world):
    tmp, env = world
    proc = train(
        tmp, {**env, "BACKFLIP_WARM_IDLE": "ten minutes"}, tmp / "runs", "--env", "CartPole-v1"
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert err.strip() == "error: BACKFLIP_WARM_IDLE must be a number of seconds, got 'ten minutes'"
    assert not (tmp / "runs").exists() or not list((tmp / "runs").glob("*/run.json"))


def test_a_server_that_ended_before_it_was_ready_is_started_again(tmp_path, monkeypatch):
    """A launch in this process whose server died while importing must not hand that dead
    server to the next launch ("the warm seed server ended at start"): a new one starts."""
    monkeypatch.setenv("BACKFLIP_WARM_DIR", str(tmp_path / "sockets"))
    monkeypatch.setattr(warm, "_current", None)
    first = warm.ensure()  # started, not waited on
    assert first.proc is not None and not first.ready
    first.proc.kill()
    first.proc.wait()
    second = warm.ensure()
    try:
        assert second is not first
        second.wait_ready()
    finally:
        warm.stop(second.address)
        shutil.rmtree(warm.folder(), ignore_errors=True)


def test_a_poll_inside_a_poll_leaves_the_read_to_the_outer_one(monkeypatch):
    """Ctrl-C's handler asks `is_alive` of every seed; when it lands while the launcher's own
    poll reads or closes a seed's socket, the inner poll must not touch the socket (the CI saw
    it select on a socket being closed: a traceback instead of `interrupted`)."""
    import socket

    ours, server = socket.socketpair()
    proc = warm.WarmProcess.__new__(warm.WarmProcess)
    proc.exitcode, proc.pid, proc._sock, proc._gone = None, os.getpid(), ours, False
    proc._polling = False
    warm._send(server, {"exitcode": 0})
    real, inner = warm._recv, []

    def read_interrupted(sock):
        inner.append(proc.is_alive())  # the handler, between two bytecodes of the read
        return real(sock)

    monkeypatch.setattr(warm, "_recv", read_interrupted)
    assert not proc.is_alive() and proc.exitcode == 0
    assert inner == [True]  # the inner poll said "still running" and read nothing
    assert ours.fileno() == -1 and proc._sock is None
    server.close()
