"""Learning from preferences: loss, shared towers, labeler, database, schedule, envs, pipeline."""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from backflip.envs import make_vec, register_envs
from backflip.prefs.db import PreferenceDB, Segment
from backflip.prefs.labelers import synthetic_label
from backflip.prefs.reward_model import PairDropout, RewardModel, RewardNet, preference_loss
from backflip.prefs.segments import LabelSchedule, SegmentRecorder
from backflip.telemetry import read_metrics
from tests.conftest import ROOT, cli_env, stop_command

register_envs()  # MovingDot and the fixed-horizon CartPole, for gym.make


# --- Bradley–Terry loss and the noise model ------------------------------------------------------


def test_bradley_terry_loss_with_noise_matches_hand_computed_values():
    # returns 2 vs 1: P̂ = sigmoid(1) = 0.7310586, with 10% noise P = 0.9 * P̂ + 0.05 = 0.7079527
    returns = torch.tensor([[2.0, 1.0]] * 3)
    loss = preference_loss(returns, torch.tensor([1.0, 0.0, 0.5]), noise=0.1)
    assert loss[0].item() == pytest.approx(-math.log(0.7079527), abs=1e-6)  # 0.3453780
    assert loss[1].item() == pytest.approx(-math.log(1 - 0.7079527), abs=1e-6)  # 1.2308396
    assert loss[2].item() == pytest.approx(0.5 * (0.3453780 + 1.2308396), abs=1e-6)
    # without noise: plain logistic loss -log sigmoid(1) = 0.3132617
    assert preference_loss(returns[:1], torch.tensor([1.0]), noise=0.0).item() == pytest.approx(
        0.3132617, abs=1e-6
    )
    # equal returns: P = 0.5 whatever the label, loss ln 2
    flat = preference_loss(torch.tensor([[3.0, 3.0]]), torch.tensor([0.0]), noise=0.1)
    assert flat.item() == pytest.approx(math.log(2), abs=1e-6)


def test_noise_model_bounds_the_loss_of_a_confident_mistake():
    # P̂ -> 1 but the label says right: P -> 0.95, loss -> -ln 0.05 = 2.9957 (finite), not infinity
    loss = preference_loss(torch.tensor([[100.0, 0.0]]), torch.tensor([0.0]), noise=0.1)
    assert loss.item() == pytest.approx(-math.log(0.05), abs=1e-4)
    # without the noise term the same mistake costs about the return gap (here ~100)
    plain = preference_loss(torch.tensor([[100.0, 0.0]]), torch.tensor([0.0]), noise=0.0)
    assert plain.item() > 50


# --- weight-shared towers ---------------------------------------------------------------------------


@pytest.mark.parametrize("obs_shape", [(4,), (1, 84, 84)])
def test_both_segments_of_a_pair_see_the_same_dropout_mask_and_batchnorm(obs_shape):
    torch.manual_seed(0)
    net = RewardNet(obs_shape, act_dim=3, dropout=0.5).train()
    seg = torch.randn(5, 1, 7, *obs_shape)
    act = torch.randn(5, 1, 7, 3)
    pair_obs, pair_act = torch.cat([seg, seg], 1), torch.cat([act, act], 1)  # left == right
    out = net(pair_obs, pair_act)
    # identical segments through the two towers give identical outputs only if both towers drop
    # the same units (and batchnorm normalizes both with the same statistics)
    # (equal up to float summation order: different masks would differ by ~0.1)
    assert torch.allclose(out[:, 0], out[:, 1], atol=1e-6)
    masks = [m.last_mask for m in net.modules() if isinstance(m, PairDropout)]
    assert masks and all(m.shape[1] == 1 for m in masks)  # one mask, broadcast over the pair
    # ...and dropout is really on: a second pass draws another mask
    assert not torch.allclose(net(pair_obs, pair_act), out, atol=1e-3)


def test_independent_masks_would_break_the_towers():
    # the failure the test above guards against (Rahtz's bug): separate masks per segment
    torch.manual_seed(0)
    x = torch.ones(4, 2, 5, 8)
    independent = torch.nn.functional.dropout(x, 0.5, training=True)
    shared = PairDropout(0.5).train()(x)
    assert not torch.equal(independent[:, 0], independent[:, 1])
    assert torch.equal(shared[:, 0], shared[:, 1])


def test_reward_model_normalizes_its_input_and_output():
    obs_space = gym.spaces.Box(-1e3, 1e3, (2,), np.float32)
    model = RewardModel(obs_space, gym.spaces.Discrete(3), members=2)
    obs = np.random.default_rng(0).normal(500.0, 100.0, (4000, 2))  # far from unit scale
    model.observe(obs)
    o, a = model.encode(obs, np.zeros(4000, np.int64))
    assert abs(float(o.mean())) < 0.05 and abs(float(o.std()) - 1) < 0.05
    assert a.shape == (4000, 3)
    model.calibrate(obs, np.zeros(4000, np.int64))
    r = model.member_rewards(obs, np.zeros(4000, np.int64))
    assert np.allclose(r.mean(1), 0, atol=1e-4) and np.allclose(r.std(1), 1, atol=1e-3)


def test_progress_rewards_the_change_of_the_learned_state_reward(tmp_path):
    # prefs.reward_input=progress: a model of states r̂(o); the policy's reward for reaching o'
    # from o is reward_std · mean_k (r̂_k(o') − r̂_k(o)) / d_k, with d_k the RMS of member k's
    # one-step differences; the env wrapper and replay relabeling give the same number
    import contextlib
    from types import SimpleNamespace

    from backflip.buffers import ReplayBuffer
    from backflip.config import PrefsConfig, TrainConfig, resolve
    from backflip.prefs.pipeline import Pipeline, policy_reward
    from backflip.prefs.segments import SegmentStore

    rng = np.random.default_rng(0)
    starts = rng.random((40, 1, 2))  # 40 clips of 6 small steps from random starting points
    walk = (starts + np.cumsum(rng.normal(0, 0.01, (40, 6, 2)), axis=1)).astype(np.float32)
    store = SegmentStore(100)
    store.add([Segment(w, np.zeros(6, np.int64), np.zeros(6)) for w in walk])
    pcfg = PrefsConfig(reward_input="progress", members=3, reward_std=2.0)
    plain = resolve("ppo", "MovingDotLowDim-v0", [0], 1000).to_dict()  # 2 floats, 5 actions
    cfg = TrainConfig.from_dict({**plain, "kind": "prefs", "prefs": pcfg.to_dict()})
    buffer = ReplayBuffer(50, (2,), (), act_dtype=np.int64)
    tel = SimpleNamespace(timer=lambda name: contextlib.nullcontext())
    run = SimpleNamespace(seed=0, replay_buffers=[(buffer, lambda a: a)], tel=tel, out_dir=tmp_path)
    pipe = Pipeline(cfg, run)
    model = pipe.model
    assert not model.use_actions and model.act_dim == 0
    model.observe(walk.reshape(-1, 2))
    pipe.store = store
    with torch.no_grad():  # members that differ clearly from one another
        for net in model.nets:
            for p in net.parameters():
                p.normal_(0, 0.5)
    obs, act, _ = store.sample_steps(500, rng)
    model.calibrate(obs, act, store.sample_transitions(500, rng))

    def raw(o):  # each member's r̂_k, by hand: normalized input, the plain networks
        x = torch.as_tensor(
            (o - model.obs_rms.mean) / np.sqrt(model.obs_rms.var + 1e-8), dtype=torch.float32
        )
        return np.stack([net(x, x[:, :0]).detach().numpy() for net in model.nets])

    moves = walk[:, :-1].reshape(-1, 2), walk[:, 1:].reshape(-1, 2)
    steps = raw(moves[1]) - raw(moves[0])
    # the scale: roughly the RMS of one-step changes (over the 500 sampled transitions)
    assert np.allclose(model.diff_scale, np.sqrt((steps**2).mean(1)), rtol=0.2)
    assert (model.diff_scale < model.out_std / 5).all()  # far below the scale of the levels
    obs, nxt = walk[:8, 2], walk[:8, 3]
    act = rng.integers(0, 5, 8)
    expected = 2.0 * ((raw(nxt) - raw(obs)) / model.diff_scale[:, None]).mean(0)
    pipe.snap = model.snapshot()  # what the policy's env wrapper uses (fused members)
    assert np.allclose(pipe.reward(obs, act, nxt), expected, rtol=1e-4, atol=1e-4)
    assert np.allclose(
        policy_reward(model, "progress", obs, act, nxt), expected, rtol=1e-4, atol=1e-4
    )
    # a pure difference: along a trajectory the rewards telescope to the ends' difference
    traj = walk[0]
    total = pipe.reward(traj[:-1], np.zeros(5, np.int64), traj[1:]).sum()
    ends = 2.0 * ((raw(traj[-1:]) - raw(traj[:1]))[:, 0] / model.diff_scale).mean()
    assert math.isclose(total, ends, rel_tol=1e-4, abs_tol=1e-4)
    # off-policy replay is relabeled with the same reward, from its stored next observations
    for o, a, n in zip(obs, act, nxt, strict=True):
        buffer.add(o, a, 0.0, n, False, False)
    pipe.model_version += 1
    pipe.relabel_replay()
    assert np.allclose(buffer.rewards[:8], expected, rtol=1e-4, atol=1e-4)
    pipe.close()


# --- the synthetic labeler ----------------------------------------------------------------------------


def seg(rewards) -> Segment:
    n = len(rewards)
    return Segment(np.zeros((n, 2), np.float32), np.zeros(n, np.int64), np.asarray(rewards, float))


def test_synthetic_labeler_prefers_higher_true_return_and_ties_give_half():
    assert synthetic_label(seg([1, 1, 0]), seg([0, 1, 0])) == 1.0
    assert synthetic_label(seg([0, 0, 0]), seg([0, 1, 0])) == 0.0
    assert synthetic_label(seg([1, 0, -1]), seg([0, 0, 0])) == 0.5  # equal sums
    assert synthetic_label(seg([0.1, 0.2]), seg([0.3, 0.0])) == 0.5  # equal up to rounding
    assert synthetic_label(seg([1e-6]), seg([0.0])) == 1.0  # small but real differences count


def test_synthetic_labeler_error_rate_answers_at_random():
    rng = np.random.default_rng(0)
    answers = [synthetic_label(seg([5]), seg([0]), error_rate=1.0, rng=rng) for _ in range(400)]
    assert set(answers) == {0.0, 1.0}
    assert 0.4 < np.mean(answers) < 0.6
    mostly = [synthetic_label(seg([5]), seg([0]), error_rate=0.2, rng=rng) for _ in range(1000)]
    assert 0.85 < np.mean(mostly) < 0.95  # 80% right + half of the 20% random


# --- the database ---------------------------------------------------------------------------------------


def test_the_labels_count_the_segments_that_held_an_episodes_end(tmp_path):
    # a segment with steps in the absorbing state of a fixed horizon holds the env's end: what
    # the doctor's labels-ends-unseen reads (prefs/labeled_ends)
    db = PreferenceDB(tmp_path / "prefs.sqlite")
    ended = seg([1, 0, 0])
    ended.absorbing = np.array([False, True, True])
    db.add_query(ended, seg([0, 0, 0]), 20, "random", label=1.0, labeler="synthetic")
    db.add_query(seg([1, 1, 1]), seg([0, 0, 0]), 20, "random")  # pending: not shown yet
    assert db.shown() == {
        "labeled_segments": 2,
        "labeled_gains": 1,
        "labeled_losses": 0,
        "labeled_ends": 1,
    }


def test_database_answers_skips_undo_and_reuse(tmp_path):
    db = PreferenceDB(tmp_path / "a" / "prefs.sqlite")
    q1 = db.add_query(seg([1]), seg([0]), 10, "random")
    q2 = db.add_query(seg([2]), seg([3]), 10, "random")
    q3 = db.add_query(seg([0]), seg([0]), 10, "random", label=0.5, labeler="synthetic")
    assert db.counts() == {"labeled": 1, "equal": 1, "pending": 2, "skipped": 0, "segments": 6}
    assert db.shown() == {
        "labeled_segments": 2,
        "labeled_gains": 0,
        "labeled_losses": 0,
        "labeled_ends": 0,
    }
    db.answer(q1, "left")
    db.answer(q2, "skip")
    # what the labels have shown: q3's two segments and q1's (one returned 1); not the skipped q2
    assert db.shown() == {
        "labeled_segments": 4,
        "labeled_gains": 1,
        "labeled_losses": 0,
        "labeled_ends": 0,
    }
    with pytest.raises(KeyError):
        db.answer(q1, "right")  # already answered
    with pytest.raises(ValueError):
        db.answer(q2, "maybe")
    assert [r[0] for r in db.labels()] == [q1, q3]
    assert db.undo("human") == q2  # the skip was the last human answer
    assert db.pending(5) == [(q2, 3, 4)]
    seg_back = db.segment(1)
    assert seg_back.true_return == 1.0 and seg_back.obs.shape == (1, 2)
    other = PreferenceDB(tmp_path / "b" / "prefs.sqlite")
    assert other.import_from(db, origin="a") == 2
    assert sorted(r[3] for r in other.labels()) == [0.5, 1.0]
    assert other.counts()["segments"] == 4


def test_a_teachers_answers_are_written_together_all_or_none(tmp_path):
    db = PreferenceDB(tmp_path / "prefs.sqlite")
    shared = seg([2])
    ids = db.add_queries(
        [
            (seg([1]), seg([0]), 1.0, False),
            (shared, seg([3]), None, True),
            (shared, seg([2]), 0.5, False),
        ],
        40,
        "disagreement",
        "synthetic",
    )
    assert ids == sorted(ids) and len(ids) == 3
    assert db.counts() == {"labeled": 2, "equal": 1, "pending": 0, "skipped": 1, "segments": 5}
    assert [(q, label) for q, _, _, label in db.labels()] == [(ids[0], 1.0), (ids[2], 0.5)]
    first, broken = seg([5]), seg([1])
    broken.obs = object()  # cannot be stored: the whole batch is refused, nothing half written
    with pytest.raises(Exception):  # noqa: B017 — whatever the packer raises
        db.add_queries(
            [(first, seg([6]), 1.0, False), (broken, seg([0]), 0.0, False)], 41, "random"
        )
    assert db.counts()["segments"] == 5 and len(db.labels()) == 2
    assert first.id is None  # and no segment keeps an id the database does not hold


WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from backflip.prefs.db import PreferenceDB, Segment
    db = PreferenceDB(sys.argv[1])
    s = lambda r: Segment(np.zeros((25, 4), np.float32), np.zeros(25, np.int64), np.full(25, r))
    for i in range(100000):
        q = db.add_query(s(1.0), s(0.0), i, "random")
        db.answer(q, "left", "human")
        print("ack", q, flush=True)   # the labeler is told only after the commit
    """
)


def test_labels_survive_killing_the_process_mid_labeling_and_restarting(tmp_path):
    path = tmp_path / "prefs.sqlite"
    acked = pending = 0
    for round_ in range(2):  # label, get killed, restart, label more
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env=cli_env(tmp_path),
            cwd=ROOT,
        )
        seen = 0
        for line in proc.stdout:
            if line.startswith("ack"):
                seen += 1
            if seen == 40:
                break
        os.kill(proc.pid, signal.SIGKILL)  # mid-transaction, most likely
        proc.wait()
        acked += seen
        db = PreferenceDB(path)
        counts = db.counts()
        # every acknowledged label is there; at most the one in flight is extra
        assert acked <= counts["labeled"] <= acked + round_ + 1
        # a query whose answer was in flight at this kill; earlier rounds' stay pending (the
        # writer never answers old queries), so the bound is per kill, not overall
        assert pending <= counts["pending"] <= pending + 1
        acked, pending = counts["labeled"], counts["pending"]
        db.close()


# --- segments and the schedule ----------------------------------------------------------------------------


def test_segments_never_cross_episode_boundaries_or_include_reset_steps():
    rec = SegmentRecorder(num_envs=2, length=3)
    obs, act = np.zeros((2, 1)), np.zeros(2, np.int64)
    valid, done = np.ones(2, bool), np.zeros(2, bool)
    out = []
    for t in range(7):
        d = done.copy()
        v = valid.copy()
        if t == 4:
            d[0] = True  # env 0 ends an episode after 5 steps: its partial segment is dropped
        if t == 5:
            v[0] = False  # the autoreset step is not a transition
        out += rec.add(obs + t, act, np.array([t, t], float), v, d, t, np.array([-t, 2 * t]))
    env0 = [s for s in out if s.obs[0, 0] in (0, 6)]
    assert [list(s.rewards) for s in out] == [[0, 1, 2], [0, 1, 2], [3, 4, 5]]
    assert len(env0) == 2 and all(len(s.rewards) == 3 for s in out)
    # the learned reward paid over each segment, per env copy (segment_corr)
    assert [s.predicted for s in out] == [-3, 6, 24]


def test_label_schedule_front_loads_then_decays_to_the_total():
    s = LabelSchedule(total=500, initial=125, until=80_000, decay=0.25)
    due = [s.due(t) for t in range(0, 100_001, 10_000)]
    assert due[0] == 125 and due[8] == 500 and due[-1] == 500
    assert all(b >= a for a, b in itertools.pairwise(due))
    steps = np.diff(due[:9])
    assert steps[0] > steps[-1]  # the rate decays


# --- environments ---------------------------------------------------------------------------------------


def test_moving_dot_rewards_moving_towards_the_centre():
    env = gym.make("MovingDotLowDim-v0")
    obs, _ = env.reset(seed=0)
    x = obs[0] * 160
    towards = 2 if x < 80 else 4  # right or left
    assert env.step(towards)[1] == 1.0
    assert env.step(6 - towards)[1] == -1.0
    assert env.step(0)[1] == 0.0
    pix = gym.make("MovingDot-v0")
    frame, _ = pix.reset(seed=0)
    assert frame.shape == (210, 160, 3) and frame.sum() == 4 * 4 * 3 * 255
    assert gym.make("MovingDot84-v0").reset(seed=0)[0].shape == (1, 84, 84)


def test_fixed_horizon_cartpole_replaces_termination_by_a_penalty():
    env = gym.make("CartPoleFixedHorizon-v1")
    env.reset(seed=0)
    rewards, steps, ended = [], 0, False
    while not ended:
        _, r, term, trunc, info = env.step(1)  # always push right: falls quickly, repeatedly
        assert not term
        rewards.append(r)
        steps += 1
        ended = trunc
    assert steps == 500
    assert info["falls"] > 5 and rewards.count(-10.0) == info["falls"]
    assert set(rewards) == {1.0, -10.0}


def test_learned_reward_wraps_training_envs_only():
    from backflip.config import resolve
    from backflip.prefs.wrapper import LearnedReward
    from backflip.seedrun import SeedRun

    class Const:
        calls = 0

        def reward(self, obs, act, next_obs, absorbing=None, absorbing_next=None):
            return np.full(len(act), 7.0)

        def episode_reset(self):
            pass

        def on_step(self, *args):
            Const.calls += 1

    run = SeedRun(resolve("ppo", "CartPole-v1", [0], 1000), 0)
    with run.training_envs(vector=lambda env: LearnedReward(env, Const())):
        train = run.make_vec(2)  # what an algorithm trains on, through the seam
    evaluation = make_vec("CartPole-v1", 2, evaluation=True)  # what `run.evaluate` uses
    plain = SeedRun(resolve("ppo", "CartPole-v1", [0], 1000), 0).make_vec(2)  # another seed
    for envs in (train, evaluation, plain):
        envs.reset(seed=0)
    assert list(train.step(np.array([0, 1]))[1]) == [7.0, 7.0]
    assert list(evaluation.step(np.array([0, 1]))[1]) == [1.0, 1.0]
    assert list(plain.step(np.array([0, 1]))[1]) == [1.0, 1.0]
    assert Const.calls == 1


def as_json(stdout: str) -> dict:
    import json

    start = 0 if stdout.startswith("{") else stdout.index("\n{") + 1  # after any status lines
    return json.loads(stdout[start:])


# --- the pipeline, small and fast ---------------------------------------------------------------------


def small_run(cli, *extra, steps=4096, labels=40):
    out = cli(
        "prefs",
        "train",
        "ppo",
        "--env",
        "MovingDotLowDim-v0",
        "--steps",
        steps,
        *([] if labels is None else ["--labels", labels]),
        "--set",
        "num_steps=64",
        "--set",
        "epochs=2",
        "--set",
        "prefs.pretrain_updates=20",
        "--set",
        "prefs.round_updates=10",
        "--set",
        "prefs.tick_steps=1024",
        "--set",
        "prefs.rm_updates_per_kstep=5",
        "--set",
        "eval_episodes=2",
        "--set",
        "env.max_episode_steps=100",  # short episodes: returns to correlate within the budget
        "--seeds",
        "1",
        "--no-progress",
        "--json",
        *extra,
    )
    return as_json(out.stdout)


def same_metrics(a: dict, b: dict, *required: str) -> tuple[dict, dict]:
    """Two runs' seed-0 metrics, asserted equal name by name (steps and values) but for timing,
    the machine's state and the database's bytes; `required` names must be among them."""
    ma, mb = (read_metrics(f"{r['dir']}/seeds/0/metrics.csv") for r in (a, b))
    timing = ("time/", "sys/", "prefs/labels_per_s", "prefs/segments", "prefs/seconds_since")
    names = [n for n in ma if not n.startswith(timing) and n != "prefs/db_mb"]
    assert set(required) <= set(names)
    for name in names:
        assert np.array_equal(ma[name][0], mb[name][0]), name
        assert np.array_equal(ma[name][1], mb[name][1]), name
    return ma, mb


def test_every_prefs_metric_is_documented(cli):
    from tests.test_metrics_docs import documented_names

    record = small_run(cli, "--set", "prefs.mode=sync")
    assert record["status"] == "finished"
    metrics = read_metrics(f"{record['dir']}/seeds/0/metrics.csv")
    names = {n for n in metrics if n.startswith(("prefs/", "reward_model/"))}
    for required in (
        "prefs/labels_per_s",
        "prefs/segments_per_s",
        "prefs/queue_depth",
        "prefs/seconds_since_label",
        "reward_model/val_train_loss_ratio",
        "reward_model/return_corr",
        "reward_model/segment_corr",
        "prefs/labeled_segments",
        "prefs/labeled_gains",
        "prefs/true_return_mean",
        "prefs/db_mb",
    ):
        assert required in names
    missing = names - documented_names()
    assert not missing, f"undocumented: {sorted(missing)}"
    assert metrics["prefs/labels"][1][-1] == 40
    # every labeled query shows two segments (the same one twice at most in a few)
    assert 40 < metrics["prefs/labeled_segments"][1][-1] <= 80


def test_the_default_command_is_deterministic(cli):
    # the CLI's defaults (sync mode): one command run twice gives the same curves and model
    a = small_run(cli)
    b = small_run(cli)
    assert a["config"]["prefs"]["mode"] == "sync"
    ma = read_metrics(f"{a['dir']}/seeds/0/metrics.csv")
    mb = read_metrics(f"{b['dir']}/seeds/0/metrics.csv")
    for name in ("reward_model/train_loss", "reward_model/val_loss", "eval/return_mean"):
        assert np.array_equal(ma[name][1], mb[name][1]), name
    ra = torch.load(f"{a['dir']}/seeds/0/reward_model.pt", weights_only=False)["model"]
    rb = torch.load(f"{b['dir']}/seeds/0/reward_model.pt", weights_only=False)["model"]
    for sa, sb in zip(ra["nets"], rb["nets"], strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_pipelined_mode_is_deterministic_and_trains_on_sync_mode_schedule(cli):
    # pipelined: each tick's training runs beside the policy's next tick_steps steps and is
    # installed at the next tick. Run twice it gives the same curves and model (with dropout:
    # the forked round draws its masks from a copy of torch's generator, never from the one the
    # policy samples from); it trains as many updates as sync, on the same schedule, with the
    # policy's reward one tick behind
    dropout = ("--set", "prefs.dropout=0.5")
    runs = [small_run(cli, "--set", "prefs.mode=pipelined", *dropout) for _ in range(2)]
    sync = small_run(cli, *dropout)
    ma, mb, ms = (read_metrics(f"{r['dir']}/seeds/0/metrics.csv") for r in (*runs, sync))
    for name in ("reward_model/train_loss", "reward_model/val_loss", "eval/return_mean"):
        assert np.array_equal(ma[name][0], mb[name][0]), name
        assert np.array_equal(ma[name][1], mb[name][1]), name
    ra, rb = (torch.load(f"{r['dir']}/seeds/0/reward_model.pt", weights_only=False) for r in runs)
    for sa, sb in zip(ra["model"]["nets"], rb["model"]["nets"], strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert ra["prefs"]["mode"] == "pipelined"
    # every round trained, the last one installed before the model was saved
    assert ma["reward_model/updates"][1][-1] == ms["reward_model/updates"][1][-1] > 20
    assert ma["prefs/labels"][1][-1] == ms["prefs/labels"][1][-1] == 40
    # what it trained on differs from sync's: the policy's reward lags by one tick
    assert not np.array_equal(ma["reward_model/train_loss"][1], ms["reward_model/train_loss"][1])


def test_a_forked_round_gives_the_numbers_of_a_round_in_a_thread(cli, monkeypatch):
    # pipelined rounds run in a forked process (the policy keeps Python's lock to itself) or,
    # with BACKFLIP_FORK=0, in a thread: the same curves and model, metric for metric
    forked = small_run(cli, "--set", "prefs.mode=pipelined")
    monkeypatch.setenv("BACKFLIP_FORK", "0")
    threaded = small_run(cli, "--set", "prefs.mode=pipelined")
    ma, _ = same_metrics(forked, threaded, "reward_model/val_loss", "reward_model/updates")
    ra, rb = (
        torch.load(f"{r['dir']}/seeds/0/reward_model.pt", weights_only=False)
        for r in (forked, threaded)
    )
    for sa, sb in zip(ra["model"]["nets"], rb["model"]["nets"], strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert ma["reward_model/updates"][1][-1] > 20


def pipelined_pipe(tmp_path):
    """A pipeline in mode=pipelined on a fake seed, its labeler off: for its rounds alone."""
    import contextlib
    from types import SimpleNamespace

    from backflip.config import PrefsConfig, TrainConfig, resolve
    from backflip.prefs.pipeline import Pipeline

    plain = resolve("ppo", "MovingDotLowDim-v0", [0], 1000).to_dict()
    pcfg = PrefsConfig(mode="pipelined")
    cfg = TrainConfig.from_dict({**plain, "kind": "prefs", "prefs": pcfg.to_dict()})
    tel = SimpleNamespace(timer=lambda name: contextlib.nullcontext())
    run = SimpleNamespace(seed=0, replay_buffers=[], tel=tel, out_dir=tmp_path, stopping=False)
    pipe = Pipeline(cfg, run)
    pipe.ask = lambda n: 0
    return pipe


def test_a_forked_round_reads_the_pipeline_as_at_the_fork_and_its_error_surfaces(tmp_path):
    from backflip.prefs import forked

    assert forked.available()  # Linux: rounds are forked unless BACKFLIP_FORK=0
    pipe = pipelined_pipe(tmp_path)

    def round_(step, store=None):  # runs in the child: its changes come back only through
        pipe.staged["snap"], pipe.staged["versions"] = f"model of {len(pipe.store)}", 1
        pipe.staged["stats"] = {"reward_model/updates": float(step)}
        pipe.updates_done = step  # what finish_job installs
        pipe.rng.random(3)

    pipe.train_owed = round_
    pipe.store.add([Segment(np.zeros((4, 2), np.float32), np.zeros(4, np.int64), np.zeros(4))])
    pipe.step, before, count = 2048, pipe.snap, pipe.model.obs_rms.count
    expected_rng = np.random.default_rng()
    expected_rng.bit_generator.state = pipe.rng.bit_generator.state
    expected_rng.random(3)
    pipe.pipelined_tick()
    assert isinstance(pipe.job, forked.Forked)
    pipe.step += 100  # the policy goes on: more segments and observations meanwhile
    pipe.store.add([Segment(np.ones((4, 2), np.float32), np.zeros(4, np.int64), np.zeros(4))])
    pipe.observe(np.ones((3, 2)))
    assert pipe.snap is before and pipe.model.obs_rms.count == count  # nothing installed yet
    pipe.finish_job()
    assert pipe.snap == "model of 1" and pipe.model_version == 1  # the store as at the fork
    assert pipe.updates_done == 2048 and pipe.rm_stats["reward_model/updates"] == 2048
    assert pipe.rng.random() == expected_rng.random()  # the generator as the round left it
    assert pipe.model.obs_rms.count == pytest.approx(count + 3)  # the held observations
    # an error in the forked round reaches the policy at the next tick, with its traceback
    pipe.train_owed = lambda step, store=None: 1 / 0
    pipe.pipelined_tick()
    with pytest.raises(RuntimeError, match="training round failed") as caught:
        pipe.finish_job()
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert "in the forked process" in "".join(caught.value.__cause__.__notes__)
    # a round under way when the seed stops is ended, not waited for
    pipe.train_owed = lambda step, store=None: time.sleep(60)
    pipe.pipelined_tick()
    pipe.run.stopping = True
    t0 = time.monotonic()
    pipe.finish_job()
    assert time.monotonic() - t0 < 5 and pipe.job is None and pipe.model_version == 1
    pipe.db.close()


def test_a_pipelined_round_is_installed_at_the_next_tick_and_its_error_surfaces(
    tmp_path, monkeypatch
):
    import threading

    monkeypatch.setenv("BACKFLIP_FORK", "0")  # the round in a thread, where the test can gate it
    pipe = pipelined_pipe(tmp_path)
    gate, seen = threading.Event(), []

    def round_(step, store):  # what a round reads was fixed when it started
        gate.wait(10)
        seen.append((step, len(store)))
        pipe.staged["snap"], pipe.staged["versions"] = "the new model", 1

    pipe.train_owed = round_
    pipe.store.add([Segment(np.zeros((4, 2), np.float32), np.zeros(4, np.int64), np.zeros(4))])
    pipe.step, before, count = 2048, pipe.snap, pipe.model.obs_rms.count
    pipe.pipelined_tick()
    pipe.step += 100  # the policy goes on: more steps, segments and observations meanwhile
    pipe.store.add([Segment(np.ones((4, 2), np.float32), np.zeros(4, np.int64), np.zeros(4))])
    pipe.observe(np.ones((3, 2)))
    assert pipe.snap is before and pipe.model.obs_rms.count == count  # nothing installed yet
    gate.set()
    pipe.finish_job()
    assert seen == [(2048, 1)]
    assert pipe.snap == "the new model" and pipe.model_version == 1
    assert pipe.model.obs_rms.count == pytest.approx(count + 3)  # the held observations
    # an error in the background round reaches the policy's thread at the next tick
    pipe.train_owed = lambda step, store: 1 / 0
    pipe.pipelined_tick()
    with pytest.raises(RuntimeError, match="training round failed") as caught:
        pipe.finish_job()
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    pipe.db.close()


def test_synthetic_labels_never_wait_and_ignore_the_human_settings(cli):
    # the person's pacing (max_debt), shared queries and pending cap are for people only: a
    # synthetic run with the tightest of them is the same run, metric for metric
    common = ("--set", "prefs.mode=sync", "--set", "prefs.error_rate=0.2")
    a = small_run(cli, *common)
    b = small_run(
        cli,
        *common,
        "--set",
        "prefs.max_debt=0",
        "--set",
        "prefs.double_share=1",
        "--set",
        "prefs.max_pending=1",
    )
    _, mb = same_metrics(a, b, "reward_model/val_loss", "eval/return_mean")
    assert mb["prefs/wait_s"][1].max() == 0
    db = PreferenceDB(f"{b['dir']}/seeds/0/prefs.sqlite")
    assert db.answers() == []  # answers are a person's; synthetic labels are on the queries
    db.close()


def test_a_starved_label_queue_shows_in_the_metrics(cli):
    # fault injection: the labeler goes silent after 12 labels while the policy keeps training
    record = small_run(
        cli, "--set", "prefs.stall_labels_after=12", "--set", "prefs.mode=sync", steps=8192
    )
    m = read_metrics(f"{record['dir']}/seeds/0/metrics.csv")
    assert m["prefs/labels"][1][-1] == 12
    assert m["prefs/labels_per_s"][1][-1] == 0
    assert m["prefs/label_debt"][1][-1] > 10
    since = m["prefs/seconds_since_label"][1]
    assert since[-1] > since[len(since) // 2] > 0


def test_async_mode_and_split_stages(cli):
    gathered = cli(
        "prefs",
        "gather",
        "--env",
        "MovingDotLowDim-v0",
        "--labels",
        "30",
        "--seeds",
        "1",
        "--json",
        "--no-progress",
    )
    gid = as_json(gathered.stdout)["id"]
    pre = as_json(
        cli(
            "prefs",
            "pretrain",
            "--prefs",
            gid,
            "--set",
            "prefs.pretrain_updates=20",
            "--seeds",
            "1",
            "--json",
            "--no-progress",
        ).stdout
    )
    m = read_metrics(f"{pre['dir']}/seeds/0/metrics.csv")
    assert m["prefs/labels"][1][-1] == 30  # imported
    assert m["reward_model/updates"][1][-1] == 20
    # no --labels: the preset's label budget is not asked of a frozen model
    frozen = small_run(cli, "--reward-model", pre["id"], labels=None)
    assert frozen["status"] == "finished"
    m = read_metrics(f"{frozen['dir']}/seeds/0/metrics.csv")
    assert "prefs/true_return_mean" in m and m["prefs/labels"][1][-1] == 0
    live = small_run(cli, "--prefs", gid, "--set", "prefs.mode=async")  # on the imported labels
    m = read_metrics(f"{live['dir']}/seeds/0/metrics.csv")
    assert live["status"] == "finished" and m["prefs/labels"][1][-1] == 40


def test_bad_prefs_input_is_one_line(cli):
    bad = cli(
        "prefs",
        "train",
        "ppo",
        "--env",
        "MovingDotLowDim-v0",
        "--set",
        "prefs.labeler=bob",
        check=False,
    )
    assert bad.returncode == 2 and "prefs.labeler" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli(
        "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--set", "prefs.nope=1", check=False
    )
    assert bad.returncode == 2 and "unknown key prefs.nope" in bad.stderr
    bad = cli("prefs", "pretrain", check=False)
    assert bad.returncode == 2 and "--prefs" in bad.stderr
    # action heads: one output per discrete action, and only for a model of (o, a)
    for env, extra, says in (
        ("Pendulum-v1", (), "needs discrete actions"),
        ("MovingDotLowDim-v0", ("--set", "prefs.reward_input=progress"), "obs+action"),
    ):
        bad = cli(
            "prefs", "train", "ppo", "--env", env, "--set", "prefs.action_input=heads", *extra,
            check=False,
        )  # fmt: skip
        assert bad.returncode == 2 and says in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("heads", [False, True])
def test_fused_inference_equals_the_members_one_by_one(heads):
    model = RewardModel(
        gym.spaces.Box(0, 1, (3,), np.float32),
        gym.spaces.Discrete(4),
        members=3,
        action_heads=heads,
    )
    rng = np.random.default_rng(0)
    model.observe(rng.random((100, 3)))
    obs, act = rng.random((8, 3)).astype(np.float32), rng.integers(0, 4, 8)
    snap = model.snapshot()
    assert snap.fused is not None
    assert np.allclose(snap.member_rewards(obs, act), model.member_rewards(obs, act), atol=1e-5)


def test_an_action_of_several_parts_enters_the_reward_model_as_their_one_hots():
    """A MultiDiscrete space too large for one Discrete (the factorized policy's): the reward
    model reads each part one-hot, side by side, in torch and in the NumPy snapshot alike."""
    from backflip.prefs.reward_model import parts_one_hot

    space = gym.spaces.MultiDiscrete([6, 6, 6, 6])
    assert parts_one_hot(np.array([[0, 5, 2, 1]]), (6, 6, 6, 6)).nonzero()[1].tolist() == [
        0, 11, 14, 19,
    ]  # fmt: skip
    model = RewardModel(gym.spaces.Box(0, 1, (3,), np.float32), space, members=3)
    assert model.act_dim == 24
    rng = np.random.default_rng(0)
    model.observe(rng.random((100, 3)))
    obs, act = rng.random((8, 3)).astype(np.float32), rng.integers(0, 6, (8, 4))
    snap = model.snapshot()
    assert snap.fused is not None
    assert np.allclose(snap.member_rewards(obs, act), model.member_rewards(obs, act), atol=1e-5)
    with pytest.raises(ValueError, match="discrete"):  # one output per action: one Discrete
        RewardModel(gym.spaces.Box(0, 1, (3,), np.float32), space, action_heads=True)


def start_cli(home, args: list[str]) -> subprocess.Popen:
    """`backflip ARGS` in its own process on archive `home`, its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "backflip", *args],
        env=cli_env(home),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_person_can_end_labeling_early_and_the_run_trains_on(home):
    args = [
        "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--labeler", "human",
        "--labels", "40", "--steps", "4096", "--set", "num_steps=64", "--set", "epochs=1",
        "--set", "prefs.pretrain_updates=10", "--set", "prefs.round_updates=10",
        "--set", "eval_episodes=2", "--set", "prefs.task=reach the centre", "--no-progress",
    ]  # fmt: skip
    proc = start_cli(home, args)
    try:
        deadline = time.monotonic() + 120
        while not list(home.glob("*/seeds/0/prefs.sqlite")) and time.monotonic() < deadline:
            time.sleep(0.1)
        folder = next(home.glob("*/seeds/0/prefs.sqlite")).parent
        db = PreferenceDB(folder / "prefs.sqlite")
        while "task" not in db.meta() and time.monotonic() < deadline:  # written just after
            time.sleep(0.1)
        assert db.meta()["task"] == "reach the centre"
        answered = 0
        while answered < 5 and time.monotonic() < deadline:
            for q, _, _ in db.next_queries("tess", 5 - answered):
                db.answer(q, "left", "tess")
                answered += 1
            time.sleep(0.05)
        # the preset asks for half the labels up front: the seed waits for 20 - 5 more
        while time.monotonic() < deadline:
            status = json.loads((folder / "status.json").read_text())
            if status.get("labels_needed") == 15:
                break
            time.sleep(0.05)
        assert status["status"] == "waiting" and status["labels_needed"] == 15
        db.set_meta(labels_ended_at=time.time(), labels_ended_by="tess")  # what the page does
        _, err = proc.communicate(timeout=300)
    finally:
        stop_command(proc)
    assert proc.returncode == 0, err
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "finished" and status["labels"] == 5
    assert status["labels_ended_early"]["by"] == "tess"
    assert status["labels_ended_early"]["labels"] == 5
    assert db.counts()["labeled"] == 5 and db.counts()["pending"] <= 20
    db.close()


def person_run(home, delay: float) -> tuple[dict, list]:
    """A small human-labeled MovingDot run answered through its database by a scripted person
    (the clip whose dot ends nearer the centre is better), `delay` seconds after each query
    appears. Returns the run record and the labels."""
    from backflip.envs.moving_dot import CENTRE, HEIGHT, WIDTH

    args = [
        "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--labeler", "human",
        "--labels", "30", "--steps", "6144", "--set", "num_steps=64", "--set", "epochs=2",
        "--set", "prefs.pretrain_updates=20", "--set", "prefs.round_updates=10",
        "--set", "prefs.tick_steps=1024", "--set", "prefs.rm_updates_per_kstep=5",
        "--set", "prefs.reward_input=progress", "--set", "eval_episodes=2",
        "--set", "env.max_episode_steps=100", "--set", "prefs.max_pending=4",
        "--seed-list", "3", "--no-progress", "--json",
    ]  # fmt: skip
    proc = start_cli(home, args)
    try:
        deadline = time.monotonic() + 300
        while not list(home.glob("*/seeds/3/prefs.sqlite")) and time.monotonic() < deadline:
            time.sleep(0.05)
        db = PreferenceDB(next(home.glob("*/seeds/3/prefs.sqlite")))

        def end(sid):
            x, y = db.segment(sid).obs[-1]
            return np.hypot(x * WIDTH - CENTRE[0], y * HEIGHT - CENTRE[1])

        while proc.poll() is None and time.monotonic() < deadline:
            for q, left, right in db.pending(1):
                time.sleep(delay)
                choice = "left" if end(left) < end(right) else "right"
                db.answer(q, "equal" if end(left) == end(right) else choice, "scripted")
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_command(proc)
    assert proc.returncode == 0, err
    labels = db.labels()
    db.close()
    return as_json(out), labels


@pytest.mark.slow
def test_a_persons_run_depends_on_the_answers_not_on_when_they_come(tmp_path):
    # lockstep (prefs.max_debt=0, the default): each label is asked when it falls due and the
    # policy waits for it, and the pairs are chosen when asked for, whatever fits in the database
    # (4 pending here, 15 initial labels), so a quick and a slow person giving the same answers
    # see the same pairs and train the same reward model and the same policy
    (tmp_path / "quick").mkdir(), (tmp_path / "slow").mkdir()
    quick, quick_labels = person_run(tmp_path / "quick", delay=0.0)
    slow, slow_labels = person_run(tmp_path / "slow", delay=0.15)
    assert len(quick_labels) == 30 and quick_labels == slow_labels
    mq = read_metrics(f"{quick['dir']}/seeds/3/metrics.csv")
    ms = read_metrics(f"{slow['dir']}/seeds/3/metrics.csv")
    assert ms["prefs/wait_s"][1][-1] > mq["prefs/wait_s"][1][-1]
    for name in ("reward_model/val_loss", "train/entropy", "prefs/true_return_mean"):
        assert np.array_equal(mq[name][1], ms[name][1]), name
    assert quick["seeds"][0]["final_eval_return"] == slow["seeds"][0]["final_eval_return"]


def test_a_human_run_without_a_task_statement_asks_for_one(cli, home):
    # no preset for CartPole-v1, and no terminal to ask at: refused before anything is created
    bad = cli(
        "prefs", "train", "ppo", "--env", "CartPole-v1", "--labeler", "human", check=False
    )  # fmt: skip
    assert bad.returncode == 2 and "prefs.task" in bad.stderr and "Traceback" not in bad.stderr
    assert not [p for p in home.iterdir() if p.is_dir()]


# --- the reward CNN's fast paths (channels-last, the fused ensemble, float32 inputs, strides) -----


def image_model(members=3, frames=4, seed=0, **kwargs) -> RewardModel:
    """A CNN reward model with non-trivial batchnorm statistics and input normalization."""
    torch.manual_seed(seed)
    space = gym.spaces.Box(0, 255, (frames, 84, 84), np.uint8)
    model = RewardModel(space, gym.spaces.Discrete(6), members=members, dropout=0.5, **kwargs)
    rng = np.random.default_rng(seed)
    model.observe(rng.integers(0, 256, (64, frames, 84, 84), dtype=np.uint8))
    for net in model.nets:  # as after training: running statistics far from (0, 1)
        for bn in (m for m in net.convs if isinstance(m, torch.nn.BatchNorm2d)):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.2, 0.2)
        for m in net.convs:  # keypoints: each channel its own softmax temperature
            if hasattr(m, "temperature"):
                m.temperature.data.uniform_(0.5, 3.0)
    return model


def frames(n, lead=(), frames_=4, seed=1):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (*lead, n, frames_, 84, 84), dtype=np.uint8)
    return obs, rng.integers(0, 6, (*lead, n))


def test_the_channels_last_reward_cnn_computes_the_nchw_cnns_outputs_and_gradients():
    torch.manual_seed(0)
    fast = RewardNet((4, 84, 84), act_dim=6, dropout=0.0)
    slow = RewardNet((4, 84, 84), act_dim=6, dropout=0.0, channels_last=False)
    slow.load_state_dict(fast.state_dict())
    conv = fast.convs[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    obs, act = torch.randn(3, 2, 5, 4, 84, 84), torch.randn(3, 2, 5, 6)
    for mode in ("train", "eval"):  # batchnorm on batch statistics, then on running ones
        outs = []
        for net in (fast, slow):
            getattr(net, mode)()
            net.zero_grad()
            out = net(obs, act)
            out.sum().backward()
            outs.append(out)
        assert outs[0].shape == (3, 2, 5)
        assert torch.allclose(outs[0], outs[1], rtol=1e-4, atol=1e-5), mode
        for (name, p_f), p_s in zip(fast.named_parameters(), slow.parameters(), strict=True):
            if name == "absorb":  # the absorbing state's value: no step here is absorbed
                assert p_f.grad is None and p_s.grad is None
                continue
            assert torch.allclose(p_f.grad, p_s.grad, rtol=1e-3, atol=1e-5), (mode, name)


@torch.no_grad()
@pytest.mark.parametrize(("heads", "cnn"), [(False, "paper"), (True, "paper"), (True, "keypoints")])
def test_the_fused_cnn_ensemble_equals_the_members_one_by_one(heads, cnn):
    model = image_model(action_heads=heads, cnn=cnn)
    obs, act = frames(10)
    o, a = model.encode(obs, act)
    one_by_one = torch.stack([net.eval()(o, a) for net in model.nets])
    fused = model.raw_outputs(obs, act)
    assert fused.shape == (3, 10)
    assert torch.allclose(fused, one_by_one, rtol=1e-4, atol=1e-4)
    # pairs (B, 2, L, ...) too, and the snapshot the policy's wrapper uses
    pobs, pact = frames(5, lead=(3, 2))
    po, pa = model.encode(pobs, pact)
    pairs = torch.stack([net(po, pa) for net in model.nets])
    assert torch.allclose(model.raw_outputs(pobs, pact), pairs, rtol=1e-4, atol=1e-4)
    model.calibrate(obs, act)
    snap = model.snapshot()
    expect = (one_by_one.numpy() - model.out_mean[:, None]) / model.out_std[:, None]
    assert np.allclose(snap.member_rewards(obs, act), expect, rtol=1e-3, atol=1e-4)
    # query selection: the ensemble's variance of P̂, from the fused outputs
    ret = pairs.sum(-1)
    var = np.var(torch.sigmoid(ret[..., 0] - ret[..., 1]).numpy(), 0)
    left, right = (pobs[:, 0], pact[:, 0]), (pobs[:, 1], pact[:, 1])
    assert np.allclose(model.preference_variance(left, right), var, rtol=1e-3, atol=1e-6)


def test_the_fused_ensemble_follows_training():
    # rebuilt after every update: a stale fused copy would keep giving the old rewards
    model = image_model(members=2)
    obs, act = frames(6)
    before = model.raw_outputs(obs, act)
    pairs = image_pairs(model, 8)
    model.train_step(pairs)
    o, a = model.encode(obs, act)
    with torch.no_grad():
        after = torch.stack([net.eval()(o, a) for net in model.nets])
    assert not torch.allclose(after, before, atol=1e-4)
    assert torch.allclose(model.raw_outputs(obs, act), after, rtol=1e-4, atol=1e-4)


def test_image_inputs_are_normalized_in_float32_as_the_float64_formula_says():
    model = image_model()
    obs, act = frames(7)
    o, _ = model.encode(obs, act)
    rms = model.obs_rms
    expect = np.clip((obs.astype(np.float64) - rms.mean) / np.sqrt(rms.var + 1e-8), -5, 5)
    assert o.dtype == torch.float32
    assert np.allclose(o.numpy(), expect, rtol=1e-5, atol=1e-5)
    model.observe(obs)  # new statistics: the cached float32 copies follow
    o2, _ = model.encode(obs, act)
    expect = np.clip((obs.astype(np.float64) - rms.mean) / np.sqrt(rms.var + 1e-8), -5, 5)
    assert np.allclose(o2.numpy(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("image", [False, True])
def test_action_heads_give_one_output_per_action_and_the_action_picks_it(image):
    # r̂(o, a) is the a-th output of a network of the observation alone: the action is not an
    # input, so the same observation gives the same outputs whatever the action
    torch.manual_seed(0)
    shape = (1, 84, 84) if image else (3,)
    net = RewardNet(shape, act_dim=5, hidden=(64,) if image else (64, 64), heads=True).eval()
    assert net.body[-1].out_features == 5
    assert net.body[0].in_features == (16 * 7 * 7 if image else 3)  # the action is no input
    obs = torch.randn(2, 2, 4, *shape)
    feat = net._conv(obs) if image else obs
    outputs = net.body(feat)  # (2, 2, 4, 5)
    act = torch.randint(0, 5, (2, 2, 4))
    onehot = torch.nn.functional.one_hot(act, 5).float()
    picked = net(obs, onehot)
    assert picked.shape == (2, 2, 4)
    assert torch.equal(picked, outputs.gather(-1, act[..., None]).squeeze(-1))
    assert not torch.allclose(outputs[..., 0], outputs[..., 1])  # the actions differ


@pytest.mark.slow
def test_action_heads_learn_an_action_dependent_reward_from_frames():
    # MovingDot84 from oracle labels on short random clips: with the action an input beside the
    # CNN's 784 features (the paper's layout) the reward model learns where the clips were and
    # nothing of the actions (its greedy action earns +1 at about chance: 0.45); with one output
    # per action it learns which move goes towards the centre from 75% of positions, and with
    # the keypoints CNN (coordinates, not a weight per position) from all but a few (0.998)
    # (docs/preferences.md, "From frames")
    from backflip.envs import moving_dot as md
    from backflip.prefs.reward_model import PairSet

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    env = gym.make("MovingDot84-v0")
    segs, length = {}, 10
    while len(segs) < 400:
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        for _ in range(5):
            o, a, r = [], [], 0.0
            for _ in range(length):
                act = int(rng.integers(5))
                o.append(obs)
                a.append(act)
                obs, rew, *_ = env.step(act)
                r += rew
            segs[len(segs)] = (np.stack(o), np.array(a), r)
    rows = [(q, 2 * q, 2 * q + 1, float(np.sign(segs[2 * q][2] - segs[2 * q + 1][2]) + 1) / 2)
            for q in range(200)]  # fmt: skip
    pos = np.stack([rng.integers(0, 157, 500), rng.integers(0, 207, 500)], 1)
    grid = np.stack([md.draw(p, 84, 84)[None, :, :, 0] for p in pos])
    towards = md.move(pos[:, None], np.arange(5))[1] > 0
    share = {}
    for heads, cnn in ((False, "paper"), (True, "paper"), (True, "keypoints")):
        torch.manual_seed(0)
        model = RewardModel(
            env.observation_space,
            env.action_space,
            members=1,
            batch_size=64,
            lr=1e-3,
            rng=np.random.default_rng(1),
            action_heads=heads,
            cnn=cnn,
        )
        model.observe(np.concatenate([s[0] for s in segs.values()]))
        pairs = PairSet(1, np.random.default_rng(2))
        pairs.sync(rows, lambda i: segs[i][:2])
        for _ in range(100):
            model.train_step(pairs)
        pred = np.stack([model.raw_rewards(grid, np.full(500, a))[0] for a in range(5)], 1)
        share[heads, cnn] = towards[np.arange(500), pred.argmax(1)].mean()
    assert share[False, "paper"] < 0.6 and share[True, "paper"] > 0.7, share
    assert share[True, "keypoints"] > 0.9, share


def image_pairs(model, n, length=8):
    from backflip.prefs.reward_model import PairSet

    rng = np.random.default_rng(3)
    pairs = PairSet(len(model.nets), np.random.default_rng(4))
    rows = [(q, 2 * q, 2 * q + 1, float(q % 2)) for q in range(n)]
    segs = {
        s: (
            rng.integers(0, 256, (length, *model.obs_shape), dtype=np.uint8),
            rng.integers(0, 6, length),
        )
        for s in range(2 * n)
    }
    pairs.sync(rows, segs.__getitem__)
    pairs.is_val[:] = False
    return pairs


def test_a_frame_stride_sums_every_kth_step_and_is_unbiased_over_its_offsets():
    model = image_model(members=1)
    pairs = image_pairs(model, 4, length=25)
    net = model.nets[0].eval()
    idx = np.arange(4)
    obs, act, _, _ = pairs.batch(idx, model)
    full = model.pair_returns(net, obs, act)
    k = 4
    crops = []
    for offset in range(k):
        o, a, _, _ = pairs.batch(idx, model, offset, k)
        assert o.shape[2] == len(range(offset, 25, k))
        assert torch.equal(o, obs[:, :, offset::k])
        crops.append(k * model.pair_returns(net, o, a))
    assert torch.allclose(torch.stack(crops).mean(0), full, rtol=1e-4, atol=1e-3)


def test_a_long_phase_announces_its_progress_with_an_eta(monkeypatch):
    from backflip.prefs import pipeline
    from backflip.summary import status_text

    said = []

    class Run:
        def set_status(self, status, **detail):
            said.append({"status": status, **detail})

    pipe = pipeline.Pipeline.__new__(pipeline.Pipeline)
    pipe.run, pipe._phase, pipe._phase_said = Run(), None, 0.0
    clock = iter([100.0, 101.0, 103.0, 103.5, 110.0])
    monkeypatch.setattr(pipeline.time, "monotonic", lambda: next(clock))
    pipe.progress("pretraining the reward model", 0, 100, "updates")  # t=100: the start
    pipe.progress("pretraining the reward model", 10, 100, "updates")  # t=101: too soon
    pipe.progress("pretraining the reward model", 30, 100, "updates")  # t=103: 10 updates/s
    pipe.progress("pretraining the reward model", 31, 100, "updates")  # t=103.5: too soon
    pipe.progress("pretraining the reward model", 100, 100, "updates")  # t=110: done, said
    assert [s["done"] for s in said] == [0, 30, 100]
    assert said[0]["eta_s"] is None and said[1]["eta_s"] == pytest.approx(7.0)
    assert status_text(said[0]) == ("pretraining the reward model 0/100 updates, ETA unknown yet")
    assert status_text(said[1]) == "pretraining the reward model 30/100 updates, ETA 7.0 s"
    assert status_text(said[2]) == "pretraining the reward model 100/100 updates"
    pipe.end_phase()
    assert said[-1] == {"status": "running"}


def test_the_long_phases_show_in_the_plain_progress_output(cli):
    # no terminal: the launcher prints each phase as it starts (and every 30 s while it lasts)
    out = cli(
        "prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--steps", "1024",
        "--labels", "20", "--set", "num_steps=64", "--set", "epochs=1",
        "--set", "prefs.pretrain_updates=20", "--set", "eval_episodes=1",
    )  # fmt: skip
    for phase in (
        "gathering clips from a random policy 0/",
        "initial labels 0/10 labels",  # the preset asks half up front
        "pretraining the reward model 0/20 updates",
    ):
        assert f"seed 0: {phase}" in out.stderr, out.stderr
    record = json.loads(cli("show", "last", "--json").stdout)
    assert "phase" not in record["seeds"][0] and record["seeds"][0]["status"] == "finished"
    # the printed record shows the preference settings beside the policy's
    shown = cli("show", "last").stdout
    assert "  prefs: " in shown and "labels=20" in shown and "pretrain_updates=20" in shown


def test_stacked_frames_keep_one_copy_of_each_frame_and_give_the_observations_back():
    from backflip.prefs.reward_model import StackedFrames

    rng = np.random.default_rng(0)
    stream = rng.integers(0, 256, (28, 84, 84), dtype=np.uint8)  # 25 steps of 4 stacked frames
    obs = np.stack([stream[t : t + 4] for t in range(25)])
    kept = StackedFrames(obs)
    assert kept.frames.shape == (28, 84, 84) and kept.raw is None
    assert np.array_equal(kept.obs, obs) and np.array_equal(kept.obs[1::4], obs[1::4])
    broken = obs.copy()
    broken[3, 0, 0, 0] ^= 1  # not a frame stack any more: kept as it is
    assert StackedFrames(broken).frames is None
    assert np.array_equal(StackedFrames(broken).obs, broken)
    vectors = rng.random((25, 2))
    assert StackedFrames(vectors).obs is vectors or np.array_equal(
        StackedFrames(vectors).obs, vectors
    )


def test_replay_relabel_recomputes_every_stored_reward():
    from backflip.buffers import ReplayBuffer

    rb = ReplayBuffer(10, (2,), (1,), seed=0)
    for i in range(13):  # wraps around the ring
        rb.add(
            np.full(2, i, np.float32), np.full(1, -i, np.float32), 0.5, np.zeros(2), False, False
        )
    rb.relabel(lambda obs, act, nxt: obs[:, 0] * 10 + act[:, 0] + nxt[:, 0], chunk=3)
    assert np.array_equal(rb.rewards, rb.obs[:, 0] * 10 + rb.actions[:, 0])  # next_obs are 0
    assert rb.rewards.dtype == np.float32 and len(rb) == 10


@pytest.mark.slow
@pytest.mark.parametrize("relabel", [True, False])
def test_an_off_policy_learner_trains_on_the_newest_reward_model(cli, relabel):
    out = cli(
        "prefs", "train", "sac", "--env", "Pendulum-v1", "--steps", "2400", "--labels", "30",
        "--set", "learning_starts=400", "--set", "prefs.pretrain_updates=20",
        "--set", "prefs.round_updates=10", "--set", "prefs.tick_steps=400",
        "--set", "prefs.rm_updates_per_kstep=20", "--set", "eval_episodes=2",
        "--set", f"prefs.relabel={str(relabel).lower()}", "--seeds", "1", "--no-progress",
        "--json",
    )  # fmt: skip
    record = as_json(out.stdout)
    m = read_metrics(f"{record['dir']}/seeds/0/metrics.csv")
    rounds = m["reward_model/updates"][1][-1]
    assert rounds > 20  # the model kept training while SAC did
    lag, relabels = m["prefs/replay_reward_lag"][1], m["prefs/relabels"][1]
    rules = {f["rule"] for f in record["findings"]}
    if relabel:  # every new model relabels the buffer before SAC's next step
        assert relabels[-1] >= 3 and lag[-1] == 0
        assert "stale-replay-rewards" not in rules
    else:  # the stale rewards show in the metric the doctor reads, and the doctor says so
        assert relabels[-1] == 0 and lag[-1] >= 3
        assert "stale-replay-rewards" in rules


def test_agreement_with_the_true_reward_leaves_out_the_pairs_it_calls_equal():
    from backflip.prefs.people import cohen_kappa, oracle_agreement, pace

    def a(choice, left, right, t=0.0):
        return {"choice": choice, "left_true": left, "right_true": right, "answered_at": t}

    answers = [
        a("left", 3, 1),
        a("right", 3, 1),
        a("left", 2, 2),
        a("skip", 5, 0),
        a("equal", 1, 4),
    ]
    assert oracle_agreement(answers) == {"agree": 1, "n": 3, "rate": 1 / 3}
    assert oracle_agreement([a("left", 2, 2)]) is None  # a constant true reward has no opinion
    assert cohen_kappa(["left", "right"], ["left", "right"]) == 1.0
    assert cohen_kappa(["left", "left"], ["left", "left"]) is None  # chance agreement is total
    times = [a("left", 1, 0, t) for t in (0.0, 10.0, 20.0)]
    assert pace(times, now=20.0) == pytest.approx(6.0)  # 2 answers in 20 s
    assert pace(times, now=40.0) == pytest.approx(3.0)  # stopped answering: the pace falls


@pytest.mark.parametrize(
    ("act_space", "heads", "use_actions"),
    [
        (gym.spaces.Discrete(5), False, True),
        (gym.spaces.Discrete(5), True, True),
        (gym.spaces.Box(-2, 2, (3,), np.float32), False, True),
        (gym.spaces.Discrete(5), False, False),
    ],
)
def test_the_numpy_snapshot_gives_the_members_rewards(act_space, heads, use_actions):
    """A snapshot of MLP members computes the policy's reward in NumPy (the hot path of every
    env step): the torch members' numbers up to float32 rounding, absorbed steps included."""
    from backflip.prefs.reward_model import RewardModel

    rng = np.random.default_rng(0)
    model = RewardModel(
        gym.spaces.Box(-np.inf, np.inf, (6,), np.float32),
        act_space,
        members=3,
        reward_std=0.7,
        rng=rng,
        action_heads=heads,
        use_actions=use_actions,
    )
    obs = rng.normal(2, 3, (40, 6)).astype(np.float32)
    model.observe(obs)
    with torch.no_grad():
        for net in model.nets:
            for p in net.parameters():
                p.normal_(0, 0.5)
    act = np.stack([act_space.sample() for _ in range(40)])
    absorbing = rng.random(40) < 0.3
    model.calibrate(obs, act, absorbing=absorbing)
    expected = model.reward(obs, act, absorbing)  # the torch members
    snap = model.snapshot()
    assert snap.fused is not None
    got = snap.reward(obs, act, absorbing)
    assert np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert np.allclose(snap.raw_rewards(obs, act, absorbing), model.raw_rewards(obs, act, absorbing),
                       rtol=1e-4, atol=1e-5)  # fmt: skip


def test_a_model_fitted_to_ties_alone_pays_the_same_for_every_step():
    """Until some label prefers one clip of its pair, every step is paid −reward_std, absorbed
    ones included, whatever the networks say: a model fitted to "equally good" alone has
    learned that nothing matters (a learner that normalizes its advantages would follow its
    leftover variation at full scale), and a negative constant keeps the learner's value
    estimates optimistic about states it has not seen (Acrobot: the goal found on 8 of 8
    seeds, 4 of 8 when paid the model's variation or 0)."""
    from backflip.prefs.pipeline import policy_reward
    from backflip.prefs.reward_model import PairSet, RewardModel

    rng = np.random.default_rng(0)
    model = RewardModel(
        gym.spaces.Box(-np.inf, np.inf, (6,), np.float32), gym.spaces.Discrete(3), members=3,
        reward_std=0.7, rng=rng,
    )  # fmt: skip
    obs = rng.normal(0, 3, (40, 6)).astype(np.float32)
    act, absorbing = rng.integers(0, 3, 40), rng.random(40) < 0.3
    model.observe(obs)
    model.calibrate(obs, act, absorbing=absorbing)
    informed = model.snapshot().reward(obs, act, absorbing)
    assert np.std(informed) > 0.1  # the same networks, informed: a reward that varies
    flat = model.snapshot(informed=False)
    for kind in ("obs+action", "next-obs", "progress"):
        got = policy_reward(flat, kind, obs, act, obs[::-1], absorbing, absorbing[::-1])
        assert np.array_equal(got, np.full(40, -0.7)), kind
    assert np.array_equal(model.snapshot().reward(obs, act, absorbing), informed)  # unchanged

    segs = {
        i: (rng.normal(size=(5, 6)).astype(np.float32), np.zeros(5, np.int64)) for i in range(4)
    }
    pairs = PairSet(3, np.random.default_rng(1))
    pairs.sync([(0, 0, 1, 0.5), (1, 2, 3, 0.5)], segs.__getitem__)
    assert not pairs.informative()
    pairs.sync([(0, 0, 1, 0.5), (1, 2, 3, 0.5), (2, 0, 3, 1.0)], segs.__getitem__)
    assert pairs.informative()


def test_the_reward_scale_holds_when_the_policy_is_good(tmp_path):
    """The reward's offset and scale come from recent experience and the labeled clips, half
    each: when every recent step is alike (a policy that has learned to balance), the scale is
    still the one the labels tell apart, not the model's leftover variation among them (over
    recent experience alone it fell to its floor and an end's value grew 25x: CartPole)."""
    import contextlib
    from types import SimpleNamespace

    from backflip.config import PrefsConfig, TrainConfig, resolve
    from backflip.prefs.pipeline import CALIBRATION_STEPS, Pipeline
    from backflip.prefs.segments import SegmentStore

    rng = np.random.default_rng(0)
    plain = resolve("ppo", "MovingDotLowDim-v0", [0], 1000).to_dict()  # 2 floats, 5 actions
    pcfg = PrefsConfig(members=3)
    cfg = TrainConfig.from_dict({**plain, "kind": "prefs", "prefs": pcfg.to_dict()})
    tel = SimpleNamespace(timer=lambda name: contextlib.nullcontext())
    run = SimpleNamespace(seed=0, replay_buffers=[], tel=tel, out_dir=tmp_path)
    pipe = Pipeline(cfg, run)
    model = pipe.model
    good = np.full((6, 2), 0.5, np.float32)  # the policy's recent clips: one state, held
    pipe.store = SegmentStore(100)
    pipe.store.add([Segment(good, np.zeros(6, np.int64), np.zeros(6)) for _ in range(20)])
    labeled = rng.random((8, 6, 2)).astype(np.float32)  # the labeled clips: all over the square
    pipe.pairs.sync(
        [(q, 2 * q, 2 * q + 1, 1.0) for q in range(4)],
        lambda sid: (labeled[sid], np.zeros(6, np.int64), np.arange(6) >= 4),
    )
    model.observe(labeled.reshape(-1, 2))
    with torch.no_grad():
        for net in model.nets:
            for p in net.parameters():
                p.normal_(0, 0.5)
    obs, act, absorbing = pipe.calibration_steps()
    assert len(obs) == CALIBRATION_STEPS
    recent = (obs == 0.5).all(1)
    assert recent.sum() == CALIBRATION_STEPS // 2  # half of each (the labeled: never 0.5 exactly)
    assert not absorbing[recent].any() and absorbing[~recent].mean() > 0.2  # their flags kept
    model.calibrate(obs, act, absorbing=absorbing)
    mixed = model.out_std.copy()
    model.calibrate(*pipe.store.sample_steps(CALIBRATION_STEPS, rng))
    assert (model.out_std == model.min_std).all()  # recent experience alone: the floor
    assert (mixed > 5 * model.min_std).all()
    pipe.close()


def test_the_true_return_of_each_episode_is_kept_beside_the_learned_one(tmp_path):
    """A preference run's episodes.csv holds r̂; `true_episode` keeps the task's return episode
    by episode in true_episodes.csv (what the doctor reads), written with the metric rows and
    cut with them before a resume."""
    from backflip.runs.layout import TRUE_EPISODES
    from backflip.telemetry import Telemetry, read_episodes, truncate_logs

    tel = Telemetry(tmp_path, tensorboard=False)
    tel.episode(100, 0.5, 100)
    for step, ret in ((100, -1000.0), (150, -13.0), (300, -15.0)):
        tel.true_episode(step, ret, 20)
    tel.log(x=1.0)
    tel.dump(300)
    tel.close()
    steps, rets, _ = read_episodes(tmp_path / TRUE_EPISODES)
    assert steps.tolist() == [100, 150, 300] and rets.tolist() == [-1000.0, -13.0, -15.0]
    assert read_episodes(tmp_path / "episodes.csv")[1].tolist() == [0.5]
    truncate_logs(tmp_path, 200)
    assert read_episodes(tmp_path / TRUE_EPISODES)[0].tolist() == [100, 150]
    plain = Telemetry(tmp_path / "plain", tensorboard=False)  # an ordinary run has none
    plain.dump(1)
    plain.close()
    assert not (tmp_path / "plain" / TRUE_EPISODES).exists()
