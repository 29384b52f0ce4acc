"""Strict JSON everywhere, intervals that say why they are missing, and verdicts only between
scores that measure the same thing — on real one-seed runs, through the CLI, the UI's data and
pages, and a static report.

A one-seed run is the hard case: its intervals don't exist (NaN inside `stats`), and NaN once
reached run.json, `--json` output and the pages' embedded data, where the browser's `JSON.parse`
failed on it and every chart stayed blank.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from backflip.cli import main
from tests.conftest import strict_json
from tests.ui.support import backflip

ONE = ["--seeds", "1", "--steps", "1024", "--set", "epochs=1", "--set", "eval_episodes=2"]
ONE += ["--no-progress"]
BOOT = re.compile(r'<script type="application/json" id="boot">(.*?)</script>', re.S)
NAN = re.compile(r"\bnan\b|\binf\b", re.I)


def test_jsonout_writes_null_for_every_non_finite_float():
    from backflip import jsonout

    data = {
        "nan": float("nan"),
        "inf": [float("inf"), -float("inf")],
        "numpy": np.array([1.0, np.nan]),
        "f32": np.float32("nan"),
        "i64": np.int64(3),
        "nested": ({"x": (1.5, float("nan"))},),
    }
    text = jsonout.dumps(data, indent=2)
    assert strict_json(text) == {
        "nan": None,
        "inf": [None, None],
        "numpy": [1.0, None],
        "f32": None,
        "i64": 3,
        "nested": [{"x": [1.5, None]}],
    }
    assert strict_json(jsonout.dumps({"ok": [1.0, 2]})) == {"ok": [1.0, 2]}


class Reader:
    """The read-only commands (show, compare, ...) in this process: no interpreter start each."""

    def __init__(self, home, capsys):
        self.home, self.capsys = home, capsys

    def __call__(self, *args, code: int = 0) -> str:
        self.capsys.readouterr()
        assert main([*map(str, args), "--home", str(self.home)]) == code
        out, err = self.capsys.readouterr()
        return out if code == 0 else err


def _run_id(text: str) -> str:
    return re.search(r"run (\d{8}-\d{6}-[0-9a-f]{4})", text).group(1)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One-seed PPO runs: A and B on CartPole-v1, C on Acrobot-v1, D on CartPole-v1 with its
    rewards ×10 (so its evaluation returns are on another scale)."""
    home = tmp_path_factory.mktemp("one-seed") / "archive"
    home.mkdir()
    train = ["train", "ppo", *ONE]
    a = backflip(home, *train, "--env", "CartPole-v1", "-m", "a", "--json")
    b = backflip(home, *train, "--env", "CartPole-v1", "--set", "lr=1e-3", "-m", "b")
    c = backflip(home, *train, "--env", "Acrobot-v1", "-m", "c")
    d = backflip(home, *train, "--env", "CartPole-v1", "--set", "env.reward_scale=10", "-m", "d")
    return {
        "home": home,
        "a_json": a.stdout,
        "a": _run_id(a.stderr),
        "b": _run_id(b.stdout),
        "c": _run_id(c.stdout),
        "d": _run_id(d.stdout),
    }


def test_every_json_file_and_json_output_is_strict(lab, capsys):
    home, a, b = lab["home"], lab["a"], lab["b"]
    read = Reader(home, capsys)
    record = strict_json(lab["a_json"])  # `train --json`
    assert record["results"]["n"] == 1 and record["results"]["ci_low"] is None
    files = sorted(home.rglob("*.json"))
    names = {f.name for f in files}
    assert {"run.json", "status.json", "findings.json"} <= names, names
    for f in files:
        strict_json(f.read_text())
    assert strict_json((home / a / "run.json").read_text())["results"]["ci_high"] is None
    for args in (
        ("show", a, "--json"),
        ("runs", "--json"),
        ("doctor", a, "--json"),
        ("compare", a, b, "--json", "--no-plot"),
        ("diff", a, b, "--json"),
    ):
        strict_json(read(*args))


def test_one_seed_intervals_say_so_instead_of_nan(lab, capsys):
    home, a, b = lab["home"], lab["a"], lab["b"]
    read = Reader(home, capsys)
    shown = read("show", a)
    assert re.search(r"IQM [\d.,]+ \[no interval: 1 seed\], mean", shown), shown
    assert not NAN.search(shown)
    out = read("compare", a, b, "--no-plot")
    assert not NAN.search(out), out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert re.match(
        r"verdict: insufficient evidence that A and B differ: "
        r"P\(B>A\)=[\d.]+ \[no interval: 1 seed\], Welch p=n/a, 1 seed each$",
        verdict,
    ), verdict
    assert "[no interval: 1 seed]" in out.splitlines()[1]  # the table's IQM column


def test_the_ui_and_the_report_serve_strict_json_with_one_seed(lab, tmp_path, capsys):
    pytest.importorskip("flask")
    from backflip.ui.app import create_app

    home, a, b = lab["home"], lab["a"], lab["b"]
    client = create_app(home).test_client()
    for url in (
        "/api/runs",
        f"/api/progress?ids={a},{b}",
        f"/api/runs/{a}/progress",
        f"/api/runs/{a}/curves",
        f"/api/runs/{a}/findings",
    ):
        resp = client.get(url)
        assert resp.status_code == 200, url
        strict_json(resp.get_data(as_text=True))
    progress = strict_json(client.get(f"/api/progress?ids={a}").get_data(as_text=True))
    assert progress["runs"][0]["interval"] == "[no interval: 1 seed]"
    for url in ("/", f"/runs/{a}", f"/compare?ids={a},{b}", f"/compare?ids={a}"):
        page = client.get(url).get_data(as_text=True)
        strict_json(BOOT.search(page).group(1))
        assert "no interval: 1 seed" in page, url
    boot = strict_json(BOOT.search(client.get(f"/compare?ids={a},{b}").get_data(as_text=True))[1])
    side = boot["compare"]["sides"][0]
    assert (
        side["summary"]["ci_low"] is None and side["curve"]["no_interval"] == "no interval: 1 seed"
    )
    assert len(side["curve"]["step"]) > 1  # a curve to draw

    out = tmp_path / "report"
    Reader(home, capsys)("report", a, b, "--out", out)
    for page in [out / "index.html", *(out / "runs").glob("*.html")]:
        text = page.read_text()
        strict_json(BOOT.search(text).group(1))
        assert "no interval: 1 seed" in text, page.name


def test_compare_across_envs_or_reward_scales_gives_no_verdict_and_says_why(lab, capsys):
    pytest.importorskip("flask")
    from backflip.ui import data
    from backflip.ui.app import create_app

    home, a, c, d = lab["home"], lab["a"], lab["c"], lab["d"]
    read = Reader(home, capsys)
    for other, why in (
        (
            c,
            "A ran on CartPole-v1 and B on Acrobot-v1: returns on different envs are not comparable",
        ),
        (d, "A and B measure their returns differently (env.reward_scale: A 1.0, B 10.0)"),
    ):
        out = read("compare", a, other, "--no-plot")
        assert f"verdict: no verdict for A vs B: {why}" in out, out
        assert "P(B>A)" not in out and "beats" not in out
        report = json.loads(read("compare", a, other, "--json", "--no-plot"))
        (pair,) = report["pairs"]
        assert pair["comparable"] is False and "poi" not in pair and why in pair["verdict"]
        assert any("not comparable" in n for n in report["fairness"])
        # the UI says the same, in the same words
        ui = data.compare(home, [home / a, home / other])
        assert [p["verdict"] for p in ui["pairs"]] == [pair["verdict"]]
        page = create_app(home).test_client().get(f"/compare?ids={a},{other}")
        assert why in page.get_data(as_text=True).replace("&#39;", "'")


def test_compare_refuses_a_curve_metric_not_every_run_logged(lab):
    home, a, b = lab["home"], lab["a"], lab["b"]
    proc = backflip(home, "compare", a, b, "--metric", "train/nope", "--no-plot", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: metric 'train/nope' is not logged by A (")
    assert len(proc.stderr.strip().splitlines()) == 1
