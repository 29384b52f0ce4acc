"""The runs index stays fast with a big archive (benchmarks/ui_index.py prints the figures)."""

from __future__ import annotations

import importlib.util
import statistics

import pytest

from tests.conftest import ROOT

pytest.importorskip("flask")


def _benchmark():
    spec = importlib.util.spec_from_file_location("ui_index", ROOT / "benchmarks" / "ui_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # ~30 s: building 1,000 archived runs dominates
def test_index_with_1000_runs_is_served_in_under_300_ms(tmp_path):
    bench = _benchmark()
    home = tmp_path / "archive"
    bench.make_archive(home, 1000)
    server, port = bench.serve_in_thread(home)
    try:
        times, size = bench.measure(port, "/", 15)
    finally:
        server.shutdown()
    assert size > 500_000  # every one of the 1,000 rows is in the page
    assert statistics.median(times) < 300, times
