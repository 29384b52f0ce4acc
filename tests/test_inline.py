"""`backflip train --inline`: the seeds run in the terminal's own process — a `breakpoint()` in
an algorithm stops there in pdb — with the same archive and the same numbers as a normal run
(`launch/inline.py`, `launch/seed.py: train_one`)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import sys
import time

import numpy as np
import pytest

from backflip.telemetry import read_episodes, read_metrics
from tests.conftest import ROOT, cli_env

RUN = ["ppo", "--env", "CartPole-v1", "--seeds", "2", "--steps", "3000", "--no-progress"]


def numbers(run_dir) -> dict:
    """Every seed's metrics but timings, episodes and final evaluation."""
    out = {}
    for seed in (0, 1):
        folder = run_dir / "seeds" / str(seed)
        metrics = read_metrics(folder / "metrics.csv")
        out[seed] = (
            {k: v[1].tolist() for k, v in metrics.items() if not k.startswith(("time/", "sys/"))},
            [a.tolist() for a in read_episodes(folder / "episodes.csv")],
            json.loads((folder / "status.json").read_text())["final_eval_returns"],
        )
    return out


def test_inline_seeds_give_the_archive_and_numbers_of_a_normal_run(cli, home):
    normal = json.loads(cli("train", *RUN, "--json").stdout)
    inline = cli("train", *RUN, "--inline", "--json")
    record = json.loads(inline.stdout)
    assert record["status"] == "finished" and normal["status"] == "finished"
    a, b = numbers(home / normal["id"]), numbers(home / record["id"])
    assert a == b
    for seed in (0, 1):
        folder = home / record["id"] / "seeds" / str(seed)
        for name in ("stdout.log", "stderr.log", "status.json", "metrics.csv", "episodes.csv"):
            assert (folder / name).exists(), name
        assert (folder / "checkpoints" / "final.pt").exists()
    assert record["backend"]["name"] == "inline"


def test_inline_refuses_another_backend_in_one_line(cli):
    proc = cli("train", *RUN, "--inline", "--backend", "ray", check=False)
    assert proc.returncode == 2 and "--inline runs the seeds here" in proc.stderr


@pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pseudo-terminal")
def test_a_breakpoint_in_ppo_stops_in_the_terminal(tmp_path, home):
    """A copy of backflip with `breakpoint()` in PPO's loop: `--inline` stops in pdb on the
    terminal, `c` goes on, and the run finishes."""
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT / "backflip", copy / "backflip", ignore=shutil.ignore_patterns("__pycache__")
    )
    ppo = copy / "backflip" / "algos" / "ppo.py"
    text = ppo.read_text()
    marker = "def train("
    assert marker in text
    head, rest = text.split(marker, 1)
    signature, body = rest.split(":\n", 1)
    ppo.write_text(f'{head}{marker}{signature}:\n    print("BEFORE-PDB", flush=True)\n'
                   f"    breakpoint()\n{body}")  # fmt: skip
    env = cli_env(home)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), env.get("PYTHONPATH", "")])
    env.pop("PYTHONBREAKPOINT", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, its terminal the pseudo-terminal
        os.chdir(tmp_path)  # not the checkout: `-m backflip` must import the copy
        os.execve(
            sys.executable,
            [sys.executable, "-m", "backflip", "train", "ppo", "--env", "CartPole-v1",
             "--seeds", "1", "--steps", "1024", "--inline", "--no-progress"],
            env,
        )  # fmt: skip
    out = b""

    def read_until(token: bytes, timeout: float) -> None:
        nonlocal out
        end = time.monotonic() + timeout
        while token not in out:
            assert time.monotonic() < end, out.decode(errors="replace")[-2000:]
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break

    read_until(b"(Pdb)", 120)
    assert b"BEFORE-PDB" in out and b"backflip/algos/ppo.py" in out
    os.write(fd, b"c\n")
    read_until(b"archived in", 120)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")[-2000:]
    run = next(p for p in home.iterdir() if p.is_dir() and p.name[0].isdigit())
    assert json.loads((run / "seeds" / "0" / "status.json").read_text())["status"] == "finished"
    assert "BEFORE-PDB" in (run / "seeds" / "0" / "stdout.log").read_text()
    assert np.isfinite(json.loads((run / "seeds" / "0" / "status.json").read_text())["sps"])
