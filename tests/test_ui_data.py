"""The UI's data layer: curves aligned over seeds, the IQM band, verdicts, artifact paths."""

from __future__ import annotations

import os

import numpy as np
import pytest

from backflip import stats
from backflip.ui.app import is_loopback, safe_artifact
from backflip.ui.data import align, iqm_band, verdict


def test_iqm_band_matches_stats_on_random_data():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(5, 30))
    center, low, high = iqm_band(m)
    for j in range(8):
        assert center[j] == pytest.approx(stats.iqm(m[:, j]))
        lo, hi = stats.bootstrap_ci(m[:, j])
        assert low[j] == pytest.approx(lo, abs=0.35) and high[j] == pytest.approx(hi, abs=0.35)
        assert low[j] <= center[j] <= high[j]
    # seeds logged at different steps: union grid, interpolation inside each seed's range only
    grid, vals = align(
        {
            0: (np.array([0, 10, 20]), np.array([0.0, 1.0, 2.0])),
            1: (np.array([5, 15]), np.array([5.0, 6.0])),
        }
    )
    assert grid.tolist() == [0, 5, 10, 15, 20]
    assert vals[0].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert (
        np.isnan(vals[1][0]) and vals[1][1:4].tolist() == [5.0, 5.5, 6.0] and np.isnan(vals[1][4])
    )
    # long series become buckets of means
    steps = np.arange(10_000)
    grid, vals = align({0: (steps, steps.astype(float))}, max_points=100)
    assert len(grid) == 100 and np.allclose(vals[0], grid, atol=1)


def test_verdict_states_the_numbers_and_refuses_thin_evidence():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 10, 10).tolist(), rng.normal(150, 10, 10).tolist()
    v = verdict(a, b, "A", "B")
    assert v["decided"] and v["text"].startswith("B beats A: P(B>A)=1.00")
    assert "Welch p=" in v["text"] and "10 and 10 seeds" in v["text"]
    assert v["p_low"] > 0.5 and v["welch_p"] < 1e-6
    v = verdict(b, a, "B", "A")
    assert v["decided"] and v["text"].startswith("B beats A")
    same = verdict(a, rng.normal(100, 10, 10).tolist(), "A", "C")
    assert not same["decided"] and same["text"].startswith("insufficient evidence")
    thin = verdict([1.0], [2.0, 3.0], "A", "B")
    assert not thin["decided"] and "at least 2 finished seeds" in thin["text"]
    few = verdict([1.0, 1.1, 0.9], [5.0, 5.1, 4.9], "A", "B")
    assert "fewer than 5 seeds" in few["text"]


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
