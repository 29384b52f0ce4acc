"""`backflip bench`: a battery of tagged runs, compared with the previous one; regressions flagged."""

import json

import pytest

from backflip import stats
from backflip.errors import UserError
from backflip.experiments.bench import judge, reference_pairs, update_docs
from backflip.runs import index


def test_every_registered_algorithm_has_reference_envs():
    from backflip.algos import ALGOS

    pairs = reference_pairs()
    assert {a for a, _, _ in pairs} == set(ALGOS)
    assert ("ppo", "CartPole-v1", 100_000) in pairs
    assert not [p for p in pairs if p[1].startswith("backflip/Probe")]  # probe presets: no bench
    assert reference_pairs(["ppo:CartPole-v1"]) == [("ppo", "CartPole-v1", 100_000)]
    with pytest.raises(UserError, match="not in the battery"):
        reference_pairs(["ppo:MountainCar-v0"])


def test_regression_rule():
    good = [500.0, 500.0, 497.0, 500.0, 488.0]
    assert judge(good, [21.0, 35.0, 9.0, 60.0, 12.0])["status"] == "REGRESSION"
    assert judge([21.0, 35.0, 9.0, 60.0, 12.0], good)["status"] == "improved"
    assert judge(good, [500.0, 499.0, 500.0, 480.0, 500.0])["status"] == "same"
    # one bad seed out of five is not a regression by itself
    assert judge(good, [500.0, 500.0, 500.0, 490.0, 150.0])["status"] == "same"


def test_docs_section_is_replaced_not_appended(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nhand-written notes\n")
    battery = {
        "id": "20261122-000000-aaaa",
        "mode": "quick",
        "seeds": 5,
        "commit": "abc",
        "dirty": False,
        "wall_s": 12.0,
        "entries": [],
    }
    update_docs(doc, battery, "test cpu")
    update_docs(doc, {**battery, "id": "20261122-000001-bbbb"}, "test cpu")
    text = doc.read_text()
    assert "hand-written notes" in text and text.count("bench quick: begin") == 1
    assert "20261122-000001-bbbb" in text and "20261122-000000-aaaa" not in text


@pytest.mark.slow
def test_a_broken_change_is_caught_as_a_regression(cli, home, tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    common = ["--quick", "--only", "ppo:CartPole-v1", "--docs", doc, "--workers", "2"]
    first = cli("bench", *common, "--no-progress")
    assert "no previous battery to compare" in first.stdout and "no regression" in first.stdout
    assert f"updated {doc}" in first.stdout and "| ppo | CartPole-v1 | 10,000 | 5/5 |" in (
        doc.read_text()
    )
    # across envs on normalized scores (one env here), with rliable's figure in the archive
    assert "across envs, normalized" in first.stdout and "| ppo | CartPole-v1 | 5 |" in first.stdout
    (plot,) = (home / "bench").glob("*.png")
    assert f"plot: {plot}" in first.stdout
    (saved,) = [json.loads(p.read_text()) for p in (home / "bench").glob("*.json")]
    (ppo,) = saved["across_envs"]["algos"]
    from backflip.references import normalize

    want = stats.iqm(normalize("CartPole-v1", [x for x in saved["entries"][0]["finals"]]))
    assert ppo["summary"]["iqm"] == pytest.approx(want)
    assert ppo["profile"]["fraction"][-1] == 0.0 and ppo["curve"]["x"] == "steps"
    # a "code change" that breaks learning: the policy no longer sees the state
    broken = cli(
        "bench",
        *common,
        "--no-plot",
        "--set",
        "env.obs_scale=1e-9",
        "--set",
        "env.obs_shift=1",
        "--json",
        check=False,
    )
    assert broken.returncode == 1
    battery = json.loads(broken.stdout)
    entry = battery["entries"][0]
    assert battery["regressions"] == ["ppo:CartPole-v1"]
    assert entry["judgement"]["poi_old_new"] > 0.75 and entry["judgement"]["poi_ci"][0] > 0.5
    assert "MODIFIED" not in doc.read_text()  # a what-if battery never touches the docs
    runs = index.query(home, tag="bench")
    assert len(runs) == 2 and all(r["n_seeds"] == 5 for r in runs)
    assert len(index.query(home, tag=f"bench:{battery['id']}")) == 1
