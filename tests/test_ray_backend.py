"""`--backend ray`: seeds as tasks on a real local Ray cluster, archived exactly like local seeds."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backflip.runs.archive import load_run
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """`ray start --head --block` in its own process group, with HOME and temp dirs disposable;
    stopped by its process group id afterwards (never `ray stop`, which would kill every Ray
    process on a shared machine)."""
    base = tmp_path_factory.mktemp("ray")
    # Ray's socket paths must stay short: a temp dir under /tmp, not pytest's deep one
    temp = Path(f"/tmp/bf-ray-{os.getpid()}")
    env = dict(os.environ, HOME=str(base), RAY_TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    env["OMP_NUM_THREADS"] = "1"
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        probe = subprocess.run(
            [str(ray_bin), "status", f"--address={address}"], env=env, capture_output=True
        )
        if probe.returncode == 0:
            break
        if proc.poll() is not None:
            raise AssertionError("ray start exited: " + proc.stdout.read())
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the Ray cluster did not come up in 120 s")
    yield address, env
    # `--block` shuts its Ray processes down on SIGTERM, but takes ~30 s of grace periods;
    # they are all in this process group, so after a short wait the group is killed
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    shutil.rmtree(temp, ignore_errors=True)


def _train(home, env, *extra):
    args = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "4", "--steps", "4096"]
    args += ["--set", "epochs=2", "--workers", "2", "--no-progress", *extra]
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *args],
        capture_output=True,
        text=True,
        env={**cli_env(home), "HOME": env["HOME"], "RAY_TMPDIR": env["RAY_TMPDIR"]},
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return home / proc.stdout.split()[1].rstrip(":")


def _files(run_dir: Path) -> set[str]:
    """Every file of a run, TensorBoard event files (named by host and time) as `tb/events`."""
    out = set()
    for p in run_dir.rglob("*"):
        if p.is_file():
            rel = p.relative_to(run_dir)
            out.add(str(rel.parent / "events") if rel.parent.name == "tb" else str(rel))
    return out


def _metrics(path):
    return {k: v for k, v in read_metrics(path).items() if not k.startswith(("time/", "sys/"))}


@pytest.mark.slow
def test_four_seeds_on_a_ray_cluster_are_archived_exactly_like_local_ones(ray_cluster, tmp_path):
    address, env = ray_cluster
    local = _train(tmp_path / "local", env)
    remote = _train(tmp_path / "ray", env, "--backend", "ray", "--address", address)
    a, b = load_run(local), load_run(remote)
    assert b["status"] == "finished" and b["backend"] == {"name": "ray", "address": address}
    assert a["backend"] == {"name": "local", "address": None}
    assert set(a) == set(b) and a["config"] == b["config"]
    assert _files(local) == _files(remote)
    assert a["results"]["per_seed"] == b["results"]["per_seed"]  # same seeds, same numbers
    for seed in range(4):
        sa, sb = a["seeds"][seed], b["seeds"][seed]
        assert set(sa) == set(sb) and sb["status"] == "finished" and sb["steps"] == 4096
        assert sa["pid"] != sb["pid"]
        ma = _metrics(local / "seeds" / str(seed) / "metrics.csv")
        mb = _metrics(remote / "seeds" / str(seed) / "metrics.csv")
        assert ma.keys() == mb.keys()
        for k in ma:
            assert (ma[k][1] == mb[k][1]).all(), k
        # the seed's own output went to its log files on the cluster too
        assert (remote / "seeds" / str(seed) / "stderr.log").exists()
    shown = json.loads(
        subprocess.run(
            [sys.executable, "-m", "backflip", "show", str(remote), "--json"],
            capture_output=True,
            text=True,
            env=cli_env(tmp_path),
            cwd=ROOT,
        ).stdout
    )
    assert shown["backend"]["name"] == "ray"


@pytest.mark.slow
def test_ctrl_c_stops_ray_seeds_at_a_checkpoint_and_resume_finishes_them(ray_cluster, tmp_path):
    address, env = ray_cluster
    home = tmp_path / "archive"
    run_env = {**cli_env(home), "HOME": env["HOME"], "RAY_TMPDIR": env["RAY_TMPDIR"]}
    # long enough that neither seed can finish before the signal arrives: at 40,960 steps (~1 s
    # a seed since PPO got faster on 2026-11-23) a seed sometimes finished first
    steps = 204_800
    args = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--steps", str(steps)]
    args += ["--set", "epochs=2", "--no-progress", "--backend", "ray", "--address", address]
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=run_env,
        cwd=ROOT,
    )
    run_dir = home / proc.stdout.readline().split()[1].rstrip(":")
    metrics = run_dir / "seeds" / "0" / "metrics.csv"
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics.exists() or metrics.stat().st_size < 20_000):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    record = load_run(run_dir)
    assert record["status"] == "interrupted"
    for s in record["seeds"]:
        assert s["status"] == "interrupted" and 0 < s["steps"] < steps
        assert (run_dir / "seeds" / str(s["seed"]) / "checkpoints" / "final.pt").exists()
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "backflip",
            "resume",
            str(run_dir),
            "--no-progress",
            "--backend",
            "ray",
            "--address",
            address,
        ],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=ROOT,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    record = load_run(run_dir)
    assert record["status"] == "finished" and all(s["steps"] == steps for s in record["seeds"])


def test_address_without_the_ray_backend_is_refused_in_one_line(cli):
    proc = cli("train", "ppo", "--env", "CartPole-v1", "--address", "1.2.3.4:6379", check=False)
    assert proc.returncode == 2 and "--address is for --backend ray" in proc.stderr
