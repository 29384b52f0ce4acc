"""`backflip train`, `runs`, `show`, `rerun` end to end, through the real CLI."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from backflip.runs import index
from backflip.runs.archive import load_run
from backflip.runs.index import resolve_run
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env

TINY = ["--steps", "2048", "--set", "epochs=2", "--no-progress"]


def test_seeds_default_to_five_where_results_get_an_interval(tmp_path):
    """Five seeds unless told otherwise (the statistics need them; --seeds 1 is a quick look)."""
    from backflip.cli import build_parser

    parser = build_parser()
    env = ["--env", "CartPole-v1"]
    assert parser.parse_args(["train", "ppo", *env]).seeds == 5
    assert parser.parse_args(["sweep", "ppo", *env, "--vary", "lr=auto"]).seeds == 5
    assert parser.parse_args(["ablate", "ppo", *env, "--switch", "adv_norm"]).seeds == 5
    assert parser.parse_args(["train", "ppo", *env, "--seeds", "1"]).seeds == 1
    # each seed of a preference run asks for its own labels: a person's run has 1 seed by default
    from backflip.commands.prefs import build

    def seeds(*args):
        return build(parser.parse_args(["prefs", "train", "ppo", *args]), tmp_path).seeds

    assert seeds("--env", "MovingDotLowDim-v0") == [0, 1, 2, 3, 4]
    assert seeds("--env", "MovingDotLowDim-v0", "--labeler", "human") == [0]
    assert seeds("--env", "MovingDotLowDim-v0", "--set", "prefs.labeler=human") == [0]
    assert seeds("--env", "MovingDotLowDim-v0", "--labeler", "human", "--seeds", "2") == [0, 1]


def test_train_prints_run_id_first_and_summary_last_and_archives_everything(cli, home):
    proc = cli(
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "2",
        "--workers",
        "2",
        "-m",
        "does the skeleton work?",
        *TINY,
    )
    lines = proc.stdout.strip().splitlines()
    run_id = lines[0].split()[1].rstrip(":")
    assert lines[0].startswith(f"run {run_id}: ppo on CartPole-v1, 2 seed(s)")
    assert lines[-1].startswith("archived in") and run_id in lines[-1]
    assert "final greedy eval return" in proc.stdout and "IQM" in proc.stdout
    run_dir = home / run_id
    record = load_run(run_dir)
    assert record["status"] == "finished" and record["message"] == "does the skeleton work?"
    assert record["argv"][-len(TINY) :] == TINY
    prov = record["provenance"]
    assert prov["packages"]["torch"].startswith("2.13.0")
    assert prov["backflip"]["source_sha256"] and prov["host"]["cpu_count"]
    assert "backflip_git" in prov or "git" in prov  # the tests run inside backflip's checkout
    assert (run_dir / "packages.txt").read_text().count("==") > 10
    for seed in (0, 1):
        folder = run_dir / "seeds" / str(seed)
        for name in (
            "metrics.csv",
            "episodes.csv",
            "status.json",
            "stdout.log",
            "stderr.log",
            "checkpoints/final.pt",
        ):
            assert (folder / name).exists(), name
        assert list((folder / "tb").glob("events.out.tfevents.*"))
        assert list((folder / "checkpoints").glob("step_*.pt")), "periodic checkpoints"
        st = record["seeds"][seed]
        assert st["status"] == "finished" and st["steps"] == 2048 and st["sps"] > 0
        assert st["final_eval_return"] is not None
    rows = index.query(home)
    assert [r["id"] for r in rows] == [run_id] and rows[0]["status"] == "finished"


def test_show_json_contract_and_runs_filters(cli, home):
    cli("train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "-m", "first", *TINY)
    cli(
        "train",
        "ppo",
        "--env",
        "Pendulum-v1",
        "--seeds",
        "1",
        "-m",
        "second",
        "--steps",
        "2048",
        "--set",
        "num_steps=256",
        "--set",
        "epochs=1",
        "--no-progress",
    )
    runs = json.loads(cli("runs", "--json").stdout)
    assert [r["env"] for r in runs] == ["Pendulum-v1", "CartPole-v1"]
    assert [r["env"] for r in json.loads(cli("runs", "--json", "--env", "CartPole-v1").stdout)] == [
        "CartPole-v1"
    ]
    assert [r["message"] for r in json.loads(cli("runs", "--json", "--grep", "sec").stdout)] == [
        "second"
    ]
    assert json.loads(cli("runs", "--json", "--status", "failed").stdout) == []
    table = cli("runs").stdout
    assert "Pendulum-v1" in table and "second" in table
    shown = json.loads(cli("show", runs[1]["id"], "--json").stdout)
    for key in ("status", "config", "argv", "message", "provenance", "seeds"):
        assert key in shown
    seed = shown["seeds"][0]
    assert set(seed) >= {"seed", "status", "final_eval_return", "steps", "sps", "wall_s"}
    text = cli("show", runs[1]["id"]).stdout
    assert (
        "reproduce: backflip train ppo --env CartPole-v1 --seeds 1 --steps 2048 --set epochs=2"
        in text
    )


def test_rerun_uses_the_same_config_and_seeds_and_links_the_original(cli, home):
    cli("train", "ppo", "--env", "CartPole-v1", "--seed-start", "7", "--seeds", "1", *TINY)
    original = json.loads(cli("runs", "--json").stdout)[0]["id"]
    cli("rerun", original, "--no-progress")
    newest = json.loads(cli("runs", "--json").stdout)[0]
    assert newest["id"] != original and newest["rerun_of"] == original
    a = load_run(resolve_run(home, original))
    b = load_run(resolve_run(home, newest["id"]))
    assert a["config"] == b["config"] and b["config"]["seeds"] == [7]
    # same seed, same machine, same config: the same result
    assert a["results"]["per_seed"] == b["results"]["per_seed"]


def _metrics_without_timing(path):
    return {k: v for k, v in read_metrics(path).items() if not k.startswith(("time/", "sys/"))}


def test_same_seed_twice_gives_identical_metrics(cli, home):
    for _ in range(2):
        cli(
            "train",
            "ppo",
            "--env",
            "CartPole-v1",
            "--seed-start",
            "3",
            "--seeds",
            "1",
            "--steps",
            "4096",
            "--set",
            "epochs=4",
            "--no-progress",
        )
    ids = [r["id"] for r in json.loads(cli("runs", "--json").stdout)]
    a, b = (_metrics_without_timing(home / i / "seeds" / "3" / "metrics.csv") for i in ids)
    assert a.keys() == b.keys() and len(a) > 30
    for k in a:
        assert (a[k][0] == b[k][0]).all() and (a[k][1] == b[k][1]).all(), k
    ea = (home / ids[0] / "seeds/3/episodes.csv").read_text()
    assert ea == (home / ids[1] / "seeds/3/episodes.csv").read_text()


def test_sigint_marks_the_run_interrupted_with_metrics_and_a_checkpoint(home):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backflip",
            "train",
            "ppo",
            "--env",
            "CartPole-v1",
            "--seeds",
            "2",
            "--workers",
            "2",
            "--steps",
            "1000000",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
    )
    first = proc.stdout.readline()
    run_id = first.split()[1].rstrip(":")
    metrics = home / run_id / "seeds" / "0" / "metrics.csv"
    deadline = time.time() + 60
    while time.time() < deadline and (not metrics.exists() or metrics.stat().st_size < 5000):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # to the launcher only, as `kill -INT` would
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    record = load_run(home / run_id)
    assert record["status"] == "interrupted"
    for s in record["seeds"]:
        assert s["status"] == "interrupted"
        assert 0 < s["steps"] < 1_000_000
        folder = home / run_id / "seeds" / str(s["seed"])
        assert (folder / "checkpoints" / "final.pt").exists()
        series = read_metrics(folder / "metrics.csv")
        assert series["train/policy_loss"][0].max() == s["steps"]
    assert index.query(home)[0]["status"] == "interrupted"


def test_env_that_raises_mid_training_fails_with_its_traceback_kept(cli, home):
    proc = cli(
        "train",
        "ppo",
        "--env",
        "tests.fault_envs:CrashAfter-v0",
        "--seeds",
        "1",
        "--steps",
        "20000",
        "--set",
        "epochs=1",
        "--no-progress",
        check=False,
    )
    assert proc.returncode == 1
    assert "simulator exploded" in proc.stdout
    run_id = proc.stdout.split()[1].rstrip(":")
    record = load_run(home / run_id)
    assert record["status"] == "failed"
    seed = record["seeds"][0]
    assert seed["status"] == "failed" and "RuntimeError: simulator exploded" in seed["error"]
    folder = home / run_id / "seeds" / "0"
    tb = (folder / "traceback.txt").read_text()
    assert "Traceback" in tb and "fault_envs.py" in tb
    # metrics written before the crash are all there
    series = read_metrics(folder / "metrics.csv")
    assert series["train/policy_loss"][0].max() >= 2048


def test_four_concurrent_launches_leave_a_consistent_index(home):
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backflip",
                "train",
                "ppo",
                "--env",
                "CartPole-v1",
                "--seeds",
                "1",
                "--steps",
                "1024",
                "--set",
                "epochs=1",
                "--no-progress",
                "-m",
                f"concurrent {i}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(home),
            cwd=ROOT,
        )
        for i in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    rows = index.query(home)
    assert sorted(r["message"] for r in rows) == [f"concurrent {i}" for i in range(4)]
    assert all(r["status"] == "finished" and r["final_mean"] is not None for r in rows)
    assert len({r["id"] for r in rows}) == 4
    # the index agrees with the run directories it caches
    assert index.reindex(home) == (4, [])
    assert sorted(r["id"] for r in index.query(home)) == sorted(r["id"] for r in rows)


def _run_of_a_dead_launcher(home, message: str, **fields):
    """A created run whose launcher was killed (its pid no longer exists), run.json's other
    `fields` set as given; (run folder, record)."""
    import json as _json

    from backflip.config import resolve
    from backflip.runs.records import create_run

    cfg = resolve("ppo", "CartPole-v1", [0], 1000)
    run_dir, _record = create_run(home, cfg.to_dict(), ["backflip", "train"], message)
    rec = {**_json.loads((run_dir / "run.json").read_text()), "pid": 2**22 + 12345, **fields}
    (run_dir / "run.json").write_text(_json.dumps(rec))
    return run_dir, rec


def test_a_dead_launcher_is_finalized_from_its_seeds_not_left_running(home):
    run_dir, rec = _run_of_a_dead_launcher(home, "will die")
    index.upsert(home, {**rec, "seeds": []})
    # its seed never started: interrupted, and `backflip resume` starts it
    assert load_run(run_dir)["status"] == "interrupted"
    assert index.query(home)[0]["status"] == "interrupted"
    seed = load_run(run_dir)["seeds"][0]
    assert seed["status"] == "interrupted" and seed["error"] == "not started: its launcher died"


def test_a_run_found_hours_after_its_machine_went_down_lasted_until_its_last_write(home):
    """The seeds of a dead launcher end when they last wrote, not when someone lists the runs."""
    import json as _json
    import socket
    import time as _time

    from backflip.runs.layout import METRICS, STATUS

    down = _time.time() - 3 * 3600  # the machine went down three hours ago, 60 s into the run
    started = _time.strftime("%Y-%m-%dT%H:%M:%S+00:00", _time.gmtime(down - 60))
    run_dir, _rec = _run_of_a_dead_launcher(home, "machine went down", created=started)
    folder = run_dir / "seeds" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATUS).write_text(
        _json.dumps(
            {"seed": 0, "status": "running", "pid": 2**22 + 12346, "host": socket.gethostname(),
             "started": started}
        )
    )  # fmt: skip
    (folder / METRICS).write_text(f"step,wall,name,value\n512,{down},train/loss,1.0\n")
    for path in (folder / STATUS, folder / METRICS):
        os.utime(path, (down, down))
    record = load_run(run_dir)
    seed = record["seeds"][0]
    assert record["status"] == "failed" and seed["steps"] == 512
    assert abs(seed["wall_s"] - 60) < 2
    assert 55 < record["duration_s"] < 65, record["duration_s"]  # not three hours


@pytest.mark.skipif(not os.path.exists("/proc"), reason="needs /proc")
def test_tensorboard_event_files_match_the_metrics_table(cli, home):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cli("train", "ppo", "--env", "CartPole-v1", "--seeds", "1", *TINY)
    run_id = json.loads(cli("runs", "--json").stdout)[0]["id"]
    folder = home / run_id / "seeds" / "0"
    acc = EventAccumulator(str(folder / "tb"))
    acc.Reload()
    series = read_metrics(folder / "metrics.csv")
    tags = set(acc.Tags()["scalars"])
    assert {"train/approx_kl", "rollout/ep_return_mean", "time/sps", "eval/return_mean"} <= tags
    # what logging costs is itself logged: diagnostics every row, the writing one row late
    assert {"time/diagnostics_s", "time/log_s"} <= tags
    assert all(
        e.value > 0 for tag in ("time/diagnostics_s", "time/log_s") for e in acc.Scalars(tag)
    )
    for tag in ("train/approx_kl", "train/value_loss", "eval/return_mean"):
        tb = [(e.step, e.value) for e in acc.Scalars(tag)]
        steps, values = series[tag]
        assert [s for s, _ in tb] == list(steps)
        assert [round(v, 4) for _, v in tb] == [round(float(v), 4) for v in values]


def test_target_return_stops_a_seed_once_evaluation_reaches_it(cli, home):
    proc = cli(
        "train",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "1",
        "--steps",
        "100000",
        "--set",
        "eval_every=2048",
        "--set",
        "eval_episodes=3",
        "--set",
        "target_return=60",
        "--no-progress",
    )
    run_id = proc.stdout.split()[1].rstrip(":")
    seed = load_run(home / run_id)["seeds"][0]
    assert seed["status"] == "finished" and seed["final_eval_return"] >= 60
    assert seed["steps"] == seed["solved_step"] < 100_000 and seed["solved_s"] > 0


RACE = """
import sys, time
from pathlib import Path
from backflip.runs import index
from backflip.runs.archive import load_run
home, start = Path(sys.argv[1]), float(sys.argv[2])
record = load_run(next(p for p in home.iterdir() if p.name[:1].isdigit()))
while time.time() < start:
    pass
for _ in range(20):
    index.connect(home).close()  # rebuilds a missing index (and says so)
    index.upsert(home, record)  # a write
"""


def test_processes_that_find_the_index_missing_rebuild_it_once(home):
    """The race behind a concurrent launch's `attempt to write a readonly database`: processes
    that find index.sqlite missing at once each rebuilt it, and one replaced the file (deleting
    its WAL) under another that was already writing. Six processes, started on the same instant,
    each find it missing and write; three rounds."""
    out = subprocess.run(
        [*(sys.executable, "-m", "backflip", "train", "ppo", "--env", "CartPole-v1"),
         *("--seeds", "1", "--steps", "512", "--set", "epochs=1", "--no-progress")],
        capture_output=True, text=True, env=cli_env(home), cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for _ in range(3):
        for f in home.glob("index.sqlite*"):
            f.unlink()
        start = time.time() + 3.0  # after the six interpreters have imported backflip
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACE, str(home), str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=cli_env(home),
            )
            for _ in range(6)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs if e][:1]
        # one process said it rebuilt the missing index (the others found it there)
        said = sum("index.sqlite was missing" in e for _, e in outs)
        assert said == 1, [e for _, e in outs]
        assert len(index.query(home)) == 1
