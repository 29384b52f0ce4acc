"""`--backend slurm`: seeds as submitit tasks (here submitit's local executor, which runs the same
task code and checkpoint/requeue protocol as on a cluster), archived exactly like local seeds;
a preempted task requeues and its seed ends with the numbers of an uninterrupted one."""

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from backflip.config import resolve
from backflip.launch import launch_runs
from backflip.runs.archive import load_run, read_json
from backflip.telemetry import last_logged, read_episodes, read_metrics

STEPS = 40_960  # long enough that a seed is still training when its preemption (at 4,096) lands


def _metrics(path):
    return {k: v for k, v in read_metrics(path).items() if not k.startswith(("time/", "sys/"))}


def _files(run_dir: Path) -> set[str]:
    out = set()
    for p in run_dir.rglob("*"):
        if p.is_file():
            rel = p.relative_to(run_dir)
            out.add(str(rel.parent / "events") if rel.parent.name == "tb" else str(rel))
    return out


def _preempt(run_dir: Path, seed: int, sig: int, at_step: int, sent: dict) -> None:
    """Signal seed's submitit task (the parent of the seed's process) once the seed has logged
    `at_step`, as Slurm signals a task it preempts."""
    folder = run_dir / "seeds" / str(seed)
    deadline = time.time() + 120
    while time.time() < deadline:
        step, _ = last_logged(folder)
        if step >= at_step and (folder / "status.json").exists():
            status = read_json(folder / "status.json")
            if status.get("status") == "running" and status.get("pid"):
                task = psutil.Process(status["pid"]).ppid()
                os.kill(task, sig)
                sent[seed] = step
                return
        time.sleep(0.05)


@pytest.mark.slow  # ~1 min: each submitit task imports torch afresh, twice with the requeue
def test_preempted_slurm_tasks_requeue_and_end_exactly_like_an_uninterrupted_local_run(home):
    cfg = resolve("ppo", "CartPole-v1", [0, 1], STEPS, None, {"epochs": 2})
    local = launch_runs([cfg], home, ["test"], progress=False, workers=2)[0]
    sent: dict[int, int] = {}
    threads = []

    def preempt(run_dir):  # seed 0 gets submitit's signal, seed 1 a plain SIGTERM
        for seed, sig in ((0, signal.SIGUSR2), (1, signal.SIGTERM)):
            t = threading.Thread(target=_preempt, args=(run_dir, seed, sig, 4096, sent))
            t.start()
            threads.append(t)

    slurm = launch_runs(
        [cfg],
        home,
        ["test"],
        progress=False,
        workers=2,
        backend="slurm",
        address={"cluster": "local"},
        on_created=preempt,
    )[0]
    for t in threads:
        t.join()
    assert set(sent) == {0, 1}, "a seed finished before it could be preempted"
    a, b = load_run(local["dir"]), load_run(slurm["dir"])
    assert b["status"] == "finished" and b["backend"] == {
        "name": "slurm",
        "address": {"cluster": "local"},
    }
    assert set(a) == set(b) and a["config"] == b["config"]
    assert a["results"]["per_seed"] == b["results"]["per_seed"]  # the same final numbers
    assert _files(Path(local["dir"])) == _files(Path(slurm["dir"]))
    for seed in (0, 1):
        sa, sb = a["seeds"][seed], b["seeds"][seed]
        assert sb["status"] == "finished" and sb["steps"] == sa["steps"]
        # it really stopped mid-run and continued from its checkpoint in a requeued task
        assert 0 < sb["resumed_from_step"] < STEPS and sb["resumed_from_step"] >= sent[seed]
        assert set(sa) | {"resumed_from_step"} == set(sb)
        assert sa["final_eval_returns"] == sb["final_eval_returns"]
        folder_a = Path(local["dir"]) / "seeds" / str(seed)
        folder_b = Path(slurm["dir"]) / "seeds" / str(seed)
        ma, mb = _metrics(folder_a / "metrics.csv"), _metrics(folder_b / "metrics.csv")
        assert ma.keys() == mb.keys()
        for k in ma:
            assert (ma[k][0] == mb[k][0]).all() and (ma[k][1] == mb[k][1]).all(), k
        ea, eb = read_episodes(folder_a / "episodes.csv"), read_episodes(folder_b / "episodes.csv")
        assert all((x == y).all() for x, y in zip(ea, eb, strict=True))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "slurm", "--slurm", "cluster=bogus"], "--slurm cluster=bogus: choose one"),
        (["--backend", "slurm", "--slurm", "partition"], "--slurm expects KEY=VALUE"),
        (["--slurm", "partition=dev"], "--slurm is for --backend slurm"),
        (["--backend", "slurm", "--slurm", "cluster=local", "--slurm", "x=1"], "Unknown argument"),
        (["--backend", "slurm"], "no Slurm here (sbatch not found)"),
    ],
)
def test_bad_slurm_options_are_refused_in_one_line_before_a_run_exists(cli, home, args, message):
    if message.startswith("no Slurm") and __import__("shutil").which("sbatch"):
        pytest.skip("this machine has Slurm")
    proc = cli("train", "ppo", "--env", "CartPole-v1", "--no-ask", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert not [p for p in home.iterdir() if p.name[:1].isdigit()]  # no run was created
