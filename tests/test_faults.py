"""Fault injection on the archive (issue 26 parts 1, 2 and 5), with real processes and files.

The run directories are the record. After each fault — kill -9 of the launcher at startup,
mid-training (alone, or with its seeds) and after it finalized; an index that is garbage,
missing or stale; a truncated run.json; a deleted seed folder — every run is listed with the
status its seeds justify, no command prints a traceback, and where there is something to
continue, `backflip resume` ends with the same final numbers as an uninterrupted run.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backflip.runs.archive import load_run, run_status
from tests.conftest import ROOT, cli_env

STEPS = 8192
TRAIN = ["train", "ppo", "--env", "CartPole-v1", "--steps", str(STEPS), "--seeds", "2",
         "--workers", "2", "--set", "checkpoint_every=2048", "--no-progress"]  # fmt: skip


def bf(home: Path, *args, code: int | None = 0, timeout: float = 300):
    """`backflip ARGS` against `home`; never a traceback, and exit `code` (None: any)."""
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *map(str, args)],
        capture_output=True, text=True, env=cli_env(home), cwd=ROOT, timeout=timeout,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    if code is not None:
        assert proc.returncode == code, f"{args} exited {proc.returncode}\n{proc.stderr}"
    return proc


def start(home: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", *TRAIN],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    return proc, proc.stdout.readline().split()[1].rstrip(":")


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL to the launcher alone; reaped, not waited for its pipes (its orphans hold them)."""
    proc.kill()
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def wait_until(condition, timeout: float = 120, what: str = "") -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def raw_status(run_dir: Path, seed: int) -> dict:
    path = run_dir / "seeds" / str(seed) / "status.json"
    return json.loads(path.read_text()) if path.exists() else {"status": "pending"}


def training(run_dir: Path) -> bool:
    """Both seed processes have started training."""
    return all(raw_status(run_dir, s)["status"] == "running" for s in (0, 1))


def logged_step(run_dir: Path, seed: int) -> int:
    from backflip.telemetry import read_metrics

    metrics = read_metrics(run_dir / "seeds" / str(seed) / "metrics.csv")
    return max((int(steps.max()) for steps, _ in metrics.values() if len(steps)), default=0)


def listed(home: Path) -> dict[str, dict]:
    """`backflip runs --json` by id; the stderr it printed is under key None."""
    proc = bf(home, "runs", "--json")
    return {**{r["id"]: r for r in json.loads(proc.stdout)}, None: proc.stderr}


def assert_justified(home: Path, run_id: str) -> dict:
    """The run is listed with the status its seeds' own status.json files justify."""
    row = listed(home)[run_id]
    statuses = []
    for seed in (0, 1):
        path = home / run_id / "seeds" / str(seed) / "status.json"
        statuses.append(json.loads(path.read_text())["status"] if path.exists() else "missing")
    assert row["status"] == run_status(statuses), (row["status"], statuses)
    return row


def numbers(run_dir: Path) -> dict:
    """What an uninterrupted run must end with: per seed, its final evaluation and steps."""
    record = load_run(run_dir)
    return {
        "per_seed": record["results"]["per_seed"],
        "seeds": {s["seed"]: (s["final_eval_returns"], s["steps"]) for s in record["seeds"]},
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, str]:
    """An uninterrupted run: (its archive, its id)."""
    home = tmp_path_factory.mktemp("reference")
    proc = bf(home, *TRAIN)
    return home, proc.stdout.split()[1].rstrip(":")


def copy_of(reference, tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "archive"
    shutil.copytree(reference[0], home)
    return home, reference[1]


# --- the index -------------------------------------------------------------------------------


def test_a_garbage_index_is_rebuilt_by_whatever_reads_it_and_said_once(reference, tmp_path):
    from backflip.ui.app import create_app

    home, run_id = copy_of(reference, tmp_path)
    index = home / "index.sqlite"
    for args in (["runs"], ["runs", "--reindex"], ["show", run_id]):
        index.write_bytes(os.urandom(8192))
        proc = bf(home, *args)
        assert run_id in proc.stdout
        if args != ["runs", "--reindex"]:  # the repair asked for is no news
            notes = [line for line in proc.stderr.splitlines() if "index.sqlite" in line]
            assert notes == [
                "note: index.sqlite was unreadable (file is not a database): "
                "rebuilt it from 1 run directory"
            ], proc.stderr
    client = create_app(home).test_client()
    for path in (f"/runs/{run_id}", "/compare", "/", "/api/runs"):  # the UI's routes
        index.write_bytes(b"\x00garbage" * 1000)
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        assert run_id in response.get_data(as_text=True) or path == "/compare"
    with sqlite3.connect(index) as con:  # a real database again
        assert con.execute("SELECT id FROM runs").fetchall() == [(run_id,)]


def test_a_missing_index_is_rebuilt_and_the_next_train_keeps_every_run(reference, tmp_path):
    home, run_id = copy_of(reference, tmp_path)
    (home / "index.sqlite").unlink()
    proc = bf(home, "runs")
    assert run_id in proc.stdout and "finished" in proc.stdout
    assert "index.sqlite was missing: rebuilt it from 1 run directory" in proc.stderr
    (home / "index.sqlite").unlink()
    new = bf(home, "train", "ppo", "--env", "CartPole-v1", "--steps", "512", "--seeds", "1",
             "--no-progress").stdout.split()[1].rstrip(":")  # fmt: skip
    with sqlite3.connect(home / "index.sqlite") as con:
        assert sorted(r[0] for r in con.execute("SELECT id FROM runs")) == sorted([run_id, new])


def test_a_stale_index_is_refreshed_from_the_run_directories(reference, tmp_path):
    from backflip.runs.archive import read_record, write_record

    home, run_id = copy_of(reference, tmp_path)
    old = tmp_path / "old-index.sqlite"
    shutil.copy(home / "index.sqlite", old)  # a cache that misses what came after it
    other = "20990101-000000-abcd"  # archived while its index write was lost
    shutil.copytree(home / run_id, home / other)
    write_record(home / other, {**read_record(home / other), "id": other, "message": "second"})
    time.sleep(0.01)
    write_record(home / run_id, {**read_record(home / run_id), "message": "edited by hand"})
    shutil.copy(old, home / "index.sqlite")
    runs = listed(home)
    assert runs[run_id]["message"] == "edited by hand" and runs[other]["message"] == "second"
    assert runs[other]["status"] == runs[run_id]["status"] == "finished"
    assert runs[None].count("index.sqlite was stale (1 run(s) missing from it)") == 1, runs[None]
    shutil.rmtree(home / other)  # a run deleted by hand leaves the listing too
    assert set(listed(home)) == {run_id, None}


# --- run.json and seed folders ----------------------------------------------------------------


def test_a_truncated_run_json_is_restored_from_its_backup_or_the_index(reference, tmp_path):
    home, run_id = copy_of(reference, tmp_path)
    path = home / run_id / "run.json"
    whole = path.read_bytes().rstrip()  # (run.json keeps spare spaces for a full disk)
    path.write_bytes(whole[: len(whole) // 2])
    runs = listed(home)
    assert runs[run_id]["final_mean"] == reference_row(reference)["final_mean"]
    assert "run.json is truncated or not JSON" in runs[None]
    assert "restored it from run.json.bak" in runs[None]
    assert json.loads(path.read_text())["id"] == run_id
    # the backup broken too: the index row is the last good copy
    for p in (path, path.with_name("run.json.bak")):
        p.write_bytes(whole[:100])
    proc = bf(home, "show", run_id)
    assert "restored it from the index" in proc.stderr and "finished" in proc.stdout


def test_a_run_json_with_no_good_copy_is_listed_as_damaged_by_name(reference, tmp_path):
    home, run_id = copy_of(reference, tmp_path)
    for name in ("run.json", "run.json.bak"):
        (home / run_id / name).write_text('{"id": "' + run_id)
    (home / "index.sqlite").unlink()
    proc = bf(home, "runs")
    assert f"damaged: {run_id}: run {run_id} is damaged: run.json is truncated" in proc.stderr
    proc = bf(home, "runs", "--reindex")
    assert "indexed 0 runs" in proc.stdout
    assert f"not indexed: {run_id}: run {run_id} is damaged: run.json is truncated" in proc.stdout
    proc = bf(home, "show", run_id, code=2)
    assert proc.stderr.startswith(f"error: run {run_id} is damaged: run.json is truncated")
    assert len(proc.stderr.splitlines()) == 1


def test_a_deleted_seed_folder_stops_counting_and_resume_redoes_it(reference, tmp_path):
    home, run_id = copy_of(reference, tmp_path)
    shutil.rmtree(home / run_id / "seeds" / "1")
    row = assert_justified(home, run_id)
    seed0 = numbers(reference[0] / run_id)["per_seed"]["0"]
    assert row["status"] == "failed" and row["final_mean"] == row["final_max"] == seed0
    show = bf(home, "show", run_id).stdout
    assert "per seed: 0:" in show and "seed 1 missing: its folder seeds/1 is gone" in show
    resumed = bf(home, "resume", run_id)
    assert "seed 1 from scratch" in resumed.stdout
    assert numbers(home / run_id) == numbers(reference[0] / run_id)
    assert assert_justified(home, run_id)["status"] == "finished"


def reference_row(reference) -> dict:
    return listed(reference[0])[reference[1]]


# --- kill -9 of the launcher -------------------------------------------------------------------


def test_kill9_of_the_launcher_mid_training_orphans_finish_and_finalize_the_run(
    reference, tmp_path
):
    home = tmp_path / "archive"
    proc, run_id = start(home)
    run_dir = home / run_id
    wait_until(lambda: training(run_dir), what="both seeds training")
    kill9(proc)
    record = load_run(run_dir)  # the seeds train on: running, not failed
    assert record["status"] == "running" and record["orphans"] == [0, 1], record["seeds"]
    wait_until(
        lambda: all(raw_status(run_dir, s)["status"] != "running" for s in (0, 1)),
        what="the orphan seeds to finish",
    )
    row = assert_justified(home, run_id)
    assert row["status"] == "finished"
    assert numbers(run_dir) == numbers(reference[0] / reference[1])
    proc = bf(home, "resume", run_id, code=2)
    assert proc.stderr == f"error: run {run_id} has no unfinished seed: nothing to resume\n"


@pytest.mark.slow  # two launches, one a resume (~30-55 s on 2 busy cores)
def test_kill9_of_the_launcher_and_its_seeds_then_resume_ends_like_an_uninterrupted_run(
    reference, tmp_path
):
    home = tmp_path / "archive"
    proc, run_id = start(home)
    run_dir = home / run_id
    checkpoints = run_dir / "seeds" / "0" / "checkpoints"
    wait_until(lambda: training(run_dir), what="both seeds training")
    pids = [raw_status(run_dir, s)["pid"] for s in (0, 1)]
    wait_until(lambda: any(checkpoints.glob("step_*")), what="a first checkpoint")
    kill9(proc)  # as a power cut would: the launcher and its seeds at once
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30, "the seeds")
    row = assert_justified(home, run_id)
    assert row["status"] == "failed"
    record = load_run(run_dir)
    for seed in record["seeds"]:  # how far each seed got by its metrics, not 0
        assert seed["status"] == "failed", seed
        assert seed["steps"] == logged_step(run_dir, seed["seed"]), seed
    assert record["seeds"][0]["steps"] >= 2048 and record["seeds"][0]["wall_s"] > 0
    assert "died without recording an outcome" in bf(home, "show", run_id).stdout
    started = time.time()
    out = bf(home, "resume", run_id).stdout
    assert "seed 0 from step" in out and "seed-failed" not in out
    assert numbers(run_dir) == numbers(reference[0] / reference[1])
    assert assert_justified(home, run_id)["status"] == "finished"
    # what the run summarizes was refreshed: the doctor's findings, the durations
    findings = json.loads((run_dir / "findings.json").read_text())
    assert findings["findings"] and os.path.getmtime(run_dir / "findings.json") >= started
    assert not any(f["rule"] == "seed-failed" for f in findings["findings"])
    record = load_run(run_dir)
    assert record["duration_s"] > time.time() - started - 1
    for seed in record["seeds"]:
        assert seed["wall_s"] > 0 and "wall_s_before" not in seed


@pytest.mark.slow  # two launches, one a resume (~30-55 s on 2 busy cores)
def test_kill9_of_the_launcher_at_startup_leaves_a_run_that_resume_finishes(reference, tmp_path):
    home = tmp_path / "archive"
    proc, run_id = start(home)  # its id is printed as soon as the run exists
    kill9(proc)
    run_dir = home / run_id
    wait_until(lambda: load_run(run_dir)["status"] != "running", what="the run to settle")

    # a seed that had started goes on as an orphan (it finishes and finalizes the run, as
    # mid-training): resume is for what is left once no seed process is alive
    def seeds_alive() -> bool:
        pids = [raw_status(run_dir, s).get("pid") for s in (0, 1)]
        return any(p and Path(f"/proc/{p}").exists() for p in pids)

    # the warm seed server may still be starting a seed the launcher handed it before it died
    # (its pid is in status.json only once it runs): none alive for 10 s in a row
    quiet_since: list[float] = []

    def none_alive_for_10_s() -> bool:
        if seeds_alive():
            quiet_since.clear()
            return False
        quiet_since[:] = quiet_since or [time.time()]
        return time.time() - quiet_since[0] >= 10

    wait_until(none_alive_for_10_s, timeout=300, what="the orphaned seeds")
    row = assert_justified(home, run_id)
    if row["status"] != "finished":  # the seeds never started, or died with the launcher
        bf(home, "resume", run_id)
    assert numbers(run_dir) == numbers(reference[0] / reference[1])
    assert assert_justified(home, run_id)["status"] == "finished"


def test_kill9_of_the_launcher_after_it_finalized_keeps_the_finished_run(reference, tmp_path):
    home = tmp_path / "archive"
    proc, run_id = start(home)
    run_dir = home / run_id
    wait_until(
        lambda: json.loads((run_dir / "run.json").read_text())["status"] != "running",
        what="the run to be finalized",
    )
    kill9(proc)  # e.g. while the doctor reads the metrics
    row = assert_justified(home, run_id)
    assert row["status"] == "finished"
    assert numbers(run_dir) == numbers(reference[0] / reference[1])
    assert "finished" in bf(home, "show", run_id).stdout
