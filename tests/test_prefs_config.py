"""A preference run's config: one typed section, one resolver, a record that reproduces it, and
the env's horizon handled before anything trains (docs/preferences.md, "Your own env")."""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex

import gymnasium as gym
import numpy as np
import pytest

from backflip.config import PrefsConfig, TrainConfig, resolve, run_kind
from backflip.errors import UserError


def build(home, *argv):
    """The config `backflip prefs ...` would launch, through the command's own parsing."""
    from backflip.cli import build_parser
    from backflip.commands.prefs import build as build_prefs

    notes: list[str] = []
    return build_prefs(build_parser().parse_args(list(argv)), home, notes), notes


def record_of(cfg: TrainConfig, argv=("backflip",), message="") -> dict:
    return {"config": cfg.to_dict(), "argv": list(argv), "message": message}


@pytest.mark.parametrize(
    "argv",
    [
        # a preset env, the preset's settings and a few of ours
        ("prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--labels", "300",
         "--set", "prefs.selection=entropy", "--set", "prefs.hidden=32,32", "--seeds", "2"),
        # an env without a preset: settings derived from it, one given back to its default
        ("prefs", "train", "ppo", "--env", "CartPole-v1", "--steps", "20000",
         "--set", "prefs.segment_length=25", "--set", "prefs.task=keep it up, please",
         "--labeler", "bpref-mistake", "--seed-list", "3,5"),
        ("prefs", "train", "sac", "--env", "Pendulum-v1", "--set", "prefs.horizon=variable"),
        ("prefs", "gather", "--env", "Acrobot-v1", "--labels", "40", "--seeds", "1"),
        # Box actions without a PPO preset: the policy's settings from the action space too
        ("prefs", "train", "ppo", "--env", "MountainCarContinuous-v0", "--steps", "20000",
         "--set", "lr=1e-4", "--seeds", "1"),
    ],
)  # fmt: skip
def test_the_reproduce_line_of_a_preference_run_rebuilds_its_config(tmp_path, argv):
    from backflip.summary import reproduce_command

    cfg, _ = build(tmp_path, *argv)
    line = reproduce_command(record_of(cfg))
    words = shlex.split(line)
    assert words[:2] == ["backflip", "prefs"], line  # a preference run, not `backflip train`
    again, _ = build(tmp_path, *words[1:])
    assert again.to_dict() == cfg.to_dict(), line
    assert again.kind == "prefs" and run_kind(again.to_dict()) == "prefs"


def test_a_frozen_reward_model_run_reproduces_with_its_model(tmp_path):
    from backflip.runs.records import create_run
    from backflip.summary import reproduce_command

    source, _ = create_run(tmp_path, resolve("ppo", "CartPole-v1", [0], 1000).to_dict(), ["x"])
    cfg, _ = build(tmp_path, "prefs", "train", "ppo", "--env", "CartPole-v1", "--reward-model",
                   str(source), "--seeds", "1", "--steps", "5000")  # fmt: skip
    assert cfg.prefs.stage == "policy" and cfg.prefs.labels == 0
    words = shlex.split(reproduce_command(record_of(cfg)))
    assert "--reward-model" in words
    again, _ = build(tmp_path, *words[1:])
    assert again.to_dict() == cfg.to_dict()


def test_a_plain_run_reproduces_as_backflip_train(tmp_path):
    from backflip.summary import reproduce_command

    cfg = resolve("ppo", "CartPole-v1", [0, 1], 5000, set_values={"lr": "0.01"})
    line = reproduce_command(record_of(cfg))
    assert line.startswith("backflip train ppo --env CartPole-v1") and "--set lr=0.01" in line


def test_the_kind_is_a_field_and_prefs_keys_belong_to_preference_runs():
    cfg = resolve("ppo", "CartPole-v1", [0], 1000, set_values={"prefs.labels": "30"}, kind="prefs")
    assert cfg.kind == "prefs" and cfg.prefs.labels == 30
    assert cfg.to_dict()["kind"] == "prefs" and cfg.flat()["prefs.labels"] == 30
    with pytest.raises(UserError, match=r"prefs\.\* keys are for `backflip prefs train`"):
        resolve("ppo", "CartPole-v1", [0], 1000, set_values={"prefs.labels": "30"})
    # a record written before the field existed: a prefs section means a preference run
    old = {k: v for k, v in cfg.to_dict().items() if k != "kind"}
    assert TrainConfig.from_dict(old).kind == "prefs"
    plain = resolve("ppo", "CartPole-v1", [0], 1000).to_dict()
    assert TrainConfig.from_dict(plain).kind == "plain" and "prefs" not in plain


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("prefs.labels", "-1", "prefs.labels must be in [0, 1000000]"),
        ("prefs.labeler", "bpref-lazy", "prefs.labeler must be one of synthetic, human"),
        ("prefs.horizon", "forever", "prefs.horizon must be one of auto, absorb"),
        ("prefs.cnn", "resnet", "prefs.cnn must be one of auto, paper, keypoints, small"),
        ("prefs.teacher_gamma", "0", "prefs.teacher_gamma must be in (0, 1]"),
        ("prefs.dropout", "1", "prefs.dropout must be in [0, 1)"),
        ("prefs.segment_length", "many", "not an integer"),
    ],
)
def test_prefs_settings_are_checked_by_the_one_domain_table(key, value, says):
    with pytest.raises(UserError) as e:
        resolve("ppo", "CartPole-v1", [0], 1000, set_values={key: value}, kind="prefs")
    assert says in str(e.value)


@pytest.mark.parametrize(
    "bad",
    [
        {"steps": "many"},
        {"seeds": "0,1"},
        {"hp": {"lr": "fast"}},
        {"prefs": {"labels": "lots"}},
        {"prefs": {"no_such_key": 1}},
        {"kind": "robot"},
        {"env": [1, 2]},
    ],
)
def test_a_config_with_a_wrong_typed_field_is_one_user_error(bad):
    good = resolve("ppo", "CartPole-v1", [0], 1000, kind="prefs").to_dict()
    with pytest.raises(UserError):
        TrainConfig.from_dict({**good, **bad})


def test_a_section_built_by_hand_is_checked_too():
    with pytest.raises(UserError, match=r"prefs\.members"):
        PrefsConfig(members=0)
    with pytest.raises(UserError, match=r"obs\+action"):
        PrefsConfig(action_input="heads", reward_input="progress")


# --- the horizon ---------------------------------------------------------------------------------


def test_a_terminating_env_gets_a_fixed_horizon_by_default(tmp_path):
    cfg, notes = build(tmp_path, "prefs", "train", "ppo", "--env", "CartPole-v1", "--seeds", "1")
    assert cfg.prefs.horizon == "terminal"  # resolved at launch, recorded as such
    sac, _ = build(tmp_path, "prefs", "train", "sac", "--env", "Pendulum-v1", "--seeds", "1")
    assert sac.prefs.horizon == "restart"  # a replay learner's relabeled rewards carry no end
    cem, _ = build(tmp_path, "prefs", "train", "cem", "--env", "CartPole-v1", "--seeds", "1")
    assert cem.prefs.horizon == "restart"  # no discount to value an end with
    with pytest.raises(UserError, match="not cem"):
        build(tmp_path, "prefs", "train", "cem", "--env", "CartPole-v1",
              "--set", "prefs.horizon=terminal")  # fmt: skip
    line = next(n for n in notes if n.startswith("horizon:"))
    assert "fixed at 500 steps" in line and "absorbing state" in line and "for 25 steps" in line
    assert "of 20 random episodes ended before the time limit" in line
    variable, notes = build(
        tmp_path, "prefs", "train", "ppo", "--env", "CartPole-v1", "--set", "prefs.horizon=variable"
    )
    assert variable.prefs.horizon == "variable"
    assert any("length can carry the learned reward" in n for n in notes)


def test_an_env_without_a_time_limit_is_given_one_and_says_so(tmp_path):
    gym.register("NoLimitCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        cfg, notes = build(tmp_path, "prefs", "train", "ppo", "--env", "NoLimitCartPole-v0")
        # the horizon is the training envs': evaluation keeps the env's own episodes
        assert cfg.prefs.horizon_steps == 1000 and cfg.env.max_episode_steps == 0
        assert any("prefs.horizon_steps=1000: the env has no time limit" in n for n in notes)
        with pytest.raises(UserError, match="has no time limit"):
            build(tmp_path, "prefs", "train", "ppo", "--env", "NoLimitCartPole-v0",
                  "--set", "prefs.horizon_steps=0")  # fmt: skip
    finally:
        gym.registry.pop("NoLimitCartPole-v0")


def test_a_horizon_given_for_training_leaves_evaluation_on_the_envs_own_episodes(cli, home):
    """The horizon given to an env without a time limit was an env option: evaluation games
    were cut at 1,000 steps too (an ALE/Pong-v5 game is longer), so the true return reported
    was not the env's own."""
    import json

    from backflip.seedrun import EVAL_MAX_STEPS
    from backflip.telemetry import read_metrics

    proc = cli("prefs", "train", "ppo", "--env", "tests.fault_envs:NeverEnds-v0", "--steps",
               "2048", "--labels", "10", "--seeds", "1", "--set", "eval_episodes=1",
               "--set", "num_envs=1", "--set", "num_steps=256", "--json",
               "--no-progress", timeout=300)  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["config"]["prefs"]["horizon_steps"] == 1000
    folder = home / record["id"] / "seeds" / "0"
    lengths = [int(line.split(",")[2]) for line in (folder / "true_episodes.csv").read_text()
               .splitlines()[1:]]  # fmt: skip
    assert lengths and set(lengths) == {1000}  # training: the fixed horizon
    metrics = read_metrics(folder / "metrics.csv")
    assert metrics["eval/len_mean"][1][-1] == EVAL_MAX_STEPS  # evaluation: the env's own, cut


def play(env, actions, seed=3, ends=False):
    """Step `env` with `actions` from a reset: (observations, rewards, infos, ended at); a fixed
    horizon never terminates (only `ends`: prefs.horizon=terminal)."""
    obs, _ = env.reset(seed=seed)
    out, rewards, infos = [obs], [], []
    for t, a in enumerate(actions, 1):
        obs, r, term, trunc, info = env.step(a)
        assert ends or not term
        out.append(obs)
        rewards.append(r)
        infos.append(info)
        if trunc or term:
            return out, rewards, infos, t
    return out, rewards, infos, None


def test_the_absorbing_state_keeps_the_horizon_and_the_env_s_return():
    """CartPole under a random policy falls in ~20 steps: every episode lasts 500 steps; after
    the fall the last observation is held with reward 0 (prefs.horizon=absorb: to the time
    limit), each such step marked; the return is the env's own."""
    from backflip.envs import make_env
    from backflip.envs.horizon import FixedHorizon

    plain = make_env("CartPole-v1")
    plain.action_space.seed(1)
    actions = [plain.action_space.sample() for _ in range(600)]
    plain.reset(seed=3)
    own_return = own_len = 0
    for a in actions:
        _, r, term, trunc, _ = plain.step(a)
        own_return, own_len = own_return + r, own_len + 1
        if term or trunc:
            break
    obs, rewards, infos, end = play(make_env("CartPole-v1", wrap=FixedHorizon), actions)
    assert end == 500 and own_len < 500 and sum(rewards) == own_return
    assert infos[own_len - 1].get("terminated_early")
    absorbed = [bool(i.get("absorbing")) for i in infos]
    assert absorbed == [False] * own_len + [True] * (500 - own_len)
    assert all(np.array_equal(o, obs[own_len]) for o in obs[own_len:])  # held


def test_a_restart_after_a_few_absorbing_steps_gives_another_try():
    from backflip.envs import make_env, make_vec
    from backflip.envs.horizon import FixedHorizon

    env = make_env("CartPole-v1", wrap=functools.partial(FixedHorizon, restart_after=5))
    env.action_space.seed(1)
    obs, rewards, infos, end = play(env, [env.action_space.sample() for _ in range(600)])
    assert end == 500
    ends = [t for t, i in enumerate(infos) if i.get("terminated_early")]
    assert len(ends) > 5  # many tries in one episode
    first = ends[0]
    flags = [bool(i.get("absorbing")) for i in infos[first + 1 : first + 7]]
    assert flags == [True] * 5 + [False]  # 5 steps in the absorbing state, then live again
    assert all(np.array_equal(o, obs[first + 1]) for o in obs[first + 1 : first + 5])
    assert not np.array_equal(obs[first + 6], obs[first + 1])  # a fresh start
    assert all(r == 0 for r in rewards[first + 1 : first + 6])
    # vectorized (what a seed makes): no copy terminates, all truncate at 500
    envs = make_vec("CartPole-v1", 4, wrap=functools.partial(FixedHorizon, restart_after=5))
    envs.reset(seed=0)
    for _ in range(499):
        _, _, term, trunc, _ = envs.step(envs.action_space.sample())
        assert not term.any() and not trunc.any()
    assert envs.step(envs.action_space.sample())[3].all()


def test_a_terminal_horizon_ends_the_episode_after_the_absorbing_steps():
    """prefs.horizon=terminal: after a termination, `restart_after` absorbing steps (held
    observation, reward 0), the last one ending the episode and marked `absorbing_end`."""
    from backflip.envs import make_env
    from backflip.envs.horizon import FixedHorizon

    env = make_env("CartPole-v1", wrap=functools.partial(FixedHorizon, restart_after=5, end=True))
    env.action_space.seed(1)
    obs, rewards, infos, end = play(env, [env.action_space.sample() for _ in range(600)], ends=True)
    first = next(t for t, i in enumerate(infos) if i.get("terminated_early"))
    assert end == first + 5 + 1  # the env's end, then 5 absorbing steps: the episode's last
    assert [bool(i.get("absorbing")) for i in infos[first + 1 :]] == [True] * 5
    assert [bool(i.get("absorbing_end")) for i in infos[first + 1 :]] == [False] * 4 + [True]
    assert all(np.array_equal(o, obs[first + 1]) for o in obs[first + 1 :])
    assert all(r == 0 for r in rewards[first + 1 :])


def test_a_terminal_horizon_pays_the_end_for_ever_and_is_refused_where_it_cannot(home, cli):
    """What the policy is paid: under `terminal` the end of an episode is worth the absorbing
    state's reward for ever (r̂_abs/(1 − γ)), far beyond any step's reward under `restart` (the
    rewards the policy sees: env/reward_min, env/reward_max); refused for replay learners and
    without absorbing steps."""
    import json

    from backflip.runs.archive import load_run
    from backflip.telemetry import read_metrics

    def extremes(horizon):
        proc = cli(
            "prefs", "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "4096",
            "--labels", "30", "--set", "prefs.pretrain_updates=100", "--set", f"prefs.horizon={horizon}",
            "--set", "prefs.tick_steps=512", "--set", "eval_episodes=2", "--json", "--no-progress",
        )  # fmt: skip
        record = load_run(json.loads(proc.stdout)["dir"])
        assert record["config"]["prefs"]["horizon"] == horizon
        m = read_metrics(f"{record['dir']}/seeds/0/metrics.csv")
        return np.min(m["env/reward_min"][1]), np.max(m["env/reward_max"][1])

    lo_r, hi_r = extremes("restart")
    lo_t, _ = extremes("terminal")
    # CartPole's random clips teach the model that ending is bad: r̂_abs well below the mean
    assert lo_t < -10 * max(abs(lo_r), abs(hi_r)), (lo_t, lo_r, hi_r)
    sac = cli("prefs", "train", "sac", "--env", "Pendulum-v1", "--set", "prefs.horizon=terminal",
              check=False)  # fmt: skip
    assert sac.returncode == 2 and "on-policy learners (ppo, a2c, vpg), not sac" in sac.stderr
    none = cli("prefs", "train", "ppo", "--env", "CartPole-v1", "--set", "prefs.horizon=terminal",
               "--set", "prefs.absorb_steps=0", check=False)  # fmt: skip
    assert none.returncode == 2 and "needs prefs.absorb_steps >= 1" in none.stderr
    assert "Traceback" not in sac.stderr + none.stderr


def test_a_run_whose_labels_are_all_ties_pays_the_same_for_every_step(home, cli):
    """End to end on MountainCar (no random clip and no early policy reaches the flag: every
    label "equally good"): the policy is paid −reward_std on every step, not the variation of a
    model that learned nothing (what the rollouts saw: env/reward_min = env/reward_max)."""
    import json

    from backflip.runs.archive import load_run
    from backflip.telemetry import read_metrics

    proc = cli(
        "prefs", "train", "ppo", "--env", "MountainCar-v0", "--seeds", "1", "--steps", "4096",
        "--labels", "30", "--set", "prefs.pretrain_updates=50", "--set", "prefs.tick_steps=512",
        "--set", "eval_episodes=2", "--json", "--no-progress",
    )  # fmt: skip
    record = load_run(json.loads(proc.stdout)["dir"])
    m = read_metrics(f"{record['dir']}/seeds/0/metrics.csv")
    labels, equal = m["prefs/labels"][1], m["prefs/labels_equal"][1]
    assert labels[-1] >= 15 and np.array_equal(labels, equal)  # all ties
    assert len(m["env/reward_min"][1]) >= 4
    assert np.all(m["env/reward_min"][1] == -1.0) and np.all(m["env/reward_max"][1] == -1.0)


@pytest.mark.parametrize("horizon", ["auto", "restart"])
def test_a_preference_run_on_a_terminating_env_reports_the_env_s_own_return(home, cli, horizon):
    """End to end on CartPole (falls under a random policy): the run records its horizon (auto:
    terminal, for PPO), the seed's episodes last the horizon (restart) or end one clip after
    the env's end (terminal), the env's terminations are counted, and the true return the
    summary reports is the evaluation on the env's own episodes."""
    import json

    from backflip.runs.archive import load_run
    from backflip.telemetry import read_episodes, read_metrics

    proc = cli(
        "prefs", "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "6000",
        "--labels", "20", "--set", "prefs.pretrain_updates=20", "--set", "prefs.tick_steps=512",
        "--set", "eval_episodes=3", "--set", f"prefs.horizon={horizon}", "--json", "--no-progress",
    )  # fmt: skip
    treatment = "terminal" if horizon == "auto" else horizon
    assert f"horizon: fixed at 500 steps (prefs.horizon={treatment})" in proc.stderr
    record = load_run(json.loads(proc.stdout)["dir"])
    assert record["config"]["prefs"]["horizon"] == treatment
    assert any(n.startswith("horizon: fixed at 500") for n in record["notes"])
    folder = f"{record['dir']}/seeds/0"
    _, _, lengths = read_episodes(f"{folder}/episodes.csv")
    if treatment == "restart":
        assert set(lengths.tolist()) == {500}  # every training episode lasts the horizon
    else:  # the env's end, then 25 absorbing steps: at least 26 steps, at most the horizon
        assert lengths.min() >= 26 and lengths.max() <= 500 and lengths.min() < 500
    metrics = read_metrics(f"{folder}/metrics.csv")
    terminations = metrics["prefs/env_terminations"][1][-1]
    assert terminations > 0
    if treatment == "terminal":  # each training episode holds one env episode, counted once
        ended = int((lengths < 500).sum())
        assert ended <= terminations <= ended + 8, (terminations, ended)  # 8 copies mid-end
    # the true return reported is of the env's own episodes (a few dozen steps at this stage),
    # not of the fixed-horizon episodes the policy trained in
    assert 0 < metrics["prefs/true_return_mean"][1][-1] < 200
    evals = record["seeds"][0]["final_eval_returns"]
    assert all(r <= 500 for r in evals) and record["seeds"][0]["final_eval_return"] < 500


def test_dataclass_replace_keeps_the_kind_consistent():
    cfg = resolve("ppo", "CartPole-v1", [0], 1000, kind="prefs")
    with pytest.raises(UserError):
        dataclasses.replace(cfg, prefs=None)


def test_labels_asked_scale_with_the_budget_and_are_said_before_the_run(tmp_path):
    cfg, notes = build(tmp_path, "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0",
                       "--labeler", "human", "--steps", "20000")  # fmt: skip
    assert cfg.prefs.labels == 50  # the preset's 500 for 2e5 steps
    assert any("preset's 500 for 200,000 steps, scaled to 20,000 steps: 50" in n for n in notes)
    line = next(n for n in notes if n.startswith("labels: 50 asked of a person"))
    assert "25 before the policy starts" in line and "16,000 of its 20,000 steps" in line
    given, _ = build(tmp_path, "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0",
                     "--steps", "20000", "--labels", "300")  # fmt: skip
    assert given.prefs.labels == 300  # what the person asked for is kept


def test_a_budget_shorter_than_the_tick_interval_still_asks_its_labels_while_training(home):
    """`--steps 2000` against 2,048-step ticks held no tick: the labels due while the policy
    trained were never asked, and the doctor said `prefs-starved`. The interval is fitted to
    the budget and said; one given is kept."""
    import json
    import subprocess
    import sys

    from backflip.commands.prefs import MIN_TICKS

    argv = ("prefs", "train", "sac", "--env", "Pendulum-v1", "--steps", "2000", "--labels", "20")
    cfg, notes = build(home, *argv)
    assert cfg.prefs.tick_steps == 1600 // MIN_TICKS  # the labels are due by 0.8 of 2,000
    assert any(n.startswith("ticks: every 400 steps (prefs.tick_steps), not 2,048") for n in notes)
    given, _ = build(home, *argv, "--set", "prefs.tick_steps=5000")
    assert given.prefs.tick_steps == 5000
    assert build(home, *argv[:-4], "--steps", "100000")[0].prefs.tick_steps == 2048

    out = subprocess.run(
        [sys.executable, "-m", "backflip", *argv, "--seeds", "1", "--no-progress", "--json",
         "--home", str(home)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    record = json.loads(out)
    assert record["seeds"][0]["labels"] == 20
    assert "prefs-starved" not in {f["rule"] for f in record["findings"]}


@pytest.mark.slow
def test_a_stop_while_a_person_s_first_labels_are_awaited_keeps_them_and_resume_goes_on(home):
    """SIGINT while the seed waits for its person's first labels: `interrupted` (not failed),
    every answer kept; `backflip resume` asks only for the rest and the run finishes."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from backflip.prefs.db import PreferenceDB
    from backflip.runs.archive import load_run
    from tests.conftest import ROOT, cli_env

    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "backflip", *args, "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home),
            cwd=ROOT, start_new_session=True,
        )  # fmt: skip

    def answer_pending(db, n):
        given = 0
        for qid, *_ in db.next_queries("scripted")[:n]:
            db.answer(qid, "left", "scripted")
            given += 1
        return given

    proc = start("prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--labeler", "human",
                 "--labels", "20", "--steps", "2048", "--set", "prefs.max_pending=3")  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(home.glob("*/seeds/0/prefs.sqlite")) and time.monotonic() < deadline:
        time.sleep(0.1)
    db_path = next(home.glob("*/seeds/0/prefs.sqlite"))
    run_dir = db_path.parents[2]
    db = PreferenceDB(db_path)
    given = 0
    while given < 4 and time.monotonic() < deadline:  # 4 of the 10 first labels
        given += answer_pending(db, 4 - given)
        time.sleep(0.1)
    status = run_dir / "seeds" / "0" / "status.json"
    while json.loads(status.read_text()).get("status") != "waiting":
        assert time.monotonic() < deadline, "the seed never waited for its person"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    seed = load_run(run_dir)["seeds"][0]
    assert seed["status"] == "interrupted", seed
    assert db.answered() == 4  # every label given is kept
    resume = start("resume", run_dir.name)
    while resume.poll() is None:
        answer_pending(db, 3)
        assert time.monotonic() < deadline + 300, "the resumed run never finished"
        time.sleep(0.05)
    assert resume.returncode == 0, resume.stderr.read()
    record = load_run(run_dir)
    assert record["status"] == "finished"
    assert db.counts()["labeled"] == 20 and db.answered() == 20  # asked only for the rest
    db.close()


@pytest.mark.slow
def test_a_person_then_a_copy_of_them(home, cli):
    """A person labels (here a scripted one: the higher true return, 10% mistakes, as Ibarz et
    al.'s people), `--labeler fitted:RUN` then runs with a simulated copy of them."""
    import json
    import subprocess
    import sys
    import time

    from backflip.prefs.db import PreferenceDB
    from tests.conftest import ROOT, cli_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "backflip", "prefs", "gather", "--env", "Pendulum-v1",
         "--labeler", "human", "--labels", "120", "--set", "prefs.task=swing up",
         "--set", "prefs.max_pending=20", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + 300
    while not list(home.glob("*/seeds/0/prefs.sqlite")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    db = PreferenceDB(next(home.glob("*/seeds/0/prefs.sqlite")))
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the person's run never finished"
        for qid, left, right in db.next_queries("pat"):
            better = db.segment(left).true_return > db.segment(right).true_return
            if rng.random() < 0.1:
                better = not better
            db.answer(qid, "left" if better else "right", "pat")
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read()
    run_id = next(home.glob("*/seeds/0/prefs.sqlite")).parents[2].name
    db.close()
    out = cli("prefs", "train", "ppo", "--env", "Pendulum-v1", "--labeler", f"fitted:{run_id}",
              "--list-keys").stdout  # fmt: skip
    keys = dict(
        line.strip().split("  (")[0].split("=", 1)
        for line in out.splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert keys["prefs.labeler"] == "synthetic"
    assert keys["prefs.teacher_from"] == f"{run_id}/pat"
    assert 0.03 <= float(keys["prefs.teacher_mistake"]) <= 0.2  # ~10% mistakes, fitted
    assert f"a simulated copy of pat (fitted on run {run_id})" in out
    bad = cli("prefs", "train", "ppo", "--env", "Pendulum-v1", "--labeler",
              f"fitted:{run_id}/nobody", check=False)  # fmt: skip
    assert bad.returncode == 2 and "no answers of a person named 'nobody'" in bad.stderr
    json.dumps(keys)


def test_moving_dots_render_is_the_dot_over_the_goal_cross_pixel_for_pixel():
    """The render draws the goal once and copies it (a person's run renders every step): the
    same pixels as drawing the dot and then the cross under it, wherever the dot is."""
    from backflip.envs import moving_dot as md

    env = md.MovingDot(obs="position", render_mode="rgb_array")
    rng = np.random.default_rng(0)
    corners = [[0, 0], [md.WIDTH - md.DOT, md.HEIGHT - md.DOT], list(md.CENTRE)]
    spots = [*corners, *rng.integers(0, [md.WIDTH - md.DOT, md.HEIGHT - md.DOT], (300, 2))]
    for pos in spots:
        env.pos = np.asarray(pos, dtype=np.int64)
        frame = env.render()
        assert np.array_equal(frame, md.mark_goal(md.draw(env.pos))), pos
        frame[:] = 0  # the caller's to change: the cached goal is not
    assert (env.render() == md.GOAL).all(-1).sum() > 10
