"""`backflip resume`: an interrupted or killed run continues from its checkpoint and ends exactly
where an uninterrupted run with the same seed ends (every algorithm saves everything, envs
included), or says before it starts what will differ."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from backflip.runs.archive import load_run
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env

STEPS = 40_960
TRAIN = [
    "train",
    "ppo",
    "--env",
    "CartPole-v1",
    "--seed-start",
    "5",
    "--seeds",
    "1",
    "--steps",
    str(STEPS),
    "--set",
    "epochs=2",
    "--set",
    "checkpoint_every=4096",
    "--no-progress",
]


def _deterministic(path):
    return {k: v for k, v in read_metrics(path).items() if not k.startswith(("time/", "sys/"))}


def _start(home):
    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", *TRAIN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
    )
    run_id = proc.stdout.readline().split()[1].rstrip(":")
    return proc, run_id


def _wait_for_checkpoint(folder, min_step: int):
    """Until a periodic checkpoint at >= min_step exists."""
    deadline = time.time() + 120
    while time.time() < deadline:
        steps = [int(p.stem.split("_")[1]) for p in (folder / "checkpoints").glob("step_*.pt")]
        if steps and max(steps) >= min_step:
            return max(steps)
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    home = tmp_path_factory.mktemp("reference")
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *TRAIN],
        capture_output=True,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[1].rstrip(":")
    return home / run_id / "seeds" / "5"


def _assert_same_as(reference, folder):
    a, b = _deterministic(reference / "metrics.csv"), _deterministic(folder / "metrics.csv")
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k][0], b[k][0]), f"{k}: steps differ"
        assert np.array_equal(a[k][1], b[k][1]), f"{k}: values differ"
    assert (reference / "episodes.csv").read_text() == (folder / "episodes.csv").read_text()
    sa = json.loads((reference / "status.json").read_text())
    sb = json.loads((folder / "status.json").read_text())
    assert sb["status"] == "finished" and sb["steps"] == sa["steps"]
    assert sb["final_eval_returns"] == sa["final_eval_returns"]


def _tensorboard_steps(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def _train_in_process(
    folder, algo, steps, sets, stop_after_rows=None, checkpoint=None, stop_at_step=None
):
    """One seed through SeedRun directly; stops itself after `stop_after_rows` rows, or at env
    step `stop_at_step` (a one-env-step algorithm asks `run.log_due` after every env step: a
    signal arriving there, anywhere between two rows)."""
    import torch

    from backflip.algos import get_algo
    from backflip.config import resolve
    from backflip.seedrun import SeedRun
    from backflip.telemetry import truncate_logs

    torch.set_num_threads(1)  # as in a seed process
    sets = dict(sets)
    cfg = resolve(algo, sets.pop("env", "CartPole-v1"), [2], steps, set_values=sets)
    if checkpoint is not None:
        ckpt = torch.load(checkpoint, weights_only=False)
        truncate_logs(folder, ckpt["step"], ckpt.get("rows_until"))
    rows = []

    def on_row(step, row):
        rows.append(step)
        if stop_after_rows and len(rows) >= stop_after_rows:
            run.stopping = True

    run = SeedRun(cfg, 2, folder, on_row=on_row, append=checkpoint is not None)
    if stop_at_step is not None:
        log_due = run.log_due

        def stop_there(step, *args):
            run.stopping = run.stopping or step >= stop_at_step
            return log_due(step, *args)

        run.log_due = stop_there
    if checkpoint is not None:
        run.restore(torch.load(checkpoint, weights_only=False))
    get_algo(algo).train(cfg.hp, run)
    run.close()
    return run, rows


# the off-policy ones: small networks and a row every 250 steps, so that a stop at the fifth row
# (step 1,250) falls inside an episode on Pendulum (200 steps each)
OFF_POLICY_SMALL = {"hidden": "32,32", "batch_size": 64, "learning_starts": 300, "log_every": 250}
OFF_POLICY = [
    ("dqn", 2400, {**OFF_POLICY_SMALL, "train_every": 64, "gradient_steps": 16}),
    ("ddpg", 2400, {**OFF_POLICY_SMALL, "env": "Pendulum-v1"}),
    ("td3", 2400, {**OFF_POLICY_SMALL, "env": "Pendulum-v1"}),
    ("sac", 2400, {**OFF_POLICY_SMALL, "env": "Pendulum-v1"}),
]
RESUMABLE = [
    ("ppo", 4096, {"epochs": 1}),
    ("a2c", 4096, {"log_interval": 512}),
    ("vpg", 4096, {}),
    ("cem", 20_000, {}),
    # gSDE's exploration matrices are drawn afresh at each rollout, after the restored RNG
    ("a2c", 4096, {"log_interval": 512, "env": "Pendulum-v1"}),
    ("vpg", 4096, {"env": "Pendulum-v1"}),  # 64-step rollouts, a row every 1,000 steps
    *OFF_POLICY,
]


@pytest.fixture(scope="module")
def uninterrupted_in_process(tmp_path_factory):
    """(folder, run, row steps) of one uninterrupted seed per case, trained once per module."""
    done = {}

    def get(algo, steps, sets):
        key = (algo, steps, tuple(sorted(sets.items())))
        if key not in done:
            folder = tmp_path_factory.mktemp(algo)
            done[key] = (folder, *_train_in_process(folder, algo, steps, sets))
        return done[key]

    return get


def _assert_resumed_like(whole, reference, parts, resumed):
    a, b = _deterministic(whole / "metrics.csv"), _deterministic(parts / "metrics.csv")
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k][0], b[k][0]) and np.array_equal(a[k][1], b[k][1]), k
    assert (whole / "episodes.csv").read_text() == (parts / "episodes.csv").read_text()
    assert resumed.result["eval_returns"] == reference.result["eval_returns"]


@pytest.mark.parametrize(("algo", "steps", "sets"), RESUMABLE)
def test_seed_stopped_and_restored_in_process_matches_an_uninterrupted_one(
    tmp_path, uninterrupted_in_process, algo, steps, sets
):
    parts = tmp_path / "parts"
    whole, reference, all_rows = uninterrupted_in_process(algo, steps, sets)
    assert len(all_rows) >= 4, "the budget must span several rows"
    first, _ = _train_in_process(parts, algo, steps, sets, stop_after_rows=len(all_rows) // 2)
    assert first.step == all_rows[len(all_rows) // 2 - 1]
    resumed, _ = _train_in_process(
        parts, algo, steps, sets, checkpoint=parts / "checkpoints" / "final.pt"
    )
    assert resumed.start_step == first.step and resumed.step == reference.step
    _assert_resumed_like(whole, reference, parts, resumed)


@pytest.mark.parametrize(("algo", "steps", "sets"), OFF_POLICY)
def test_off_policy_seed_stopped_between_rows_mid_episode_resumes_exactly(
    tmp_path, uninterrupted_in_process, algo, steps, sets
):
    """A signal stops a one-env-step algorithm at the next env step: between two rows, inside
    an episode and between two training phases. The checkpoint must carry the envs, the running
    episode, the values stored for the next row and the loop's row bookkeeping."""
    import torch

    parts = tmp_path / "parts"
    whole, reference, all_rows = uninterrupted_in_process(algo, steps, sets)
    stop = all_rows[len(all_rows) // 2] - 37  # not a row, not a multiple of train_every
    first, _ = _train_in_process(parts, algo, steps, sets, stop_at_step=stop)
    assert first.step == stop
    ckpt = torch.load(parts / "checkpoints" / "final.pt", weights_only=False)
    assert ckpt["rows_until"] < stop  # the row flushed at the stop is written again later
    assert ckpt["state"]["envs"] is not None and ckpt["state"]["loop"]["episode"]["length"] > 0
    resumed, _ = _train_in_process(
        parts, algo, steps, sets, checkpoint=parts / "checkpoints" / "final.pt"
    )
    assert resumed.start_step == stop and resumed.step == reference.step
    _assert_resumed_like(whole, reference, parts, resumed)


@pytest.mark.slow
def test_interrupted_run_resumes_exactly_like_an_uninterrupted_one(home, cli, uninterrupted):
    proc, run_id = _start(home)
    folder = home / run_id / "seeds" / "5"
    _wait_for_checkpoint(folder, 8192)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    record = load_run(home / run_id)
    assert record["status"] == "interrupted"
    stopped_at = record["seeds"][0]["steps"]
    assert 8192 <= stopped_at < STEPS

    out = cli("resume", run_id, "--no-progress").stdout
    assert f"seed 5 from step {stopped_at:,}" in out
    record = load_run(home / run_id)
    assert record["status"] == "finished" and record["resumes"][0]["from_step"] == {"5": stopped_at}
    status = record["seeds"][0]
    assert status["resumed_from_step"] == stopped_at
    # the metrics continue from the checkpoint step: one row per step, in order
    steps = read_metrics(folder / "metrics.csv")["train/policy_loss"][0]
    assert (np.diff(steps) > 0).all() and steps[-1] == STEPS // 256 * 256
    _assert_same_as(uninterrupted, folder)
    assert record["results"]["per_seed"]["5"] == status["final_eval_return"]


@pytest.mark.slow
def test_killed_seed_resumes_from_its_last_periodic_checkpoint(home, cli, uninterrupted):
    proc, run_id = _start(home)
    folder = home / run_id / "seeds" / "5"
    _wait_for_checkpoint(folder, 12288)
    pid = json.loads((folder / "status.json").read_text())["pid"]
    time.sleep(0.3)  # let it log past the checkpoint: those rows must be dropped on resume
    os.kill(pid, signal.SIGKILL)  # as the out-of-memory killer would
    proc.communicate(timeout=120)
    record = load_run(home / run_id)
    assert record["status"] == "failed" and "SIGKILL" in record["seeds"][0]["error"]
    ckpt = max(int(p.stem.split("_")[1]) for p in (folder / "checkpoints").glob("step_*.pt"))

    out = cli("resume", run_id, "--no-progress").stdout
    assert f"seed 5 from step {ckpt:,}" in out
    _assert_same_as(uninterrupted, folder)
    # TensorBoard drops the events logged after the checkpoint by the killed process
    csv_steps = read_metrics(folder / "metrics.csv")["train/policy_loss"][0].tolist()
    assert _tensorboard_steps(folder, "train/policy_loss") == csv_steps


def test_envs_that_cannot_be_pickled_are_known_before_training():
    import tests.fault_envs  # noqa: F401 — registers the test envs
    from backflip.envs import why_no_snapshot

    assert why_no_snapshot("CartPole-v1") is None
    assert why_no_snapshot("Pendulum-v1") is None
    assert "EzPickle" in why_no_snapshot("CrashAfterEzPickle-v0")


def test_resume_says_before_starting_what_will_differ_when_envs_cannot_be_saved(home, cli):
    """An env that pickles as its constructor arguments (MuJoCo's do) cannot be saved mid-episode:
    the resumed seed restarts it, and `backflip resume` says so before any seed starts."""
    env = "tests.fault_envs:CrashAfterEzPickle-v0"  # raises at its 251st step
    small = ["hidden=16,16", "learning_starts=100", "train_every=50", "gradient_steps=4"]
    every = ["log_every=100", "checkpoint_every=100", "eval_episodes=2"]  # (checkpoints at rows)
    sets = [x for kv in [*small, *every] for x in ("--set", kv)]
    train = cli("train", "dqn", "--env", env, "--seeds", "1", "--steps", "400", *sets,
                "--no-progress", check=False)  # fmt: skip
    assert train.returncode != 0
    run_id = train.stdout.split()[1].rstrip(":")
    assert load_run(home / run_id)["seeds"][0]["status"] == "failed"

    out = cli("resume", run_id, "--no-progress").stdout.splitlines()
    assert out[0] == f"resuming run {run_id}: seed 0 from step 200"
    assert out[1].startswith(f"not exact: {env} cannot be saved mid-episode: it pickles as")
    assert "EzPickle" in out[1] and "will differ from an uninterrupted run's" in out[1]
    record = load_run(home / run_id)
    assert record["status"] == "finished"  # a fresh env copy: 200 more steps, no crash
    assert record["resumes"][0]["not_exact"] == [out[1].removeprefix("not exact: ")]
    stderr = (home / run_id / "seeds" / "0" / "stderr.log").read_text()
    assert "holds no snapshot of the envs" in stderr  # the seed says it too


def test_resume_refuses_a_finished_run(home, cli):
    cli(
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
    )
    proc = cli("resume", "last", check=False)
    assert proc.returncode == 2 and "nothing to resume" in proc.stderr
    assert "Traceback" not in proc.stderr
