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


def test_seeds_logged_at_different_steps_take_their_last_value_not_an_interpolation():
    a = (np.array([0, 10, 20]), np.array([0.0, 1.0, 2.0]))
    b = (np.array([5, 15]), np.array([5.0, 6.0]))
    agg = aggregate_curves([a, b], points=100, per_seed=True)
    assert agg["step"] == [0, 5, 10, 15, 20]  # few steps: every one of them
    assert agg["values"][0] == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert agg["values"][1] == [None, 5.0, 5.0, 6.0, None]  # nothing before or after its range
    assert agg["n"] == [1, 2, 2, 2, 1]
    assert on_grid([a], np.array([12]))[0].tolist() == [1.0]
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
