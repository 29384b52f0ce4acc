"""The lab journal: notes, the four-part log, compute accounting, and the pre-mortem question."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from backflip.errors import UserError
from backflip.journal import add_note, expected_seconds, parse_since, read_notes
from backflip.runs.archive import load_run
from tests.conftest import ROOT, cli_env
from tests.ui.support import backflip

TINY = ["--env", "CartPole-v1", "--seeds", "1", "--steps", "1024", "--set", "epochs=1"]
TINY += ["--no-progress"]


def test_journal_groups_notes_and_runs_like_rahtz_and_counts_compute(cli, home):
    cli("note", "--focus", "get CartPole to 500 on every seed")
    cli("note", "hypothesis: epochs=1 is too few")
    out = cli("train", "ppo", *TINY, "--seeds", "2", "-m", "does epochs=1 learn?", "--tag", "sweep")
    run_id = out.stdout.splitlines()[0].split()[1][:-1]
    assert (
        "noted (result) on run"
        in cli("note", "--run", "last", "--result", "it barely moved").stdout
    )
    text = cli("journal", "--md").stdout
    sections = ["## Current focus", "## Thoughts and hypotheses", "## Ongoing runs", "## Results"]
    assert [text.index(s) for s in sections] == sorted(text.index(s) for s in sections)
    assert "**get CartPole to 500 on every seed**" in text
    assert "hypothesis: epochs=1 is too few" in text
    assert f"`{run_id}` ppo, finished — **does epochs=1 learn?** → IQM" in text
    assert "it barely moved" in text and "### CartPole-v1" in text
    assert "| tag `sweep` | 1 |" in text and "## Timeline" in text

    # compute: CPU time of the seed processes, per run, per tag and in total
    record = load_run(home / run_id)
    cpu_s = [s["cpu_s"] for s in record["seeds"]]
    assert all(0 < c <= 2 * s["wall_s"] + 1 for c, s in zip(cpu_s, record["seeds"], strict=True))
    data = json.loads(cli("journal", "--json", "--cpu-price", "3.6").stdout)
    total = data["compute"]["total"]
    assert total["cpu_h"] == pytest.approx(sum(cpu_s) / 3600)
    assert total["cost"] == pytest.approx(sum(cpu_s) / 3600 * 3.6)
    assert data["compute"]["tags"]["sweep"]["runs"] == 1 and total["gpu_h"] == 0
    assert "$" in cli("journal", "--md", "--gpu-price", "2").stdout
    priced = json.loads(
        backflip(home, "journal", "--json", env={"BACKFLIP_CPU_PRICE": "1.5"}).stdout
    )
    assert priced["compute"]["cpu_price"] == 1.5

    # the terminal view renders the same Markdown
    assert "Current focus" in cli("journal").stdout
    # --since: nothing from the future, everything from yesterday
    assert "_no finished runs_" in cli("journal", "--md", "--since", "2099-01-01").stdout
    assert run_id in cli("journal", "--md", "--since", "1d").stdout
    bad = cli("journal", "--since", "last tuesday", check=False)
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_notes_are_validated_and_survive_concurrent_writers(home, cli):
    with pytest.raises(UserError):
        add_note(home, "   ")
    with pytest.raises(UserError):
        add_note(home, "x", kind="mood")
    bad = cli("note", "about a run that does not exist", "--run", "nope", check=False)
    assert bad.returncode == 2 and "no run 'nope'" in bad.stderr

    def write(k):
        for i in range(200):
            add_note(home, f"writer {k} note {i} " + "x" * 300)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    notes = read_notes(home)
    assert len(notes) == 800 and len({n["text"] for n in notes}) == 800
    with open(home / "journal.jsonl", "a") as f:
        f.write('{"torn": ')  # a crash mid-line loses that line only
    assert len(read_notes(home)) == 800


def test_parse_since():
    now = datetime.now(UTC)
    assert parse_since("2026-11-20") == datetime(2026, 11, 20, tzinfo=UTC)
    assert abs(parse_since("7d") - (now - timedelta(days=7))) < timedelta(seconds=5)
    assert abs(parse_since("12h") - (now - timedelta(hours=12))) < timedelta(seconds=5)
    assert parse_since("today") <= now and parse_since("yesterday") < parse_since("today")
    assert parse_since(None) is None
    with pytest.raises(UserError):
        parse_since("soon")


def test_expected_duration_comes_from_earlier_runs(cli, home):
    assert expected_seconds(home, "ppo", "CartPole-v1", 10_000, 1, 1) == 10.0  # 1,000 steps/s
    cli("train", "ppo", *TINY)
    sps = load_run(next(p for p in home.iterdir() if p.is_dir()))["seeds"][0]["sps"]
    assert expected_seconds(home, "ppo", "CartPole-v1", 10_000, 4, 2) == pytest.approx(
        2 * 10_000 / sps
    )


def test_train_asks_the_premortem_question_on_a_terminal(home):
    """A person at a terminal is asked before a long run; the answer is stored with the run."""
    env = cli_env(home)
    env.pop("CI", None)
    env["BACKFLIP_ASK_AFTER_MIN"] = "0"  # every run counts as long
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "train", "ppo", *TINY, "-m", "asked?"],
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        text=True,
    )
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 120
    while b"How surprised" not in seen and time.monotonic() < deadline:
        if select.select([master], [], [], 1)[0]:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    assert b"How surprised would you be if this run failed?" in seen, seen
    os.write(master, b"4 - it worked yesterday\n")
    out, _ = proc.communicate(timeout=300)
    os.close(master)
    assert proc.returncode == 0
    run_id = out.splitlines()[0].split()[1][:-1]
    record = load_run(home / run_id)
    assert record["premortem"]["surprise"] == "4 - it worked yesterday"
    assert record["premortem"]["expected_s"] >= 0


def test_premortem_is_never_asked_without_a_terminal_but_can_be_given(cli, home):
    env = {"BACKFLIP_ASK_AFTER_MIN": "0", "CI": None}
    out = backflip(home, "train", "ppo", *TINY, env=env).stdout  # stdin is not a terminal here
    assert "How surprised" not in out
    run_a = out.splitlines()[0].split()[1][:-1]
    assert "premortem" not in load_run(home / run_a)
    out = cli("train", "ppo", *TINY, "--surprise", "2").stdout
    run_b = out.splitlines()[0].split()[1][:-1]
    assert load_run(home / run_b)["premortem"]["surprise"] == "2"
    journal = cli("journal", "--md").stdout
    assert "surprise if it failed (asked at launch): 2" in journal
    bad = backflip(home, "train", "ppo", *TINY, env={"BACKFLIP_ASK_AFTER_MIN": "soon"}, check=False)
    assert bad.returncode == 2 and "BACKFLIP_ASK_AFTER_MIN" in bad.stderr
