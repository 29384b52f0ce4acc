"""`backflip bench`: a battery of tagged runs, compared with the previous one; regressions flagged."""

import json

import pytest

from backflip import stats
from backflip.errors import UserError
from backflip.experiments.bench import judge, reference_pairs, update_docs
from backflip.runs import index
from tests.conftest import ROOT


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
    common = ["--quick", "--only", "ppo:CartPole-v1", "--workers", "2"]
    first = cli("bench", *common, "--docs", doc, "--no-progress")
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


def _battery(bid: str, mode: str, pairs: dict) -> dict:
    """A battery as run_battery returns it, {(algo, env): IQM} for its entries."""
    return {
        "id": bid, "mode": mode, "seeds": 5, "commit": "abc", "dirty": False, "wall_s": 12.0,
        "entries": [
            {
                "algo": a, "env": e, "steps": 10_000, "sps": 1000.0, "previous": None,
                "summary": {"n": 5, "iqm": iqm, "ci_low": iqm - 1, "ci_high": iqm + 1},
                "judgement": {"status": "new"},
            }
            for (a, e), iqm in pairs.items()
        ],
    }  # fmt: skip


def _rows(text: str, mode: str) -> dict:
    section = text.split(f"bench {mode}: begin")[1].split(f"bench {mode}: end")[0]
    return {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| algo")
    }


def test_a_partial_battery_replaces_only_its_rows(tmp_path):
    """The page as it is in the repository (11 rows per mode): a battery of one pair changes
    that row alone, and says which battery each row comes from."""
    doc = tmp_path / "benchmarks.md"
    doc.write_text((ROOT / "docs" / "benchmarks.md").read_text())
    before = _rows(doc.read_text(), "quick")
    assert len(before) == 11
    update_docs(
        doc, _battery("20261125-000000-cccc", "quick", {("cem", "CartPole-v1"): 321.0}), "cpu"
    )
    text = doc.read_text()
    after = _rows(text, "quick")
    assert after.keys() == before.keys()
    assert "| 321.0 [320.0, 322.0] |" in after[("cem", "CartPole-v1")]
    assert after[("cem", "CartPole-v1")].endswith("| 20261125-000000-cccc |")
    for key, line in before.items():
        if key != ("cem", "CartPole-v1"):  # the same numbers, now naming their battery
            assert after[key].startswith(line.rstrip()) and after[key] != line, key
    assert "- Battery 20261125-000000-cccc, 5 seeds per pair, commit abc, 12 s on cpu." in text
    assert _rows(text, "full") == _rows((ROOT / "docs" / "benchmarks.md").read_text(), "full")
    # a second partial battery: both batteries' rows stay, each described once
    update_docs(
        doc, _battery("20261125-000001-dddd", "quick", {("dqn", "CartPole-v1"): 7.0}), "cpu"
    )
    text = doc.read_text()
    assert len(_rows(text, "quick")) == 11
    assert text.count("- Battery 20261125-000000-cccc") == 1
    assert _rows(text, "quick")[("cem", "CartPole-v1")] == after[("cem", "CartPole-v1")]


def test_bench_writes_no_docs_unless_asked(cli, tmp_path):
    """Run from a folder holding docs/benchmarks.md, a battery without --docs leaves it alone."""
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    page = project / "docs" / "benchmarks.md"
    page.write_text((ROOT / "docs" / "benchmarks.md").read_text())
    proc = cli(
        "bench", "--quick", "--only", "cem:CartPole-v1", "--seeds", "2", "--workers", "2",
        "--no-progress", cwd=project,
    )  # fmt: skip
    assert "| cem | CartPole-v1 | 10,000 | 2/2 |" in proc.stdout and "updated" not in proc.stdout
    assert page.read_text() == (ROOT / "docs" / "benchmarks.md").read_text()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--docs", "{tmp}/page.md", "--set", "lr=1e-3"], "a modified battery is never written"),
        (["--docs", "{tmp}/no/such/folder/page.md"], "does not exist"),
        (["--docs", "{tmp}"], "a directory"),
    ],
)
def test_bad_docs_are_refused_before_the_battery_runs(tmp_path, capsys, args, words):
    from backflip import cli as backflip_cli

    home = tmp_path / "archive"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code = backflip_cli.main(["bench", "--quick", "--only", "cem", *args, "--home", str(home)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert not home.exists() or not any(home.iterdir())


def test_a_baseline_file_is_what_the_battery_is_compared_with(cli, home, tmp_path):
    """`--baseline FILE` (the battery behind docs/benchmarks.md, committed as
    benchmarks/battery_full.json) replaces the archive's latest battery as the comparison; a
    battery far below it is a regression (exit 1). `--write-baseline` writes one that reads back."""
    baseline = {
        "id": "20261101-000000-base", "mode": "quick", "seeds": 5, "overrides": {},
        "commit": "abc", "dirty": False, "wall_s": 1.0,
        "entries": [{
            "algo": "cem", "env": "CartPole-v1", "steps": 10_000, "run": "20261101-000000-cem0",
            "status": "finished", "finals": [1e6] * 5,
            "summary": {"n": 5, "iqm": 1e6, "ci_low": 1e6, "ci_high": 1e6}, "sps": 1.0,
        }],
    }  # fmt: skip
    path = tmp_path / "battery_quick.json"
    path.write_text(json.dumps(baseline))
    out = tmp_path / "new_baseline.json"
    proc = cli(
        "bench", "--quick", "--only", "cem:CartPole-v1", "--seeds", "2", "--workers", "2",
        "--no-progress", "--no-plot", "--baseline", path, "--write-baseline", out, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "compared with battery 20261101-000000-base" in proc.stdout
    assert "REGRESSION" in proc.stdout
    written = json.loads(out.read_text())
    assert written["mode"] == "quick" and "across_envs" not in written
    (entry,) = written["entries"]
    assert entry["algo"] == "cem" and len(entry["finals"]) == 2 and "judgement" not in entry
    from backflip.experiments.bench import read_baseline

    assert read_baseline(out, quick=True)["id"] == written["id"]


def test_the_committed_baseline_is_the_full_battery_of_the_docs():
    from backflip.experiments.bench import read_baseline, reference_pairs

    battery = read_baseline(ROOT / "benchmarks" / "battery_full.json", quick=False)
    assert {(e["algo"], e["env"], e["steps"]) for e in battery["entries"]} == set(reference_pairs())
    assert battery["id"] in (ROOT / "docs" / "benchmarks.md").read_text()


@pytest.mark.parametrize(
    ("content", "quick", "words"),
    [
        (None, True, "no such file"),
        ("not json", True, "not a battery file"),
        ('{"mode": "quick"}', True, "no entries"),
        ('{"mode": "full", "entries": []}', True, "a full battery; this one is quick"),
        ('{"mode": "quick", "entries": [], "overrides": {"lr": 1}}', True, "modified"),
    ],
)
def test_bad_baselines_are_refused_before_the_battery_runs(tmp_path, capsys, content, quick, words):
    from backflip import cli as backflip_cli

    home = tmp_path / "archive"
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    args = ["bench", "--only", "cem", "--baseline", str(path), "--home", str(home)]
    code = backflip_cli.main(args[:1] + ["--quick"] * quick + args[1:])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert not home.exists() or not any(home.iterdir())
