"""The UI's data layer: curves and verdicts come from `backflip.curves` and `backflip.stats` (the
same as `backflip compare`'s), live progress, artifact paths."""

from __future__ import annotations

import os

import numpy as np
import pytest

from backflip import stats
from backflip.curves import aggregate_curves, on_grid
from backflip.ui import data
from backflip.ui.app import is_loopback, safe_artifact


def test_the_ui_has_no_statistics_of_its_own():
    """One answer per question: the UI once had its own verdict (2,000 resamples, its own words)
    and its own curve alignment (linear interpolation), and could disagree with `compare`."""
    for name in ("verdict", "align", "iqm_band", "final_scores", "curve"):
        assert not hasattr(data, name), f"backflip.ui.data.{name} duplicates stats/curves"


def test_curve_band_matches_stats_on_random_data():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(5, 30))
    steps = np.arange(30) * 10
    agg = aggregate_curves([(steps, row) for row in m], points=30)
    assert agg["step"] == steps.tolist()
    for j in range(8):
        assert agg["iqm"][j] == pytest.approx(stats.iqm(m[:, j]))
        lo, hi = stats.bootstrap_ci(m[:, j])
        assert agg["low"][j] == pytest.approx(lo, abs=0.35)
        assert agg["high"][j] == pytest.approx(hi, abs=0.35)
        assert agg["low"][j] <= agg["iqm"][j] <= agg["high"][j]


def test_seeds_logged_at_different_steps_are_interpolated_within_their_own_range():
    """One alignment rule (curves.on_grid), linear between logged points: the UI once had its own
    and could disagree with `compare`; now the UI, compare and the plots share this one."""
    a = (np.array([0, 10, 20]), np.array([0.0, 1.0, 2.0]))
    b = (np.array([5, 15]), np.array([5.0, 6.0]))
    agg = aggregate_curves([a, b], points=100, per_seed=True)
    assert agg["step"] == [0, 5, 10, 15, 20]  # few steps: every one of them
    assert agg["values"][0] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert agg["values"][1] == [None, 5.0, 5.5, 6.0, None]  # nothing before or after its range
    assert agg["n"] == [1, 2, 2, 2, 1]
    assert on_grid([a], np.array([12]))[0].tolist() == [pytest.approx(1.2)]
    # after its last logged point, a seed that went on keeps its last value up to where it ended
    assert on_grid([(a[0], a[1], 30)], np.array([25, 30, 31]))[0].tolist()[:2] == [2.0, 2.0]
    assert np.isnan(on_grid([(a[0], a[1], 30)], np.array([31]))[0, 0])
    # a non-finite point makes its neighbouring intervals unknown, never a made-up number
    c = (np.array([0, 10, 20]), np.array([0.0, np.nan, 2.0]))
    assert np.isnan(on_grid([c], np.array([5, 10, 15]))).all()
    assert on_grid([c], np.array([0, 20]))[0].tolist() == [0.0, 2.0]
    # long series: `points` evenly spaced steps
    steps = np.arange(10_000)
    agg = aggregate_curves([(steps, steps.astype(float))], points=100)
    assert len(agg["step"]) == 100 and agg["iqm"] == [float(s) for s in agg["step"]]
    assert agg["no_interval"] == "no interval: 1 seed" and set(agg["low"]) == {None}


def test_verdict_states_the_numbers_and_refuses_thin_evidence():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 10, 10).tolist(), rng.normal(150, 10, 10).tolist()
    cmp = stats.compare_pair(a, b)
    v = stats.verdict("A", "B", cmp)
    assert stats.winner(cmp) == "b" and v.startswith("B beats A: P(B>A)=1.00")
    assert "Welch p=" in v and "10 seeds each" in v
    assert cmp["poi_ci"][0] > 0.5 and cmp["welch"]["p"] < 1e-6
    assert stats.verdict("B", "A", stats.compare_pair(b, a)).startswith("B beats A")
    same = stats.compare_pair(a, rng.normal(100, 10, 10).tolist())
    assert stats.winner(same) is None
    assert stats.verdict("A", "C", same).startswith("insufficient evidence")
    thin = stats.compare_pair([1.0], [2.0, 3.0])
    assert stats.winner(thin) is None
    assert "[no interval: 1 seed]" in stats.verdict("A", "B", thin)
    few = stats.summarize([1.0, 1.1, 0.9])
    assert few["n"] == 3 and not few["trustworthy"]


def test_safe_artifact_stays_inside_the_archive(tmp_path):
    home = tmp_path / "home"
    run = home / "run1"
    (run / "seeds" / "0").mkdir(parents=True)
    (run / "seeds" / "0" / "ok.log").write_text("fine")
    (tmp_path / "outside.txt").write_text("secret")
    os.symlink(tmp_path / "outside.txt", run / "link.txt")
    os.symlink(run / "seeds" / "0" / "ok.log", run / "inside-link.log")
    assert safe_artifact(home, run, "seeds/0/ok.log") == (run / "seeds/0/ok.log").resolve()
    assert safe_artifact(home, run, "inside-link.log") is not None  # a link within the archive
    for bad in (
        "../outside.txt",
        "../../outside.txt",
        "/etc/passwd",
        "link.txt",
        "seeds/../../x",
        "seeds\\..\\..\\outside.txt",
        "seeds/0/ok.log\x00",
        "",
        "seeds//0/ok.log",
        "seeds",
    ):
        assert safe_artifact(home, run, bad) is None, bad


def test_loopback_detection():
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.org", ""):
        assert not is_loopback(host), host


def test_live_progress_reads_the_last_complete_row_of_a_growing_file(tmp_path):
    from backflip.ui.data import last_metrics_row

    path = tmp_path / "metrics.csv"
    rows = ["step,wall,name,value"]
    for step in (256, 512):
        rows += [f"{step},1.0,time/sps,{step * 2}.0", f"{step},1.0,time/wall_s,{step / 100}"]
    path.write_text("\n".join(rows) + "\n768,1.0,time/sps,99.0\n768,1.0,time/wa")  # mid-write
    step, row = last_metrics_row(path)
    assert step == 512 and row == {"time/sps": 1024.0, "time/wall_s": 5.12}
    assert last_metrics_row(tmp_path / "missing.csv") == (0, {})


def test_a_preference_run_shows_its_true_return_first_and_labels_the_learned_reward(tmp_path):
    """A preference run trains on r̂: its page (and its static report) opens on the task's
    return and the reward model, and every chart of r̂ says it is the learned reward."""
    import json
    import re

    from backflip.report import write_report
    from backflip.returns import LEARNED_NOTE
    from backflip.runs.archive import write_json
    from backflip.runs.layout import seed_dir
    from backflip.ui.data import run_curves, run_detail, seed_progress
    from tests.prefs_runs import write_preference_run

    home = tmp_path / "archive"
    home.mkdir()
    rng = np.random.default_rng(0)
    run_dir = write_preference_run(
        home, np.linspace(42, 97, 50), rng.normal(40, 25, 100), seeds=(0, 1)
    )
    c = run_curves(run_dir)
    assert c["preference"]
    assert c["names"][:7] == [
        "prefs/true_return_mean",
        "eval/return_mean",
        "reward_model/val_acc",
        "reward_model/segment_corr",
        "reward_model/return_corr",
        "prefs/labels",
        "prefs/label_debt",
    ]
    first, *rest = c["groups"]
    assert first["key"] == "preferences" and first["names"] == c["names"][: len(first["names"])]
    assert {n for n in c["names"] if n.startswith(("prefs/", "reward_model/"))} <= set(
        first["names"]
    )
    assert [n for g in c["groups"] for n in g["names"]] == c["names"]
    assert not [n for g in rest for n in g["names"] if n.startswith(("prefs/", "reward_model/"))]
    learned = [n for n in c["names"] if n.startswith(("rollout/ep_return_", "env/reward_"))]
    assert "rollout/ep_return_mean" in learned and "env/reward_max" in learned
    assert all(c["notes"][n] == LEARNED_NOTE for n in learned)
    assert c["notes"]["prefs/true_return_mean"].startswith("true return")
    assert c["notes"]["eval/return_mean"].startswith("true return")
    assert "train/entropy_norm" not in c["notes"]

    # the seeds table's recent return is the true one, also when the last row lacks it
    status = seed_dir(run_dir, 0) / "status.json"
    write_json(status, {"seed": 0, "status": "running", "started": "2026-01-01T00:00:00+00:00"})
    with open(seed_dir(run_dir, 0) / "metrics.csv", "a") as f:
        f.write("300000,1.0,rollout/ep_return_mean,-50.0\n300000,1.0,time/wall_s,9.0\n")
    live = seed_progress(run_dir, 0, run_detail(run_dir)["progress"]["return_metric"])
    assert live["steps"] == 300_000 and live["ret"] == 97.0

    # the static report: the same page, its curves embedded
    index = write_report([run_dir], tmp_path / "report")
    page = (index.parent / "runs" / f"{run_dir.name}.html").read_text()
    assert "recent true return" in page and 'id="preference-note"' in page
    boot = json.loads(re.search(r'<script type="application/json" id="boot">(.*?)</script>',
                                page, re.S).group(1))  # fmt: skip
    assert boot["curves"]["names"] == c["names"] and boot["curves"]["notes"] == c["notes"]


def test_an_ordinary_run_keeps_its_groups_and_has_no_notes(tmp_path):
    from backflip.runs.layout import seed_dir
    from backflip.runs.records import create_run
    from backflip.telemetry import Telemetry
    from backflip.ui.data import run_curves, run_detail

    home = tmp_path / "archive"
    home.mkdir()
    config = {"algo": "ppo", "env_id": "CartPole-v1", "seeds": [0], "steps": 3000}
    run_dir, _ = create_run(home, config, ["backflip", "train", "ppo"])
    tel = Telemetry(seed_dir(run_dir, 0), tensorboard=False)
    for step in (1000, 2000, 3000):
        tel.episode(step, step / 100, 20)
        tel.log(**{"train/approx_kl": 0.01, "eval/return_mean": step / 10})
        tel.dump(step)
    tel.close()
    c = run_curves(run_dir)
    assert not c["preference"] and c["notes"] == {} and not run_detail(run_dir)["preference"]
    assert c["names"][0] == "eval/return_mean"
    assert [g["key"] for g in c["groups"]][:3] == ["eval", "rollout", "train"]
    assert [g["title"] for g in c["groups"]][:2] == ["eval/", "rollout/"]


def test_the_return_curve_of_a_preference_run_is_the_true_return(home):
    # compare, diff, plots and the report take "return" from curves.py: on a preference run its
    # episodes.csv holds the learned reward's returns (flat here), not the task's (rising)
    from backflip.curves import run_curve
    from tests.prefs_runs import write_preference_run

    run_dir = write_preference_run(home, np.linspace(42, 97, 20), np.full(200, 5.0))
    curve = run_curve(run_dir)
    assert curve["seeds"] == [0]
    values = [v for v in curve["iqm"] if v is not None]
    assert values[0] < 50 and values[-1] > 90
