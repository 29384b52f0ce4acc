"""`backflip tune`: Optuna studies in the archive (a real journal file), every trial an archived
multi-seed run scored by the low end of its IQM interval, pruning on evaluations, and the best
configuration frozen as a preregistered plan on fresh seeds."""

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.storages.journal import JournalFileBackend, JournalStorage

from backflip import stats
from backflip.cli import main
from backflip.config import resolve
from backflip.errors import UserError
from backflip.experiments import tune
from backflip.runs.archive import load_run, read_json
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env

LR_SPACE = {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}


def _study(home: Path, name: str):
    path = str(home / "tune" / name / "journal.log")
    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(path)))


def test_two_worker_processes_share_one_study_through_its_journal_file(home, tmp_path):
    # lr's default (the preset's 5e-3) is not a choice: no default trial, so the best trial is
    # always a tuned one and the study always ends in a plan
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"lr": {"choices": [3e-4, 1e-3, 2e-2]}}))
    args = ["tune", "ppo", "--env", "CartPole-v1", "--trials", "4", "--study", "duo"]
    args += ["--seeds", "2", "--steps", "2048", "--evals", "1", "--workers", "1"]
    args += ["--space", str(space), "--plan-seeds", "3", "--no-progress"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "backflip", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(home),
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
    study = _study(home, "duo")
    trials = study.get_trials()
    # exactly --trials, numbered once each, although two processes asked for them
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    launchers = set()
    for t in trials:
        record = load_run(home / t.user_attrs["run"])
        launchers.add(record["pid"])
        assert {"tune", "tune:duo", f"trial:{t.number}"} <= set(record["tags"])
        assert record["tune"] == {"study": "duo", "trial": t.number, "pruned_at": None}
        assert record["config"]["hp"]["lr"] == t.params["lr"]
        assert record["config"]["seeds"] == [0, 1]  # the same seeds for every trial
        finals = [s["final_eval_return"] for s in record["seeds"]]
        # the objective: the low end of the final evaluations' IQM interval over seeds
        assert t.value == pytest.approx(stats.summarize(finals)["ci_low"])
        # the one evaluation along the way: its IQM over seeds, at 2048 // 2 steps
        firsts = []
        for seed in (0, 1):
            steps, values = read_metrics(home / record["id"] / "seeds" / str(seed) / "metrics.csv")[
                "eval/return_mean"
            ]
            firsts.append(values[steps < 2048][0])
        assert t.intermediate_values == {1024: pytest.approx(stats.iqm(firsts))}
    assert len(launchers) == 2, "one worker ran every trial"
    # the best configuration, frozen as a plan against the defaults on fresh seeds
    best = study.best_trial
    reg = read_json(home / "plans" / "tune-duo.json")
    assert reg["plan"]["configs"]["tuned"]["set"] == {"lr": best.params["lr"]}
    assert reg["plan"]["configs"]["default"] == {"algo": "ppo"}
    assert reg["plan"]["comparisons"] == [["default", "tuned"]]
    assert len(reg["seeds"]) == 3 and not set(reg["seeds"]) & {0, 1}
    assert not reg["runs"]  # frozen, not run
    assert "backflip plan run" in outs[0][0] + outs[1][0]


def test_a_trial_whose_whole_interval_loses_is_pruned_and_its_seeds_stop(home, tmp_path):
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(LR_SPACE))
    # the prune comes at the second of 7 evaluations, a quarter into the budget: a seed the
    # machine's load let run ahead still has most of its budget left when the stop reaches it
    # (with 3 evaluations, at half the budget, a seed twice as fast as the other had finished)
    steps, seeds, evals = 40_000, [0, 1], 7
    base = resolve("ppo", "CartPole-v1", seeds, steps, None, {})
    types = tune._setting_types("ppo")
    space = tune.check_space(LR_SPACE, "ppo", base.flat(), types, "test")
    spec = tune.spec_of("ppo", "CartPole-v1", steps, seeds, {}, space, evals)
    study, _ = tune.open_study(home, "prune", spec, None)
    every = steps // (evals + 1)
    for lr in (1e-3, 2e-3, 3e-3):  # three completed trials that were far better all along
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr},
                distributions=tune.distributions(space),
                value=1000.0,
                intermediate_values={every * k: 1000.0 for k in range(1, evals + 1)},
            )
        )
    summary = tune.run_worker(
        home,
        "ppo",
        "CartPole-v1",
        4,
        seeds,
        steps,
        {},
        name="prune",
        space_path=str(space_file),
        evals=evals,
        progress=False,
        say=lambda text: None,
    )
    trial = study.get_trials()[3]
    assert trial.state == optuna.trial.TrialState.PRUNED
    # never at the first evaluation: at the second, where the top of its interval (≤ 500, the
    # CartPole maximum) is below the completed trials' median
    assert list(trial.intermediate_values) == [every, 2 * every]
    assert trial.user_attrs["ci_high"][str(2 * every)] < 1000
    record = load_run(home / trial.user_attrs["run"])
    assert record["tune"]["pruned_at"] == 2 * every
    for s in record["seeds"]:  # stopped at an iteration boundary, resumable
        assert s["status"] == "interrupted" and 2 * every <= s["steps"] < steps
    assert summary["counts"] == {"complete": 3, "pruned": 1} and summary["complete"]


def test_the_objective_is_the_low_end_of_the_iqm_interval_and_a_lost_seed_counts_as_the_worst():
    scores = [10.0, 40.0, 20.0, 50.0, 30.0]
    value, summary = tune.objective(scores)
    assert value == summary["ci_low"] == stats.summarize(scores)["ci_low"] < summary["iqm"]
    # a seed without a final evaluation is not dropped: it counts as the trial's lowest score
    value, summary = tune.objective([None, 40.0, 20.0, float("nan"), 30.0])
    assert summary["n"] == 5 and value == stats.summarize([20.0, 40.0, 20.0, 20.0, 30.0])["ci_low"]
    assert tune.objective([None, None]) == (None, {"n": 0})


def test_the_pruner_stops_a_trial_only_when_the_top_of_its_interval_loses():
    pruner = tune.make_pruner(n_startup_trials=2, n_warmup_evals=1)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for v in (100.0, 120.0):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": 0.5}, distributions=dist, value=v,
                intermediate_values={10: v, 20: v},
            )
        )  # fmt: skip
    # IQM 80 (below the median 110) but its interval reaches 130: seed noise, not pruned
    t = study.ask(dist)
    t.report(80.0, 10)
    t.set_user_attr("ci_high", {"10": 200.0, "20": 130.0})
    assert not t.should_prune()  # the first evaluation never prunes
    t.report(80.0, 20)
    assert not t.should_prune()
    # the same IQM whose whole interval is below the median: pruned
    u = study.ask(dist)
    u.set_user_attr("ci_high", {"10": 90.0, "20": 95.0})
    u.report(80.0, 10)
    u.report(80.0, 20)
    assert u.should_prune()
    # with fewer completed trials than n_startup_trials nothing is pruned
    lonely = optuna.create_study(direction="maximize", pruner=pruner)
    w = lonely.ask(dist)
    w.set_user_attr("ci_high", {"20": 0.0})
    w.report(0.0, 10)
    w.report(0.0, 20)
    assert not w.should_prune()


def test_the_default_trial_and_the_search_space_file(tmp_path):
    base = resolve("ppo", "CartPole-v1", [0, 1], 10_000, None, {})
    flat, types = base.flat(), tune._setting_types("ppo")
    # every algorithm's documented space is valid and holds its defaults (trial 0)
    for algo, raw in tune.SPACES.items():
        env = "Pendulum-v1" if algo in ("td3", "ddpg", "sac") else "CartPole-v1"
        cfg = resolve(algo, env, [0, 1], 10_000, None, {})
        space = tune.check_space(raw, algo, cfg.flat(), tune._setting_types(algo), algo)
        assert tune.default_params(space, cfg.flat()) is not None, algo
    space = tune.check_space(
        {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, "hidden": {"choices": [[32], [64, 64]]}},
        "ppo",
        flat,
        types,
        "test",
    )
    assert space["hidden"] == {"choices": ["32", "64,64"]}
    assert tune.default_params(space, flat) == {"lr": flat["lr"], "hidden": "64,64"}
    assert tune.overrides({"hidden": "32", "lr": 0.01}, types) == {"hidden": (32,), "lr": 0.01}
    outside = tune.check_space({"lr": {"low": 1e-2, "high": 1e-1}}, "ppo", flat, types, "t")
    assert tune.default_params(outside, flat) is None
    bad = [
        ({"lrr": {"low": 1, "high": 2}}, "unknown setting 'lrr'"),
        ({"lr": {"low": 2e-3, "high": 1e-3}}, "low must be below high"),
        ({"lr": {"low": 0.0, "high": 1e-3, "log": True}}, "log range needs low > 0"),
        ({"lr": [1, 2]}, "must be {low, high}"),
        ({"activation": {"low": 1, "high": 2}}, "not a number"),
        ({"epochs": {"choices": []}}, "non-empty list"),
        ({"epochs": {"low": 1, "high": "x"}}, "epochs"),
    ]
    for raw, message in bad:
        with pytest.raises(UserError, match=None) as e:
            tune.check_space(raw, "ppo", flat, types, "space.yaml")
        assert message in str(e.value), (raw, str(e.value))


def test_a_worker_with_other_settings_is_refused_and_bad_input_is_one_line(home, capsys):
    base = resolve("ppo", "CartPole-v1", [0, 1], 4096, None, {})
    space = tune.check_space(LR_SPACE, "ppo", base.flat(), tune._setting_types("ppo"), "t")
    tune.open_study(home, "s", tune.spec_of("ppo", "CartPole-v1", 4096, [0, 1], {}, space, 2), None)
    other = tune.spec_of("ppo", "CartPole-v1", 8192, [0, 1], {}, space, 2)
    with pytest.raises(UserError, match="study s was created with other settings \\(steps"):
        tune.open_study(home, "s", other, None)
    bad = home.parent / "bad.yaml"
    bad.write_text("lr: [unclosed")
    cases = [
        (["--trials", "0"], "--trials must be at least 1"),
        (["--trials", "2", "--seeds", "1"], "at least 2 seeds per trial"),
        (["--trials", "2", "--space", str(bad)], "cannot parse search space"),
        (["--trials", "2", "--space", "/nonexistent.yaml"], "search space file not found"),
        (["--trials", "2", "--set", "lr=1e-3"], "--set lr: searched by the study"),
        (["--trials", "2", "--study", "a/b"], "--study 'a/b'"),
        (["--trials", "2", "--evals", "-1"], "--evals must be 0 or more"),
    ]
    for extra, message in cases:
        code = main(["tune", "ppo", "--env", "CartPole-v1", "--home", str(home), *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and message in err, (extra, err)
        assert err.count("\n") == 1
    assert not [p for p in home.iterdir() if p.name[:1].isdigit()]  # no run was created


def test_the_documented_search_spaces_are_the_ones_in_the_code():
    text = (ROOT / "docs" / "experiments.md").read_text()
    section = text.split("## Tuning that respects seeds")[1].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 3:
            for algo in cells[1].replace(" ", "").split(","):
                rows[algo] = cells[2]
    assert set(tune.SPACES) <= set(rows)
    for algo, space in tune.SPACES.items():
        for key, spec in space.items():
            if "choices" in spec:
                words = f"`{key}` ∈ {{{', '.join(map(str, spec['choices']))}}}"
            else:
                words = f"`{key}` {spec['low']:g}–{spec['high']:g}"
                words += " (log)" if spec.get("log") else ""
            assert words in rows[algo], (algo, words)
        assert rows[algo].count("`") == 2 * len(space), algo  # nothing documented that isn't
