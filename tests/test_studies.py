"""Sweeps, ablations, preregistered plans and the benchmark battery, through the real CLI."""

import json

import pytest

from backflip.algos import get_algo
from backflip.config import resolve
from backflip.errors import UserError
from backflip.experiments.sweep import (
    ablation_variants,
    auto_values,
    judge,
    parse_vary,
    sweep_variants,
)
from backflip.runs import index

TINY = ["--steps", "2048", "--set", "epochs=1", "--workers", "2", "--no-progress"]


# --- which variants (pure functions) -------------------------------------------------------------


def _flat(**sets):
    return resolve("ppo", "CartPole-v1", [0], 1000, set_values=sets).flat()


def test_auto_tries_a_third_and_three_times_or_the_neighbours():
    spec, flat = get_algo("ppo"), _flat()
    # the CartPole preset: lr 5e-3 (a third, rounded to 1.5e-3, and 3x that), 6 epochs
    assert parse_vary("lr=auto", spec, flat) == ("lr", [0.0015, 0.015], True)
    assert parse_vary("epochs=auto", spec, flat)[1] == [2, 18]
    assert parse_vary("norm_adv=auto", spec, flat)[1] == [False]
    # a discount is scaled on its horizon 1/(1 - gamma): 1 - 0.02 * 0.3, 1 - 0.02 * 3
    assert parse_vary("gamma=auto", spec, flat)[1] == [0.994, 0.94]
    assert parse_vary("hidden=32,32;128,128", spec, flat)[1] == [(32, 32), (128, 128)]
    from typing import Literal

    assert auto_values("mode", "b", Literal["a", "b", "c"]) == ["a", "c"]
    for bad, message in (
        ("ent_coef=auto", "the default is 0"),
        ("hidden=auto", "can't guess"),
        ("lrr=auto", "did you mean lr"),
        ("lr", "--vary expects key=v1,v2"),
        ("epochs=1.5", "is not an integer"),
    ):
        with pytest.raises(UserError, match=message):
            parse_vary(bad, spec, flat)


def test_one_at_a_time_and_grid_variants():
    spec, flat = get_algo("ppo"), _flat()
    varies = [parse_vary("lr=auto", spec, flat), parse_vary("epochs=6,20", spec, flat)]
    one = sweep_variants(varies, flat, grid=False)
    assert [v["label"] for v in one] == ["lr=0.0015", "lr=0.015", "epochs=20"]  # 6 is default
    grid = sweep_variants(varies, flat, grid=True)
    # 3 lr values (auto keeps the default in a grid) x 2 epochs, minus the default itself
    assert len(grid) == 5 and all(v["key"] == "grid" for v in grid)
    assert {"lr": 0.005, "epochs": 20} in [v["overrides"] for v in grid]


def test_ablation_switches_map_to_settings_and_refuse_what_is_already_off():
    spec = get_algo("ppo")
    variants = ablation_variants(spec, _flat(), ["adv_norm", "grad_clip"])
    assert [v["overrides"] for v in variants] == [{"norm_adv": False}, {"max_grad_norm": 0.0}]
    with pytest.raises(UserError, match="obs_norm is already off"):
        ablation_variants(spec, _flat(), ["obs_norm"])
    assert ablation_variants(spec, _flat(norm_obs=True), ["obs_norm"])[0]["label"] == "no obs_norm"
    with pytest.raises(UserError, match=r"unknown switch 'adv_nrom'.*did you mean adv_norm"):
        ablation_variants(spec, _flat(), ["adv_nrom"])
    every = {v["key"] for v in ablation_variants(spec, _flat(), ["all"])}
    assert "adv_norm" in every and "obs_norm" not in every  # only what is on can be ablated


def test_judge_flags_a_setting_the_default_beats_as_fragile():
    def study(kind, finals):
        return {
            "kind": kind,
            "base": {"finals": [500.0, 498.0, 500.0, 490.0, 500.0, 497.0]},
            "variants": [{"label": "lr=0.003", "key": "lr", "finals": finals}],
        }

    worse = judge(study("sweep", [20.0, 35.0, 12.0, 80.0, 41.0, 22.0]))["variants"][0]
    assert worse["flag"] == "fragile" and worse["poi"] == 0.0
    assert worse["verdict"].startswith("default beats lr=0.003: P(lr=0.003>default)=0.00")
    same = judge(study("sweep", [499.0, 500.0, 480.0, 500.0, 495.0, 500.0]))["variants"][0]
    assert same["flag"] == "" and same["verdict"].startswith("insufficient evidence")
    assert judge(study("ablate", [20.0, 35.0, 12.0, 80.0, 41.0, 22.0]))["variants"][0]["flag"] == (
        "helps"
    )


# --- through the CLI -----------------------------------------------------------------------------


@pytest.mark.slow
def test_sweep_runs_the_default_and_each_value_with_the_same_seeds(cli, home):
    out = cli(
        "sweep",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "2",
        "--vary",
        "lr=auto",
        "--vary",
        "norm_adv=false",
        *TINY,
    ).stdout
    assert "sweep: 4 runs × 2 seeds of ppo on CartPole-v1" in out
    for label in ("default", "lr=0.0015", "lr=0.015", "norm_adv=False"):
        assert label in out
    assert "fewer than 5, intervals are not trustworthy" in out
    assert "fragile (worse than the default with confidence):" in out
    study_id = out.split("\n")[1].split()[1].rstrip(":")
    study = json.loads((home / "studies" / f"{study_id}.json").read_text())
    assert (home / "studies" / f"{study_id}.png").stat().st_size > 10_000
    assert study["base"]["values"] == {"lr": 0.005, "norm_adv": True}
    runs = index.query(home, tag=f"sweep:{study_id}")
    assert len(runs) == 4 and all(r["n_seeds"] == 2 and r["status"] == "finished" for r in runs)
    configs = {r["id"]: json.loads(r["record"])["config"] for r in runs}
    assert {c["hp"]["lr"] for c in configs.values()} == {0.005, 0.0015, 0.015}
    assert all(c["seeds"] == [0, 1] for c in configs.values())  # common random numbers


@pytest.mark.slow
def test_ablate_reports_each_claim_separately(cli, home):
    proc = cli(
        "ablate",
        "ppo",
        "--env",
        "CartPole-v1",
        "--seeds",
        "2",
        "--switch",
        "adv_norm",
        "--switch",
        "grad_clip",
        "--json",
        *TINY,
    )
    study = json.loads(proc.stdout)
    assert [v["label"] for v in study["variants"]] == ["no adv_norm", "no grad_clip"]
    assert [v["overrides"] for v in study["variants"]] == [
        {"norm_adv": False},
        {"max_grad_norm": 0.0},
    ]
    for v in study["variants"]:
        assert v["summary"]["n"] == 2 and "poi_ci" in v and v["verdict"]
    text = cli("ablate", "ppo", "--env", "CartPole-v1", "--list").stdout
    assert "value_clip: clip_vloss=False" in text
    bad = cli("ablate", "ppo", "--env", "CartPole-v1", "--switch", "obs_norm", check=False)
    assert bad.returncode == 2 and "obs_norm is already off" in bad.stderr
    assert "Traceback" not in bad.stderr


PLAN = """\
name: blind-vs-seeing
question: Does PPO need to see the state to balance the pole?
env: CartPole-v1
steps: 2048
seeds: 3
metric: final_eval_return
configs:
  blind: {algo: ppo, set: {epochs: 1, env.obs_scale: 1.0e-9, env.obs_shift: 1.0}}
  seeing: {algo: ppo, set: {epochs: 1}}
comparisons:
  - [blind, seeing]
success: all
threshold: 100
"""


@pytest.mark.slow
def test_plan_freezes_runs_on_fresh_seeds_reports_everything_and_detects_edits(cli, home, tmp_path):
    # tuning that happened before the plan: seeds 0 and 1 are used on CartPole-v1
    cli("train", "ppo", "--env", "CartPole-v1", "--seeds", "2", *TINY)
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = cli("plan", "create", plan).stdout
    assert "plan blind-vs-seeing frozen: sha256" in out and "seeds [2, 3, 4]" in out
    # an edit before running is caught
    plan.write_text(PLAN.replace("steps: 2048", "steps: 1024"))
    proc = cli("plan", "run", plan, check=False)
    assert proc.returncode == 2 and "edited since it was frozen" in proc.stderr
    plan.write_text(PLAN)

    out = cli("plan", "run", plan, "--workers", "2", "--no-progress").stdout
    reg = json.loads((home / "plans" / "blind-vs-seeing.json").read_text())
    assert out.startswith(f"# plan blind-vs-seeing — sha256 {reg['hash']}")
    assert "every run, every seed (nothing excluded):" in out
    seed_lines = [x for x in out.splitlines() if x.strip().startswith("seed 2:")]
    assert len(seed_lines) == 2  # one line per config, listing every seed
    for name in ("blind", "seeing"):
        c = reg["report"]["configs"][name]
        assert [s["seed"] for s in c["seeds"]] == [2, 3, 4] and c["summary"]["n"] == 3
    assert "comparison blind vs seeing:" in out and "success criterion" in out
    assert "reached 100:" in out
    tagged = index.query(home, tag="plan:blind-vs-seeing")
    assert len(tagged) == 2 and all(r["n_seeds"] == 3 for r in tagged)
    assert (home / "plans" / "blind-vs-seeing.report.md").read_text().startswith("# plan")

    again = cli("plan", "run", plan).stdout
    assert "already ran; nothing was run again" in again
    assert len(index.query(home, tag="plan:blind-vs-seeing")) == 2

    plan.write_text(PLAN.replace("seeds: 3", "seeds: 30"))  # moving the goalposts afterwards
    proc = cli("plan", "run", plan, check=False)
    assert proc.returncode == 2 and "EDITED after it ran" in proc.stderr
    shown = cli("plan", "show", "blind-vs-seeing").stdout
    assert "WARNING: EDITED after it ran" in shown
    proc = cli("plan", "create", plan, check=False)
    assert proc.returncode == 2 and "needs a new name" in proc.stderr


def test_plan_rejects_a_malformed_file_in_one_line(cli, tmp_path):
    plan = tmp_path / "bad.yaml"
    plan.write_text(PLAN.replace("  - [blind, seeing]", "  - [blind, hearing]"))
    proc = cli("plan", "create", plan, check=False)
    assert proc.returncode == 2 and "comparison ['blind', 'hearing']" in proc.stderr
    plan.write_text(PLAN.replace("algo: ppo, set: {epochs: 1}}", "algo: ppo, set: {lrr: 1}}"))
    proc = cli("plan", "create", plan, check=False)
    assert proc.returncode == 2 and "plan config 'seeing'" in proc.stderr
    assert "Traceback" not in proc.stderr


PLAN_ENVS = """\
name: lr-two-envs
question: Does a tenfold learning rate help PPO across CartPole-v1 and Acrobot-v1?
env: [CartPole-v1, Acrobot-v1]
steps: 2048
seeds: 2
configs:
  base: {algo: ppo, set: {epochs: 1}}
  fast: {algo: ppo, set: {epochs: 1, lr: 1.0e-2}}
comparisons:
  - [base, fast]
"""


@pytest.mark.slow
def test_a_plan_across_envs_is_judged_on_normalized_scores(cli, home, tmp_path):
    from backflip.references import normalize

    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN_ENVS)
    cli("plan", "create", plan)
    out = cli("plan", "run", plan, "--workers", "2", "--no-progress", "--format", "pdf").stdout
    reg = json.loads((home / "plans" / "lr-two-envs.json").read_text())
    runs = reg["report"]["configs"]
    assert set(runs) == {
        f"{c}@{e}" for c in ("base", "fast") for e in ("CartPole-v1", "Acrobot-v1")
    }
    across = reg["report"]["across_envs"]["base"]
    assert across["envs"] == ["Acrobot-v1", "CartPole-v1"]
    for env, task in zip(across["envs"], across["tasks"], strict=True):
        raw = [s["score"] for s in runs[f"base@{env}"]["seeds"]]
        assert task == pytest.approx(normalize(env, raw))
    (comparison,) = reg["report"]["comparisons"]
    assert comparison["tasks"] == 2 and "2 tasks, normalized scores" in comparison["verdict"]
    assert "across envs, normalized" in out and "optimality gap" in out
    assert f"plot: {home / 'plans' / 'lr-two-envs.pdf'}" in out
    assert (home / "plans" / "lr-two-envs.pdf").read_bytes().startswith(b"%PDF")
    shown = cli("plan", "show", "lr-two-envs", "--plot", tmp_path / "plan.svg").stdout
    assert f"plot: {tmp_path / 'plan.svg'}" in shown and (tmp_path / "plan.svg").exists()


def test_a_plan_across_envs_needs_reference_scores_for_each(cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN_ENVS.replace("Acrobot-v1]", "Blackjack-v1]"))
    proc = cli("plan", "create", plan, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no reference scores for Blackjack-v1" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
