"""A full disk is an error, not a crash (issue 26 part 3).

A patched writer raises OSError(ENOSPC) at a chosen write (always runs); where this machine
lets the test mount a small tmpfs, a whole `backflip train` also runs out of real space. Either
way: every seed and the run end `failed` with "no space left on device", no temporary file is
left, every CSV row is whole, and `runs` and `show` keep working.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from backflip.runs.archive import NO_SPACE, STATUS_RESERVE, save_torch, write_json
from backflip.telemetry import Telemetry, read_episodes, read_metrics


def enospc(path=None):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


class FullAfter:
    """`os.write` that fails with ENOSPC from the `n`-th call on, writing half its data first
    (a real full disk takes what fits), once `armed`."""

    def __init__(self, n: int):
        self.n, self.calls, self.armed, self.real = n, 0, True, os.write

    def __call__(self, fd, data):
        self.calls += 1
        if self.armed and self.calls >= self.n:
            if self.calls == self.n and len(data) > 1:
                return self.real(fd, bytes(data[: len(data) // 2]))
            raise enospc()
        return self.real(fd, data)


def whole_rows(path: Path, fields: int) -> list[list[str]]:
    raw = path.read_bytes()
    assert raw.endswith(b"\r\n"), raw[-80:]
    rows = [line.split(",") for line in raw.decode().split("\r\n")[:-1]]
    assert all(len(r) == fields for r in rows), [r for r in rows if len(r) != fields]
    return rows


def test_a_failed_row_write_leaves_whole_rows_only(tmp_path, monkeypatch):
    tel = Telemetry(tmp_path)
    for step in (100, 200):
        tel.log(loss=step / 7)
        tel.episode(step, 1.5, 10)
        tel.dump(step)
    before = read_metrics(tmp_path / "metrics.csv")
    full = FullAfter(1)
    monkeypatch.setattr(os, "write", full)
    tel.log(loss=1 / 3)
    tel.episode(300, 2.5, 12)
    with pytest.raises(OSError) as e:
        tel.dump(300)
    assert e.value.errno == errno.ENOSPC
    assert full.calls >= 2  # half a row went out before the error: it was cut back
    with pytest.raises(OSError):  # closing on a full disk raises, but closes every file
        tel.close()
    monkeypatch.undo()
    rows = whole_rows(tmp_path / "metrics.csv", 4)
    assert rows[0] == ["step", "wall", "name", "value"]
    after = read_metrics(tmp_path / "metrics.csv")
    assert after.keys() == before.keys()
    assert all((after[k][1] == before[k][1]).all() for k in before)
    whole_rows(tmp_path / "episodes.csv", 3)
    assert list(read_episodes(tmp_path / "episodes.csv")[0]) == [100, 200]
    tel2 = Telemetry(tmp_path, append=True)  # and the file goes on after the cut (resume)
    tel2.log(loss=0.5)
    tel2.dump(400)
    tel2.close()
    assert read_metrics(tmp_path / "metrics.csv")["loss"][0].tolist() == [100, 200, 400]


def test_a_status_file_is_rewritten_in_place_when_the_disk_is_full(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    write_json(path, {"status": "running"}, reserve=STATUS_RESERVE)
    assert path.stat().st_size == STATUS_RESERVE

    def full(self, data):
        raise enospc(str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    write_json(path, {"status": "failed", "error": NO_SPACE})
    assert json.loads(path.read_text()) == {"status": "failed", "error": NO_SPACE}
    with pytest.raises(OSError):  # does not fit in the bytes it has: raised, nothing torn
        write_json(path, {"error": "x" * STATUS_RESERVE})
    assert json.loads(path.read_text())["status"] == "failed"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temp file left


def test_a_seed_that_runs_out_of_space_fails_with_the_message_recorded(tmp_path, monkeypatch):
    """A real PPO seed in this process; its 5th metrics write finds the disk full, and from
    then on no new file can be written either."""
    import torch

    from backflip.config import resolve
    from backflip.launch.job import SeedJob
    from backflip.launch.seed import run_seed
    from backflip.runs.archive import load_run
    from backflip.runs.records import create_run, finalize_run

    home = tmp_path / "archive"
    home.mkdir()
    cfg = resolve("ppo", "CartPole-v1", [0, 1], 20_000)
    run_dir, _ = create_run(home, cfg.to_dict(), ["test"])
    full = FullAfter(10**9)
    real_write_bytes = Path.write_bytes

    def write_bytes(self, data):
        if full.calls >= full.n:
            raise enospc(str(self))
        return real_write_bytes(self, data)

    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    threads = torch.get_num_threads()
    try:
        statuses = []
        for seed in cfg.seeds:
            full.calls, full.n = 0, 5 + 3 * seed  # a different write for each seed
            statuses.append(
                run_seed(SeedJob(str(run_dir), seed, cfg.to_dict()), handle_signals=False)
            )
        record = finalize_run(home, run_dir, 0.0)
    finally:
        torch.set_num_threads(threads)
        monkeypatch.undo()
    for st in statuses:
        assert st["status"] == "failed" and st["error"].startswith(NO_SPACE), st
    assert record["status"] == "failed" and record["error"] == NO_SPACE
    again = load_run(run_dir)
    assert [s["error"] for s in again["seeds"]] == [s["error"] for s in statuses]
    for seed in cfg.seeds:
        folder = run_dir / "seeds" / str(seed)
        whole_rows(folder / "metrics.csv", 4)
        whole_rows(folder / "episodes.csv", 3)
    assert not list(run_dir.rglob("*.tmp"))


def test_runs_reads_the_run_folders_when_the_index_cannot_be_opened(home, monkeypatch, capsys):
    import sqlite3

    from backflip.config import resolve
    from backflip.runs import index
    from backflip.runs.records import create_run

    config = resolve("ppo", "CartPole-v1", [0], None).to_dict()
    run_dir, _ = create_run(home, config, ["train"], tags=["t"])
    create_run(home, config, ["train"], tags=["other"])

    def broken(home):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(index, "connect", broken)
    assert [r["id"] for r in index.query(home, tag="t")] == [run_dir.name]
    assert index.damaged(home) == []
    # the whole command, in this process (the index's connect is what a full disk breaks)
    from backflip.cli import main

    assert main(["runs", "--home", str(home)]) == 0
    assert run_dir.name in capsys.readouterr().out


def test_runs_reads_the_run_folders_when_the_stale_index_cannot_be_refreshed(home, monkeypatch):
    """A run folder changed since it was indexed, and the refresh cannot be written (a full
    disk): `runs` lists what the folders say, not the stale rows, and says why."""
    import sqlite3

    from backflip.config import resolve
    from backflip.runs import index
    from backflip.runs.archive import read_record, write_record
    from backflip.runs.records import create_run

    config = resolve("ppo", "CartPole-v1", [0], None).to_dict()
    run_dir, _ = create_run(home, config, ["train"], tags=["t"])
    record = read_record(run_dir)
    write_record(run_dir, {**record, "message": "renamed while the index was not looking"})
    notices = []
    monkeypatch.setattr(index, "notice", notices.append)

    def full(con, work):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(index, "_transaction", full)
    assert not index.ensure(home)
    (row,) = index.query(home, tag="t")
    assert row["message"] == "renamed while the index was not looking"
    assert any("could not be refreshed (database or disk is full)" in n for n in notices)


def _mount_tmpfs(path: Path, size: str) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


def test_a_checkpoint_that_does_not_fit_raises_enospc_and_leaves_nothing(tmp_path):
    """torch's zip writer reports a full disk as "unexpected pos 64 vs 0" (a RuntimeError);
    `save_torch` surfaces the OSError itself, whatever the free space is by the time anyone
    looks (two seeds on one disk: the other's failure frees its bytes)."""
    import torch

    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "1m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        save_torch({"w": torch.zeros(1000)}, mnt / "small.pt")  # fits
        with pytest.raises(OSError) as raised:
            save_torch({"w": torch.zeros(1_000_000)}, mnt / "big.pt")  # 4 MB into 1 MB
        assert raised.value.errno == errno.ENOSPC
        assert sorted(p.name for p in mnt.iterdir()) == ["small.pt"]
        assert torch.load(mnt / "small.pt")["w"].shape == (1000,)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_runs_lists_the_folders_when_a_missing_index_cannot_be_rebuilt(tmp_path, capsys):
    """index.sqlite deleted, then the disk filled: `runs` cannot rebuild it and reads the run
    folders instead (a read-only command works on a full disk)."""
    from backflip.cli import main
    from backflip.config import resolve
    from backflip.runs.records import create_run

    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "2m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        home = mnt / "archive"
        config = resolve("ppo", "CartPole-v1", [0], None).to_dict()
        run_dir, _ = create_run(home, config, ["train"], message="kept on a full disk")
        for f in home.glob("index.sqlite*"):
            f.unlink()
        (mnt / "ballast").write_bytes(b"\0" * shutil.disk_usage(mnt).free)
        assert main(["runs", "--home", str(home)]) == 0
        out, err = capsys.readouterr()
        assert run_dir.name in out and "kept on a full disk" in out, out + err
        assert "could not be rebuilt" in err and "reading the run folders" in err, err
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.slow
def test_train_on_a_full_tmpfs(cli, tmp_path):
    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "3m"):
        pytest.skip("cannot mount a tmpfs here (the patched-writer tests above still run)")
    try:
        home = mnt / "archive"
        # fill the disk up to ~300 KB: enough to start, not to finish two seeds
        cli("runs", "--home", home)
        home.mkdir(exist_ok=True)
        free = shutil.disk_usage(mnt).free
        (mnt / "ballast").write_bytes(b"\0" * max(0, free - 300_000))
        proc = cli(
            "train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--steps", "60000",
            "--home", home, "--no-ask", "--no-progress", check=False,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        for seed in (0, 1):
            assert f"seed {seed} failed: {NO_SPACE}" in proc.stdout, proc.stdout
        (run,) = [p for p in home.iterdir() if p.is_dir()]
        assert json.loads((run / "run.json").read_text())["error"] == NO_SPACE
        assert not [p for p in mnt.rglob("*") if p.name.endswith(".tmp")]
        for csv in run.glob("seeds/*/*.csv"):
            whole_rows(csv, 4 if csv.name == "metrics.csv" else 3)
        # read-only commands work on the full disk
        listed = cli("runs", "--home", home)
        assert run.name in listed.stdout and "failed" in listed.stdout
        shown = cli("show", run.name, "--home", home)
        assert NO_SPACE in shown.stdout
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("left", [20_000, 90_000])
def test_a_run_that_cannot_even_be_created_on_a_full_disk_says_so(cli, tmp_path, left):
    """20 or 90 KB left: the run's folder, run.json or the index cannot be written (at 90 KB,
    SQLite's "database or disk is full" while building the index). One line on stderr naming
    the full disk, exit 1, no half-made run."""
    mnt = tmp_path / "small"
    if not _mount_tmpfs(mnt, "2m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        home = mnt / "archive"
        home.mkdir()
        free = shutil.disk_usage(mnt).free
        (mnt / "ballast").write_bytes(b"\0" * max(0, free - left))
        proc = cli(
            "train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--steps", "2000",
            "--home", home, "--no-ask", "--no-progress", check=False,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert "Traceback" not in out and NO_SPACE in out, out
        for run in (p for p in home.iterdir() if p.is_dir()):
            assert json.loads((run / "run.json").read_text())["status"] == "failed"
        assert not [p for p in mnt.rglob("*") if p.name.endswith(".tmp")]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
