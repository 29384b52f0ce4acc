"""`backflip compare` across libraries and across tasks: TensorBoard logs written by
Stable-Baselines3 itself next to backflip runs (one table, one verdict, like with like), and
sides joined with `+` scored on normalized returns (backflip.references)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from backflip import references, stats
from backflip.telemetry import read_episodes
from tests.conftest import ROOT, cli_env, strict_json
from tests.sb3_logs import train_sb3

pytestmark = pytest.mark.slow  # the fixture trains 4 backflip runs and 3 SB3 seeds (~1 min)

STEPS = ["--steps", "4096", "--workers", "2", "--no-progress", "--seeds", "3"]


def _cli(home, *args, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"backflip {args} exited {proc.returncode}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("archive")
    ids = {}
    for name, env, extra in (
        ("cp", "CartPole-v1", []),
        ("ac", "Acrobot-v1", []),
        ("cp_fast", "CartPole-v1", ["--set", "lr=3e-3"]),
        ("ac_fast", "Acrobot-v1", ["--set", "lr=3e-3"]),
    ):
        out = _cli(home, "train", "ppo", "--env", env, *STEPS, *extra).stdout
        ids[name] = out.split()[1].rstrip(":")
    logs = home / "peers" / "sb3-ppo"  # inside the archive, where the UI may read it
    for seed in range(3):
        train_sb3("ppo", logs, 4096, seed=seed)
    return home, ids, logs


def _last_sb3_ep_rew_mean(folder):
    """Read back independently of backflip: the last `rollout/ep_rew_mean` SB3 wrote."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(folder), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc.Scalars("rollout/ep_rew_mean")[-1].value


def test_an_sb3_baseline_and_a_backflip_run_get_one_table_and_one_verdict(lab):
    home, ids, logs = lab
    out = _cli(home, "compare", ids["cp"], f"{logs}@CartPole-v1", "--no-plot").stdout
    assert "training return IQM [95% CI]" in out  # not the final-evaluation column
    assert "score: training-episode return (mean of the last 100 training episodes" in out
    assert "backflip's final greedy evaluations are not compared with them" in out
    assert "B is Stable-Baselines3 logs: assumed on the registered CartPole-v1" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert "A and B" in verdict and "3 seeds each" in verdict  # a verdict with numbers

    report = strict_json(
        _cli(home, "compare", ids["cp"], f"{logs}@CartPole-v1", "--json", "--no-plot").stdout
    )
    a, b = report["sides"]
    assert report["score"] == "train" and a["score"] == b["score"] == "train"
    assert (a["kind"], b["kind"]) == ("backflip", "sb3")
    # B's scores are what SB3 itself logged last, seed by seed
    folders = sorted(p for p in logs.iterdir() if p.is_dir())
    assert b["seeds"] == [f.name for f in folders]
    assert b["finals"] == pytest.approx([_last_sb3_ep_rew_mean(f) for f in folders])
    assert b["steps_per_seed"] == 4096 and b["params"] is None and b["tuning"] is None
    # A's: the mean of each seed's last 100 training episodes, as SB3's window
    run_dir = home / ids["cp"]
    for seed, score in zip(a["seeds"], a["finals"], strict=True):
        _, rets, _ = read_episodes(run_dir / "seeds" / str(seed) / "episodes.csv")
        assert score == pytest.approx(rets[-100:].mean())
    (pair,) = report["pairs"]
    assert pair["comparable"] is True
    expect = stats.compare_pair(a["finals"], b["finals"])
    assert pair["poi"] == pytest.approx(expect["poi"]) and pair["verdict"] == report["verdicts"][0]
    assert a["curve"]["window"] == b["curve"]["window"] == 100  # like with like in the curves too


def test_mixing_evaluation_and_training_returns_gets_no_verdict(lab):
    home, ids, logs = lab
    out = _cli(home, "compare", ids["cp"], f"{logs}@CartPole-v1", "--score", "eval", "--no-plot")
    text = out.stdout
    assert "final return IQM [95% CI]" in text
    assert "pairs that mix the two kinds get no verdict" in text
    verdict = next(line for line in text.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith(
        "verdict: no verdict for A vs B: A's scores are final greedy evaluation returns and "
        "B's are training-episode return"
    )
    assert "P(B>A)" not in text and "beats" not in text


def test_sb3_logs_must_say_their_env_and_must_match_the_others(lab):
    home, ids, logs = lab
    proc = _cli(home, "compare", ids["cp"], logs, "--no-plot", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: the Stable-Baselines3 logs in ")
    assert f"name it as {logs}@ENV" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    out = _cli(home, "compare", ids["ac"], f"{logs}@CartPole-v1", "--no-plot").stdout
    assert "A ran on Acrobot-v1 and B on CartPole-v1: returns on different envs" in out


def test_the_ui_compares_a_peer_the_same_way(lab):
    from backflip.ui import data
    from backflip.ui.app import create_app

    home, ids, logs = lab
    cli = strict_json(
        _cli(home, "compare", ids["cp"], f"{logs}@CartPole-v1", "--json", "--no-plot").stdout
    )
    ui = data.compare(home, [home / ids["cp"], f"{logs}@CartPole-v1"])
    assert ui["verdicts"] == cli["verdicts"] and ui["score_note"] == cli["score_note"]
    assert ui["metrics"] == ["return"]  # a peer's logs: return curves only
    client = create_app(home).test_client()
    page = client.get(f"/compare?ids={ids['cp']}&peer=peers/sb3-ppo@CartPole-v1")
    html = page.get_data(as_text=True).replace("&#39;", "'").replace("&gt;", ">")
    assert cli["verdicts"][0] in html and "Stable-Baselines3 logs" in html
    outside = client.get(f"/compare?ids={ids['cp']}&peer=../../etc@CartPole-v1")
    assert "no SB3 or CleanRL TensorBoard logs at" in outside.get_data(as_text=True)


def test_sides_across_tasks_are_compared_on_normalized_scores(lab, tmp_path):
    home, ids, _ = lab
    a, b = f"{ids['cp']}+{ids['ac']}", f"{ids['cp_fast']}+{ids['ac_fast']}"
    report = strict_json(_cli(home, "compare", a, b, "--json", "--no-plot").stdout)
    assert report["normalized"] and report["score"] == "eval"
    side_a = report["sides"][0]
    assert side_a["env"] == "Acrobot-v1+CartPole-v1"  # tasks in one order on every side
    raw = {t["env"]: t["finals"] for t in side_a["tasks"]}
    for env, finals in raw.items():
        ref = references.REFERENCES[env]
        want = [(x - ref.random) / (ref.reference - ref.random) for x in finals]
        assert side_a["task_finals"][env] == pytest.approx(want)
    summary = stats.summarize_tasks([side_a["task_finals"][e] for e in sorted(raw)])
    assert side_a["summary"]["iqm"] == pytest.approx(summary["iqm"])
    assert side_a["summary"]["og"] == pytest.approx(
        stats.optimality_gap(np.concatenate([side_a["task_finals"][e] for e in sorted(raw)]))
    )
    (pair,) = report["pairs"]
    assert pair["tasks"] == 2 and "2 tasks, normalized scores" in pair["verdict"]
    assert side_a["profile"]["tau"][0] <= 0 and side_a["profile"]["tau"][-1] >= 1
    curve = side_a["curve"]
    assert curve["tasks"] == 2 and curve["x"] == "steps" and curve["step"][-1] == 4096

    fig = tmp_path / "across.pdf"
    out = _cli(home, "compare", a, b, "--plot", fig).stdout
    assert "normalized final return IQM [95% CI]" in out and "optimality gap [95% CI]" in out
    assert "normalized per env: (R - R_random) / (R_ref - R_random)" in out
    assert fig.read_bytes().startswith(b"%PDF")
    # a side across tasks against a side on one task: no aggregate over different tasks
    out = _cli(home, "compare", a, ids["cp_fast"], "--no-plot").stdout
    assert "an aggregate across tasks compares the same tasks" in out
