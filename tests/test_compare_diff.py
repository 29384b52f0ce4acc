"""`backflip compare` and `backflip diff` on real archived runs."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_env

TINY = ["--steps", "8192", "--workers", "2", "--no-progress"]


def _cli(home, *args, check=True, cwd=ROOT):
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(home),
        cwd=cwd,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"backflip {args} exited {proc.returncode}\n{proc.stderr}")
    return proc


def _run_id(proc) -> str:
    return proc.stdout.split()[1].rstrip(":")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A: PPO that sees only zeros (it can't balance); B: PPO as it ships; C: A run again."""
    home = tmp_path_factory.mktemp("lab")
    train = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "5", *TINY]
    blind = ["--set", "env.obs_scale=1e-9", "--set", "env.obs_shift=1", "--set", "epochs=1"]
    a = _run_id(_cli(home, *train, *blind, "-m", "blind agent"))
    b = _run_id(_cli(home, *train, "-m", "as shipped"))
    c = _run_id(_cli(home, "rerun", a, "--workers", "2", "--no-progress"))
    return home, a, b, c


def _non_blank_png(path):
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    assert img[..., :3].std() > 0.05, "blank image"


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_compare_says_who_wins_with_the_numbers_and_the_fairness_facts(lab, tmp_path):
    home, a, b, _ = lab
    png = tmp_path / "cmp.png"
    out = _cli(home, "compare", a, b, "--plot", png).stdout
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: B beats A: P(B>A)=1.00 [1.00, 1.00], Welch p=")
    assert verdict.endswith("5 seeds each")
    assert "A: blind agent" in out and "B: as shipped" in out
    assert "same env, step budget and parameter count" in out
    _non_blank_png(png)

    report = json.loads(_cli(home, "compare", a, b, "--json", "--no-plot").stdout)
    side_a, side_b = report["sides"]
    assert side_a["params"] == side_b["params"] == 9155  # two 4-64-64 MLPs with 2 and 1 outputs
    assert side_a["step_budget"] == side_b["step_budget"] == 5 * 8192
    assert (side_a["tuning"]["runs"], side_b["tuning"]["runs"]) == (0, 1)
    assert side_b["summary"]["ci_low"] > side_a["summary"]["ci_high"]
    pair = report["pairs"][0]
    assert pair["poi"] == 1.0 and pair["welch"]["p"] < 0.05  # what the verdict requires
    curve = side_b["curve"]
    assert len(curve["step"]) == len(curve["iqm"]) == len(curve["low"]) > 50
    assert curve["n"][-1] == 5


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_compare_of_a_run_and_its_rerun_finds_insufficient_evidence(lab):
    home, a, _, c = lab
    out = _cli(home, "compare", a, c, "--no-plot").stdout
    assert "verdict: insufficient evidence that A and B differ: P(B>A)=0.50" in out
    assert "Welch p=1.000" in out


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_compare_rejects_bad_input_in_one_line(lab):
    home, a, _, _ = lab
    for args, message in (
        ((a,), "compare needs at least two runs"),
        ((a, a), "the same run is given twice"),
        ((a, "nope"), "no run 'nope'"),
    ):
        proc = _cli(home, "compare", *args, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_diff_of_a_rerun_finds_nothing_and_metrics_that_never_part(lab):
    home, a, _, c = lab
    report = json.loads(_cli(home, "diff", a, c, "--json").stdout)
    assert report["config"] == [] and report["seeds"]["same"]
    assert report["packages"] == [] and report["host"] == []
    assert all(x.get("same_commit", x.get("same")) for x in report["code"])
    names = {m["metric"] for m in report["metrics"]}
    assert {"return", "train/policy_loss", "eval/return_mean"} <= names
    assert all(m["first_step"] is None for m in report["metrics"]), "same seeds and code"


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_diff_names_the_changed_setting_and_where_metrics_part(lab):
    home, a, b, _ = lab
    out = _cli(home, "diff", a, b).stdout
    assert "hp.epochs: 1 -> 6" in out and "env.obs_shift: 1.0 -> 0.0" in out
    report = json.loads(_cli(home, "diff", a, b, "--json").stdout)
    first = {m["metric"]: m["first_step"] for m in report["metrics"]}
    # what the agent sees differs from the first metrics row (PPO writes one every 1,000 steps:
    # at step 1,024 with 256-step iterations); the result follows
    assert first["env/obs_std_max"] == 1024 and first["train/epochs"] == 1024
    assert first["eval/return_mean"] == 8192 and first["train/lr"] is None


def test_diff_shows_code_changes_between_commits_and_uncommitted_patches(tmp_path):
    home = tmp_path / "archive"
    repo = tmp_path / "project"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (repo / "reward.py").write_text("SCALE = 1.0\n")
    git("add", ".")
    git("commit", "-qm", "first")
    train = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "512"]
    train += ["--set", "epochs=1"]
    a = _run_id(_cli(home, *train, "--no-progress", cwd=repo))
    (repo / "reward.py").write_text("SCALE = 0.1\n")
    git("commit", "-qam", "second")
    (repo / "notes.txt").write_text("an uncommitted file\n")
    b = _run_id(_cli(home, *train, "--no-progress", cwd=repo))
    report = json.loads(_cli(home, "diff", a, b, "--json").stdout)
    code = next(c for c in report["code"] if c["repo"] == "launching repository")
    assert not code["same_commit"] and "reward.py" in code["commit_diff_stat"]
    assert "-SCALE = 1.0" in code["commit_diff"] and "+SCALE = 0.1" in code["commit_diff"]
    assert not code["same_patch"] and "an uncommitted file" in code["patch_diff"]
    text = _cli(home, "diff", a, b).stdout
    assert "launching repository: commit" in text and "uncommitted patches differ" in text


@pytest.mark.slow  # the lab: 15 seed-runs of 8,192 steps
def test_show_plot_writes_the_seed_curves_and_their_band(lab, tmp_path):
    home, _, b, _ = lab
    png = tmp_path / "run.png"
    out = _cli(home, "show", b, "--plot", png).stdout
    assert f"plot: {png}" in out
    _non_blank_png(png)
    assert "IQM" in out and "per seed:" in out
