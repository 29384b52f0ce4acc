"""Each rule on series built to show (or not show) its signal, and the rule list in docs/doctor.md.

The broken and healthy *training runs* are in test_doctor_runs.py; these pin each rule's
condition (its threshold and its silence on the healthy shape) cheaply.
"""

import numpy as np

from backflip.doctor import RULES, SEED_RULES, diagnose
from backflip.doctor.report import catalog_markdown, summary_lines
from backflip.doctor.rules import reversals
from backflip.doctor.seeds import SeedSet, seed_bimodal, seed_spread, seed_success
from backflip.doctor.series import RunData, progress
from tests.conftest import ROOT

N, END = 60, 60_000
STEPS = np.linspace(END / N, END, N).astype(int)
rng = np.random.default_rng(0)


def data(episodes=None, hp=None, **series) -> RunData:
    metrics = {
        k.replace("__", "/"): (STEPS.copy(), np.asarray(v, float)) for k, v in series.items()
    }
    return RunData("seed 0", metrics, episodes=episodes, hp=hp or {}, budget=END)


def fired(d: RunData) -> dict:
    return {f.rule: f for f in diagnose(d)}


def learning_returns():
    return np.linspace(20, 480, N) + rng.normal(0, 5, N)


def flat_returns():
    return 22 + rng.normal(0, 3, N)


def test_every_rule_is_documented_with_its_threshold_and_source():
    doc = (ROOT / "docs" / "doctor.md").read_text()
    assert catalog_markdown() in doc, (
        "docs/doctor.md is stale: python -m backflip.doctor.report --write docs/doctor.md"
    )
    for r in [*RULES, *SEED_RULES]:
        assert r.threshold and r.source and r.cause and r.check_next, r.id


def test_nonfinite_names_the_first_step_and_where_it_started():
    reward = np.ones(N)
    reward[10:] = np.nan
    loss = np.ones(N)
    loss[11:] = np.inf
    f = fired(data(env__reward_mean=reward, train__value_loss=loss))["nonfinite"]
    assert f.severity == "error" and f.step == STEPS[10] and f.metric == "env/reward_mean"
    assert "the environment" in f.message and f"{STEPS[10]:,}" in f.message


def test_entropy_flat_with_flat_return_is_an_error_but_not_when_learning():
    ent = 0.99 + rng.normal(0, 0.003, N)
    f = fired(data(train__entropy_norm=ent, rollout__ep_return_mean=flat_returns()))
    assert f["entropy-flat"].severity == "error"
    ok = fired(data(train__entropy_norm=ent, rollout__ep_return_mean=learning_returns()))
    assert "entropy-flat" not in ok


def test_entropy_collapse_early_with_low_return():
    ent = np.r_[np.linspace(1, 0.01, 5), np.full(N - 5, 0.01)]
    f = fired(data(train__entropy_norm=ent, rollout__ep_return_mean=9 + rng.normal(0, 0.3, N)))
    assert f["entropy-collapse"].severity == "error" and f["entropy-collapse"].step <= 0.2 * END
    late = np.r_[np.linspace(1, 0.3, N - 5), np.full(5, 0.01)]  # falls late: not "premature"
    assert "entropy-collapse" not in fired(
        data(train__entropy_norm=late, rollout__ep_return_mean=flat_returns())
    )


def test_entropy_oscillation_counts_large_reversals_only():
    assert reversals(np.array([1, 0.8, 0.6, 0.4, 0.2]), 0.2) == 0
    assert reversals(np.array([1, 0.5, 1, 0.5, 1, 0.5]), 0.2) == 4
    swings = 0.5 + 0.3 * np.sign(np.sin(np.arange(N) / 2))
    assert fired(data(train__entropy_norm=swings))["entropy-oscillation"].severity == "warning"
    # on a preference run the reward moves every round, and the entropy may follow: said, not
    # warned (whether the run learns is for the rules on its true return)
    for returns in (learning_returns(), flat_returns()):
        moving = data(train__entropy_norm=swings, prefs__true_return_mean=returns)
        moving.learned_reward = True
        assert fired(moving)["entropy-oscillation"].severity == "info"
    noisy_decline = np.linspace(1, 0.3, N) + rng.normal(0, 0.04, N)
    assert "entropy-oscillation" not in fired(data(train__entropy_norm=noisy_decline))


def test_kl_rules():
    kl = np.full(N, 0.01)
    assert not {"kl-negative", "kl-large"} & set(fired(data(train__approx_kl=kl)))
    neg = kl.copy()
    neg[20] = -0.02
    assert fired(data(train__approx_kl=neg))["kl-negative"].step == STEPS[20]
    tiny = kl.copy()
    tiny[20] = -1e-9  # float rounding of a ~0 KL is not a bug
    assert "kl-negative" not in fired(data(train__approx_kl=tiny))
    blow = kl.copy()
    blow[1] = 5.0
    assert fired(data(train__approx_kl=blow))["kl-large"].severity == "error"
    one_spike = kl.copy()
    one_spike[30] = 1.2
    assert fired(data(train__approx_kl=one_spike))["kl-large"].severity == "info"
    assert fired(data(train__approx_kl=np.full(N, 0.2)))["kl-large"].severity == "warning"


def test_explained_variance_ignores_fitted_constant_targets():
    ev = rng.normal(-0.02, 0.05, N)
    flat = flat_returns()  # the return says something is wrong too (see the issue-23 tests)
    f = fired(data(train__explained_var=ev, rollout__ep_return_mean=flat))
    assert f["explained-variance"].severity == "error"
    healthy = np.r_[np.linspace(0, 0.95, 20), rng.normal(-1, 1, N - 20)]  # targets all 50
    vloss = np.r_[np.full(20, 5.0), np.full(N - 20, 1e-6)]
    assert "explained-variance" not in fired(
        data(
            train__explained_var=healthy,
            train__value_loss=vloss,
            rollout__return_target_mean=np.full(N, 50.0),
        )
    )


def test_explained_variance_says_nothing_where_every_reward_was_zero():
    # a run paid 0 on every step (a sparse reward not reached yet; a preference run whose model
    # paid 0 while its labels were ties: -3 to -9 on Acrobot): its value targets are the value
    # net's own noise, not a fault
    ev = rng.normal(-5, 2, N)
    flat = flat_returns()
    zero = np.zeros(N)
    assert "explained-variance" not in fired(
        data(train__explained_var=ev, rollout__ep_return_mean=flat, env__reward_min=zero,
             env__reward_max=zero)
    )  # fmt: skip
    # rewards that are all equal but not 0 (CartPole's +1) leave targets to explain
    ones = np.ones(N)
    f = fired(
        data(train__explained_var=ev, rollout__ep_return_mean=flat, env__reward_min=ones,
             env__reward_max=ones)
    )  # fmt: skip
    assert f["explained-variance"].severity == "error"


def test_scale_rules():
    f = fired(data(env__reward_min=np.full(N, 1000.0), env__reward_max=np.full(N, 1000.0)))
    assert f["reward-scale"].severity == "warning"
    sb3_style = data(rollout__ep_return_mean=np.full(N, 2e4), rollout__ep_len_mean=np.full(N, 20.0))
    assert "reward-scale" in fired(sb3_style)
    assert "value-scale" in fired(data(rollout__return_target_absmax=np.full(N, 5e4)))
    assert "value-scale" not in fired(data(rollout__return_target_absmax=np.full(N, 50.0)))
    obs = data(env__obs_absmean_max=np.full(N, 500.0))
    assert fired(obs)["obs-scale"].severity == "warning"
    normalized = data(env__obs_absmean_max=np.full(N, 500.0), hp={"norm_obs": True})
    assert fired(normalized)["obs-scale"].severity == "info"


def test_value_sign_against_reward_sign():
    d = data(
        env__reward_min=np.zeros(N),
        env__reward_max=np.ones(N),
        rollout__value_mean=np.full(N, -3.0),
    )
    assert "value-sign" in fired(d)
    d.metrics["rollout/value_mean"] = (STEPS, np.full(N, 3.0))
    assert "value-sign" not in fired(d)


def test_throughput_decline_needs_a_steady_fall_in_cpu_time():
    falling = 4000 / (1 + np.arange(N) / 20) * (1 + rng.normal(0, 0.02, N))
    f = fired(data(time__sps_cpu=falling, time__sps=falling))["throughput-decline"]
    assert f.severity == "warning" and f.metric == "time/sps_cpu"
    bump = np.full(N, 4000.0)
    bump[25:40] = 1500  # the machine got busy for a while
    assert "throughput-decline" not in fired(data(time__sps_cpu=bump, time__sps=bump))
    busy = fired(data(time__sps_cpu=np.full(N, 4000.0), time__sps=falling))
    assert busy["throughput-decline"].severity == "info"  # wall clock only: contention


def test_throughput_is_compared_from_the_first_update_on():
    """An off-policy agent acts alone until learning_starts, then also updates: a drop, then a
    flat line (SB3 TD3 on Pendulum with rl-zoo's learning_starts=1e4 of 2e4 steps)."""
    sps = np.where(STEPS < END / 2, 9500.0, 83.0) * (1 + rng.normal(0, 0.02, N))
    loss = (STEPS[STEPS >= END / 2], np.ones(int((STEPS >= END / 2).sum())))
    d = data(time__sps_cpu=sps, time__sps=sps)
    assert "throughput-decline" in fired(d)  # without a loss: no way to tell it from a leak
    d.metrics["train/critic_loss"] = loss
    assert "throughput-decline" not in fired(d)
    falling = 4000 / (1 + np.arange(N) / 20)  # work that grows while it updates is still found
    d = data(time__sps_cpu=falling, time__sps=falling, loss__q=np.ones(N))
    assert fired(d)["throughput-decline"].severity == "warning"


def test_memory_growth_and_update_size():
    rss = np.linspace(300, 1500, N)
    assert "memory-growth" in fired(data(sys__rss_mb=rss))
    assert "memory-growth" not in fired(data(sys__rss_mb=np.full(N, 300.0)))
    f = fired(data(train__update_ratio=np.full(N, 1e-8)))["update-size"]
    assert "too small" in f.message


def test_grad_spikes_where_exploration_ends_are_expected_and_others_are_not():
    """The rows right after a preference run's exploration ends (`prefs/exploring` 1 -> 0: the
    reward changed from the novelty bonus to r̂) spike by design; the same spikes elsewhere are
    a warning."""
    norm = 1.0 + rng.uniform(0, 0.1, N)
    norm[[20, 22, 24]] = 500.0
    exploring = np.where(np.arange(N) < 20, 1.0, 0.0)  # the switch is the 21st row
    assert fired(data(train__grad_norm=norm))["grad-spike"].severity == "warning"
    f = fired(data(train__grad_norm=norm, prefs__exploring=exploring))["grad-spike"]
    assert f.severity == "info" and "exploration ended at step 21,000" in f.message
    assert data(prefs__exploring=exploring).reward_switch == STEPS[20]
    late = norm.copy()
    late[[40, 45, 50]] = 500.0  # and three more, long after the switch
    f = fired(data(train__grad_norm=late, prefs__exploring=exploring))["grad-spike"]
    assert f.severity == "warning" and f.step == STEPS[40]
    assert data(prefs__exploring=np.ones(N)).reward_switch is None  # still exploring


def test_q_divergence_uses_the_discounted_bound():
    d = data(
        hp={"gamma": 0.99},
        env__reward_min=np.ones(N),
        env__reward_max=np.ones(N),
        train__q_mean=np.geomspace(1, 1e5, N),
    )
    assert fired(d)["q-divergence"].severity == "error"
    d.metrics["train/q_mean"] = (STEPS, np.linspace(1, 95, N))
    assert "q-divergence" not in fired(d)


def test_exploration_rules():
    assert "epsilon-stuck" in fired(data(train__epsilon=np.ones(N)))
    assert "epsilon-stuck" not in fired(data(train__epsilon=np.linspace(1, 0.05, N)))
    alpha = np.r_[1.0, np.full(N - 1, 1e-5)]
    assert "alpha-collapse" in fired(data(train__alpha=alpha))
    assert "action-saturation" in fired(data(env__action_clip_frac=np.full(N, 0.95)))


def test_episode_length_rules():
    lens = np.r_[np.full(10, 22.0), np.full(N - 10, 9.0)]
    d = data(
        rollout__ep_len_mean=lens, rollout__ep_len_min=np.full(N, 8.0), rollout__ep_return_mean=lens
    )
    assert "ep-len-collapse" in fired(d)
    const = data(rollout__ep_len_min=np.full(N, 200.0), rollout__ep_len_max=np.full(N, 200.0))
    assert fired(const)["ep-len-constant"].severity == "info"


def test_progress_on_episodes_and_on_a_logged_mean():
    steps = np.arange(1, 2001) * 30
    learn = RunData(
        "s", {}, episodes=(steps, np.linspace(20, 500, 2000), np.ones(2000)), budget=60_000
    )
    assert progress(learn).improved and progress(learn).basis == "episodes"
    flat = RunData(
        "s", {}, episodes=(steps, rng.normal(22, 10, 2000), np.ones(2000)), budget=60_000
    )
    assert not progress(flat).improved
    assert progress(data(rollout__ep_return_mean=learning_returns())).improved
    assert not progress(data(rollout__ep_return_mean=flat_returns())).improved


def test_a_tail_of_early_failures_does_not_hide_that_they_are_gone():
    """CliffWalking from preferences: most early episodes already take the shortest path (-13),
    a tail of them walk until the time limit (-1,000) or fall; late every episode is -13. The
    early standard deviation (~200) is the tail itself; the gate on the mean uses the
    interquartile range (a normal's standard deviation for normal returns) and the run has
    improved. A flat run with such a tail has not."""
    steps = np.arange(1, 2001) * 50
    early = np.where(rng.random(2000) < 0.05, -1000.0, -13.0) - rng.integers(0, 3, 2000) * 2
    cured = np.where(steps <= 15_000, early, -13.0)
    run = RunData("s", {}, episodes=(steps, cured, np.ones(2000)), budget=100_000)
    p = progress(run)
    assert p.basis == "episodes" and p.noise > 150 and p.improved
    assert not progress(
        RunData("s", {}, episodes=(steps, early, np.ones(2000)), budget=100_000)
    ).improved


def test_a_preference_run_is_judged_on_its_true_episodes():
    """A preference run's episodes.csv holds r̂; its true_episodes.csv the task's return, which
    the return rules read episode by episode (Mann–Whitney), as on an ordinary run."""
    steps = np.arange(1, 2001) * 30
    learned = (steps, rng.normal(0, 1, 2000), np.ones(2000))  # r̂: standardized, flat
    true = (steps, np.linspace(20, 500, 2000), np.ones(2000))
    rows = {"prefs/true_return_mean": (STEPS, np.full(N, 22.0))}  # a window that says nothing
    run = RunData("s", rows, episodes=learned, true_episodes=true, budget=60_000)
    run.learned_reward = True
    p = progress(run)
    assert p.basis == "episodes" and p.improved and p.metric == "true_episodes.csv"
    no_file = RunData("s", rows, episodes=learned, budget=60_000)
    no_file.learned_reward = True
    assert progress(no_file).basis == "series" and not progress(no_file).improved


def test_never_better_does_not_judge_by_the_best_of_a_few_long_early_episodes():
    """MovingDot from preferences: 16 episodes in the first 15%, one of them lucky (157), the
    policy learned within them and the late 90th percentile (~130) is what it does now. With
    fewer than 30 early episodes the rule reads the logged windows instead (the rise is there);
    with many early episodes from an unchanged policy it still fires."""
    steps_early = np.linspace(500, 9000, 16).astype(int)
    early = np.r_[np.clip(rng.normal(95, 25, 15), None, 150), 157.0]
    steps_late = np.linspace(9500, 60_000, 200).astype(int)
    late = np.clip(rng.normal(95, 25, 200), None, 150)
    eps = (np.r_[steps_early, steps_late], np.r_[early, late], np.full(216, 750))
    window = np.r_[np.linspace(20, 95, 8), 95 + rng.normal(0, 2, N - 8)]
    few = data(episodes=eps, rollout__ep_return_mean=window)
    assert "never-better" not in fired(few)
    flat_steps = np.linspace(100, 60_000, 600).astype(int)
    flat = rng.normal(95, 25, 600)
    many = data(episodes=(flat_steps, flat, np.full(600, 100)),
                rollout__ep_return_mean=95 + rng.normal(0, 2, N))  # fmt: skip
    assert "never-better" in fired(many)


def test_still_improving_names_a_budget_that_ended_mid_rise():
    """`still-improving` (info): the last 20% of training beats the 20% before it on a finished
    run that has not reached the env's threshold; quiet on a plateau, on a solved task, and while
    the run is still going."""
    rising = data(rollout__ep_return_mean=learning_returns())
    f = fired(rising)["still-improving"]
    assert f.severity == "info" and "still rising when training ended" in f.message
    plateau = np.r_[np.linspace(20, 300, N // 2), 300 + rng.normal(0, 5, N - N // 2)]
    assert "still-improving" not in fired(data(rollout__ep_return_mean=plateau))
    solved = data(rollout__ep_return_mean=np.linspace(-500, -40, N) + rng.normal(0, 3, N))
    solved.env_id = "Acrobot-v1"  # the late mean passes its threshold, -100
    assert "still-improving" not in fired(solved)
    live = RunData("s", {"rollout/ep_return_mean": (STEPS[:40], learning_returns()[:40])},
                   budget=END)  # fmt: skip
    assert "still-improving" not in fired(live)
    # per-episode returns: a test on the episodes of the two windows
    steps = np.arange(1, 2001) * 30

    def ep(rets):  # with the metric rows a run logs beside its episodes
        rows = {"rollout/ep_return_mean": (STEPS, np.interp(STEPS, steps, rets))}
        return RunData("s", rows, episodes=(steps, rets, np.ones(2000)), budget=60_000)

    assert "still-improving" in fired(ep(np.linspace(20, 400, 2000) + rng.normal(0, 30, 2000)))
    flat_end = np.r_[np.linspace(20, 400, 1000), 400 + rng.normal(0, 30, 1000)]
    assert "still-improving" not in fired(ep(flat_end))


def test_preference_rules():
    labels = np.r_[np.full(30, 2.0), np.zeros(N - 30)]
    f = fired(data(prefs__labels_per_s=labels))["prefs-starved"]
    assert f.severity == "error" and f.step == STEPS[29]
    done = data(prefs__labels_per_s=labels, prefs__label_debt=np.zeros(N))
    assert "prefs-starved" not in fired(done)  # the schedule asked for no more
    owed = data(prefs__labels_per_s=labels, prefs__label_debt=np.linspace(0, 40, N))
    assert "prefs-starved" in fired(owed)
    # CEM: the pipeline's rows while the reward model pretrains share step 0, and one
    # generation of 64k steps logs its first row at its end: not ten starved rows
    steps = np.r_[np.zeros(11), 63_936.0, 63_936.0]
    segs = np.r_[260.0, np.zeros(12)]
    cem = RunData("seed 0", {"prefs/segments_per_s": (steps, segs)}, budget=63_936)
    assert "prefs-starved" not in fired(cem)
    stalled = RunData(  # the same rows, then the store stops for three more rows
        "seed 0",
        {"prefs/segments_per_s": (np.r_[steps, 7e4, 8e4, 9e4], np.r_[segs, 0.0, 0.0, 0.0])},
        budget=90_000,
    )
    assert fired(stalled)["prefs-starved"].metric == "prefs/segments_per_s"
    assert "reward-model-fit" in fired(data(reward_model__val_train_loss_ratio=np.full(N, 2.5)))
    # the adaptive L2 (1.2× a round toward the 1.1–1.5 band): falling toward its floor, or at
    # it, with a ratio near 1 is the pipeline at work (quiet); an L2 that does not move is not
    # adapting (the warning); overfitting with the L2 pinned at its ceiling says so
    falling = 1e-4 / 1.2 ** np.arange(N)
    floor, ceiling = np.maximum(falling, 1e-6), np.minimum(1e-4 * 1.2 ** np.arange(N), 1e-3)
    low = np.full(N, 1.02)
    for l2 in (floor, falling):
        quiet = data(reward_model__val_train_loss_ratio=low, reward_model__l2=l2)
        assert "reward-model-fit" not in fired(quiet)
    fixed = data(reward_model__val_train_loss_ratio=low, reward_model__l2=np.full(N, 1e-2))
    assert "over-regularized" in fired(fixed)["reward-model-fit"].message
    assert "reward-model-fit" in fired(data(reward_model__val_train_loss_ratio=low))  # no L2
    over = fired(data(reward_model__val_train_loss_ratio=np.full(N, 3.0), reward_model__l2=ceiling))
    assert "pinned at its ceiling" in over["reward-model-fit"].message
    corr = np.r_[np.linspace(0.2, 0.9, 30), np.linspace(0.9, 0.3, N - 30)]
    assert fired(data(reward_model__return_corr=corr))["reward-model-corr"].severity == "warning"
    # ... said, not warned, on a preference run whose true return improved meanwhile
    learned = data(reward_model__return_corr=corr, prefs__true_return_mean=learning_returns())
    learned.learned_reward = True
    assert fired(learned)["reward-model-corr"].severity == "info"
    learned = data(reward_model__return_corr=corr, prefs__true_return_mean=flat_returns())
    learned.learned_reward = True
    assert fired(learned)["reward-model-corr"].severity == "warning"
    # segments, the unit the model ranks, decide where the run logs them: episodes that all
    # score alike (Pong lost 21-0 every game) have no return to rank, and that is only said
    good = np.full(N, 0.8)
    alike = fired(data(reward_model__return_corr=corr, reward_model__segment_corr=good))
    assert alike["reward-model-corr"].severity == "info"
    assert alike["reward-model-corr"].metric == "reward_model/return_corr"
    assert "reward-model-corr" not in fired(data(reward_model__segment_corr=good))
    lost = data(reward_model__return_corr=np.full(N, 0.9), reward_model__segment_corr=corr)
    lost.learned_reward = True
    lost.metrics["prefs/true_return_mean"] = (STEPS.copy(), flat_returns())
    assert fired(lost)["reward-model-corr"].severity == "warning"
    assert fired(lost)["reward-model-corr"].metric == "reward_model/segment_corr"
    # the labels show losses and hardly any gain, on a sparse reward (Pong from preferences)
    shown = np.linspace(600, 2582, N)
    pong = data(
        prefs__labeled_segments=shown,
        prefs__labeled_gains=np.round(shown * 13 / 2582),
        prefs__labeled_losses=np.round(shown * 1218 / 2582),
    )
    f = fired(pong)["labels-one-sided"]
    assert f.severity == "warning" and "13 gained" in f.message and "rewards" in f.message
    both = data(
        prefs__labeled_segments=shown,
        prefs__labeled_gains=shown * 0.1,
        prefs__labeled_losses=shown * 0.4,
    )
    assert "labels-one-sided" not in fired(both)
    dense = data(  # Pendulum: every segment's return below 0, none at 0
        prefs__labeled_segments=shown,
        prefs__labeled_gains=np.zeros(N),
        prefs__labeled_losses=shown,
    )
    assert "labels-one-sided" not in fired(dense)
    # a reward that is never negative (a fixed horizon's absorbing state pays 0): no side missing
    alive = data(
        prefs__labeled_segments=shown,
        prefs__labeled_gains=shown * 0.35,
        prefs__labeled_losses=np.zeros(N),
    )
    assert "labels-one-sided" not in fired(alive)
    # an off-policy learner's replay rewards: relabeled with each model (lag 0-1), or stale
    fresh = np.r_[np.zeros(N // 2), np.tile([0.0, 1.0], N)][:N]
    assert "stale-replay-rewards" not in fired(data(prefs__replay_reward_lag=fresh))
    stale = fired(data(prefs__replay_reward_lag=np.floor(np.linspace(0, 8, N))))
    assert stale["stale-replay-rewards"].severity == "warning"
    assert stale["stale-replay-rewards"].step == STEPS[np.argmax(np.linspace(0, 8, N) >= 2)]


def test_seed_rules_on_one_success_in_three():
    rahtz = SeedSet(
        ["seed 0", "seed 1", "seed 2"],
        np.array([20.0, 495.0, 25.0]),
        21.0,
        None,
        "greedy evaluation",
    )
    hit = seed_success(rahtz)
    assert hit.severity == "warning" and "1 of 3" in hit.seen
    assert seed_bimodal(rahtz) is not None
    healthy = SeedSet(["a", "b", "c"], np.array([480.0, 500.0, 495.0]), 21.0, 475.0, "eval")
    assert seed_success(healthy).severity == "info" and seed_bimodal(healthy) is None
    assert seed_spread(healthy) is None
    spread = SeedSet(["a", "b", "c", "d"], np.array([100.0, 250.0, 400.0, 500.0]), 20.0, None, "e")
    assert seed_spread(spread) is not None and seed_bimodal(spread) is None


def test_summary_groups_a_rule_across_seeds():
    findings = []
    for seed in (0, 1, 2):
        d = data(train__approx_kl=np.r_[5.0, np.full(N - 1, 0.01)])
        d.label = f"seed {seed}"
        findings += [f.to_dict() for f in diagnose(d)]
    lines = summary_lines(findings, "RUN")
    assert lines[0].startswith("doctor: 3 errors") and "backflip doctor RUN" in lines[0]
    assert any("kl-large [seeds 0, 1, 2]" in line for line in lines)


def test_a_rule_that_crashes_becomes_an_info_finding(monkeypatch):
    from backflip.doctor import findings as fmod

    broken = fmod.Rule("broken", "-", (), "t", "c", "n", "s", False, lambda d: 1 / 0)
    monkeypatch.setattr(fmod, "RULES", [*fmod.RULES, broken])
    monkeypatch.setattr("backflip.doctor.RULES", fmod.RULES)
    learned = np.r_[np.linspace(20, 480, N // 2), 480 + rng.normal(0, 5, N - N // 2)]
    out = diagnose(data(train__approx_kl=np.full(N, 0.01), rollout__ep_return_mean=learned))
    assert [f.rule for f in out] == ["doctor-error"] and "ZeroDivisionError" in out[0].message


def test_rules_about_the_learned_reward_call_it_the_learned_reward():
    """On a preference run env/reward_* and rollout/ep_return_* hold r̂, what the policy
    trained on: rules about its scale still read it, and say which reward they mean."""
    big = {"env__reward_min": np.full(N, -1000.0), "env__reward_max": np.full(N, 1000.0)}
    plain = fired(data(**big))["reward-scale"]
    assert "per-step rewards reach" in plain.message and "learned" not in plain.message
    prefs = data(**big)
    prefs.learned_reward = True
    assert "per-step learned rewards (r̂) reach" in fired(prefs)["reward-scale"].message
    # under prefs.horizon=terminal the end's value r̂_abs/(1 − γ) is large by design: quiet
    # where the learner scales rewards, named where it does not
    prefs.prefs, prefs.hp = {"horizon": "terminal"}, {"scale_reward": True}
    assert "reward-scale" not in fired(prefs)
    prefs.hp = {"scale_reward": False}
    assert "the end's value" in fired(prefs)["reward-scale"].message
    # a learned-reward return rising is no finding on an ordinary run (there is no other)
    assert "reward-model-gamed" not in fired(data(rollout__ep_return_mean=learning_returns()))


# --- issue 23: a health signal reaches `error` only when the return says something is wrong ----


def test_explained_variance_is_an_error_only_when_the_return_is_flat_too():
    """A peer library's healthy run (return rising steadily) drew an `error` from a rule that
    can't tell a learning run from a broken one: with a rising return it is a warning."""
    ev = rng.normal(-0.02, 0.05, N)
    learning = fired(data(train__explained_var=ev, rollout__ep_return_mean=learning_returns()))
    assert learning["explained-variance"].severity == "warning"
    assert "return" in learning["explained-variance"].message
    flat = fired(data(train__explained_var=ev, rollout__ep_return_mean=flat_returns()))
    assert flat["explained-variance"].severity == "error"


def test_a_solved_run_is_not_collapsed():
    """PPO on Acrobot-v1 at -76.9 (its threshold is -100): a deterministic policy that solves
    the task is no premature collapse."""
    ent = np.r_[np.linspace(1, 0.05, 8), np.full(N - 8, 0.03)]
    solved = np.r_[np.linspace(-500, -80, 8), -77 + rng.normal(0, 2, N - 8)]
    d = data(train__entropy_norm=ent, rollout__ep_return_mean=solved)
    d.env_id = "Acrobot-v1"
    assert "entropy-collapse" not in fired(d)
    d.env_id = None  # the same curves without the task's threshold: it improved, a warning
    assert fired(d)["entropy-collapse"].severity == "warning"


def test_entropy_collapse_waits_for_the_return_before_calling_it_an_error():
    """Live, at 30% of training, the return can't be judged yet: a warning, never an error that
    the summary later contradicts; from half of training on a flat return makes it an error."""
    ent = np.r_[np.linspace(1, 0.01, 5), np.full(N - 5, 0.01)]
    flat = 9 + rng.normal(0, 0.3, N)
    early = data(train__entropy_norm=ent[:18], rollout__ep_return_mean=flat[:18])
    early.metrics = {k: (s[:18], v) for k, (s, v) in early.metrics.items()}
    f = fired(early)["entropy-collapse"]
    assert f.severity == "warning" and "can't be judged" in f.message
    assert (
        fired(data(train__entropy_norm=ent, rollout__ep_return_mean=flat))[
            "entropy-collapse"
        ].severity
        == "error"
    )


def test_live_lines_carry_one_severity_and_announce_a_change():
    from backflip.config import resolve
    from backflip.doctor.live import LiveDoctor

    cfg = resolve("ppo", "CartPole-v1", [0], END)
    live = LiveDoctor(cfg, every_s=0.0)
    lines = []
    for i, step in enumerate(STEPS):
        lines += live(int(step), {"train/entropy_norm": 0.01 if i >= 4 else 1.0 - 0.2 * i,
                                  "rollout/ep_return_mean": 9.0 + 0.1 * (i % 3)})  # fmt: skip
    collapse = [line for line in lines if "entropy-collapse" in line]
    assert collapse[0].startswith("warning: entropy-collapse at step ")
    assert "(error)" not in collapse[0] and "(warning)" not in collapse[0]
    assert (
        collapse[1].startswith("error: entropy-collapse at step ")
        and "(was a warning)" in (collapse[1])
    )
    assert len(collapse) == 2


def test_trivial_policy_at_the_do_nothing_level_of_a_task_where_that_is_not_optimal():
    """MountainCarContinuous: a policy that learned to stand still scores ~0 (the zero action's
    return) where 90 solves the task; before, only `ep-len-constant` (an info) said anything."""
    lens = np.full(N, 999.0)
    still = -0.3 + rng.normal(0, 0.1, N)
    d = data(rollout__ep_return_mean=still, rollout__ep_len_min=lens, rollout__ep_len_max=lens)
    d.env_id = "MountainCarContinuous-v0"
    f = fired(d)["trivial-policy"]
    assert f.severity == "error" and "the zero action" in f.message and "90" in f.message
    solved = data(rollout__ep_return_mean=np.linspace(-30, 93, N))
    solved.env_id = "MountainCarContinuous-v0"
    assert "trivial-policy" not in fired(solved)
    # CartPole: one constant action scores ~10, a random policy ~22 — a policy that never
    # learned (22) is not "trivial", one that collapsed to one action (9.4) is
    random_level = data(rollout__ep_return_mean=flat_returns())
    random_level.env_id = "CartPole-v1"
    assert "trivial-policy" not in fired(random_level)
    one_action = data(rollout__ep_return_mean=9.4 + rng.normal(0, 0.3, N))
    one_action.env_id = "CartPole-v1"
    assert fired(one_action)["trivial-policy"].severity == "error"
    unknown = data(rollout__ep_return_mean=still)  # no env id: nothing to compare with
    assert "trivial-policy" not in fired(unknown)
    # Swimmer: the zero action drifts ±16 an episode around ~10; a policy whose late mean is
    # 40 (PPO at 2e5 steps) swims, and one at the zero action's level does not
    swims = data(rollout__ep_return_mean=40 + rng.normal(0, 2, N))
    swims.env_id = "Swimmer-v5"
    assert "trivial-policy" not in fired(swims)
    drifts = data(rollout__ep_return_mean=12 + rng.normal(0, 2, N))
    drifts.env_id = "Swimmer-v5"
    assert fired(drifts)["trivial-policy"].severity == "error"


def test_greedy_gap_when_the_greedy_policy_stands_still_where_the_sampled_one_moves():
    """MovingDot84's PPO seed 1 after 50k steps (issue 22): its last training episodes returned
    ~90, but 10 of its 20 greedy episodes were a no-op from the first step (greedy mean 44)."""
    train = np.array([6, 141, 76, 95, 48, 121, 67, 30, 100, 76, 80, 50, 131, 156, 78, 146.0])
    greedy = [158, 0, 0, 0, 32, 0, 116, 0, 92, 131, 0, 123, 0, 0, 21, 0, 88, 54, 65, 0.0]
    eps = (np.linspace(END / 16, END, 16).astype(int), train, np.full(16, 1000.0))

    def run(evals, episodes=eps, **series):
        mean, std = np.full(N, np.nan), np.full(N, np.nan)
        mean[-1], std[-1] = np.mean(evals), np.std(evals)
        d = data(episodes, eval__return_mean=mean, eval__return_std=std, **series)
        d.status = {"final_eval_returns": evals}
        return d

    f = fired(run(greedy))["greedy-gap"]
    assert f.severity == "warning" and f.evidence["greedy"] == 44.0 and f.step == END
    assert "44 over 20 episodes" in f.message and "91.4" in f.message
    # the same policy a little below its training return (noise), or above it: silent
    assert "greedy-gap" not in fired(run([v + 40 for v in greedy]))
    assert "greedy-gap" not in fired(run([120.0] * 20))
    assert "greedy-gap" not in fired(run(greedy[:4]))  # 4 evaluation episodes: too few to say
    # a preference run: the true return's means, the evaluation's spread standing in for theirs
    true = 88 + rng.normal(0, 2, N)
    pref = run(greedy, episodes=None, prefs__true_return_mean=true, rollout__ep_return_mean=true)
    pref.learned_reward = True
    assert fired(pref)["greedy-gap"].evidence["training"] > 85


def test_q_rules_account_for_the_entropy_bonus_of_a_soft_q():
    """SAC's Q holds γ·α·H/(1−γ) besides the rewards: with Pendulum's rewards (all ≤ 0) and a
    wide early policy (H > 0) its Q can be positive without any bug."""
    rewards = {"env__reward_min": np.full(N, -16.0), "env__reward_max": np.full(N, -0.01)}
    alpha, entropy = np.geomspace(1.0, 0.5, N), np.full(N, 1.2)
    q = 0.99 / 0.01 * alpha * entropy - 20  # the entropy part, and a small reward part
    sac = data(hp={"gamma": 0.99}, train__q_mean=q, train__alpha=alpha, train__entropy=entropy,
               **rewards)  # fmt: skip
    assert "value-sign" not in fired(sac)
    plain = data(hp={"gamma": 0.99}, train__q_mean=q, **rewards)  # no α: a sign error
    assert fired(plain)["value-sign"].severity == "warning"
    wrong = data(hp={"gamma": 0.99}, train__q_mean=q + 500, train__alpha=alpha,
                 train__entropy=entropy, **rewards)  # fmt: skip
    assert "entropy bonus" in fired(wrong)["value-sign"].message
    # q-divergence: max|r|/(1−γ) = 1600; a soft Q may add α·H/(1−γ) on top
    big = {"env__reward_min": np.full(N, -1.0), "env__reward_max": np.full(N, 1.0)}
    hot = np.full(N, 30.0)  # α = 30 (a bad temperature, but not divergence of Q)
    soft = data(hp={"gamma": 0.99}, train__q_mean=np.full(N, 0.99 / 0.01 * 30 * 1.2),
                train__alpha=hot, train__entropy=entropy, **big)  # fmt: skip
    assert "q-divergence" not in fired(soft)
    hard = data(hp={"gamma": 0.99}, train__q_mean=np.full(N, 0.99 / 0.01 * 30 * 1.2), **big)
    assert "q-divergence" in fired(hard)


def test_q_stuck_when_the_q_network_never_learns():
    """CleanRL's dqn.py with lr=1e-8 on CartPole: Q stayed at -0.07 for 30k steps while the
    return rose 24 -> 96 as ε decayed onto the initial network's argmax — no rule said a word."""
    rewards = {"env__reward_min": np.ones(N), "env__reward_max": np.ones(N)}
    stuck = data(train__q_mean=-0.075 + rng.normal(0, 0.003, N), **rewards)
    assert fired(stuck)["q-stuck"].severity == "warning"
    learning = data(train__q_mean=np.linspace(0, 60, N), **rewards)
    assert "q-stuck" not in fired(learning)
    # without reward statistics one step's reward comes from the episodes (CleanRL)
    eps = (STEPS, np.full(N, 96.0), np.full(N, 96.0))
    assert "q-stuck" in fired(data(episodes=eps, train__q_mean=np.full(N, -0.07)))


def test_a_person_s_pace_is_not_a_starved_queue():
    """A human-labeled seed waits for its person (lockstep) or trains on after labeling ended:
    labels/s at 0 with labels owed is their pace, not a fault; a synthetic labeler that stalls
    is still caught, and so is a segment queue that stops for anyone."""
    labels = np.r_[np.full(30, 2.0), np.zeros(N - 30)]
    owed = np.linspace(0, 40, N)
    synthetic = data(prefs__labels_per_s=labels, prefs__label_debt=owed)
    synthetic.prefs = {"labeler": "synthetic"}
    assert fired(synthetic)["prefs-starved"].severity == "error"
    person = data(prefs__labels_per_s=labels, prefs__label_debt=owed)
    person.prefs = {"labeler": "human"}
    assert "prefs-starved" not in fired(person)
    stopped = data(prefs__labels_per_s=labels, prefs__segments_per_s=labels)
    stopped.prefs = {"labeler": "human"}
    assert fired(stopped)["prefs-starved"].metric == "prefs/segments_per_s"


def test_segments_that_stop_because_episodes_are_shorter_than_a_clip_are_named():
    """Under prefs.horizon=variable a policy paid for ending (CartPole from preferences: ~9-step
    episodes) completes no 25-step clip: the segment queue stops, and the finding says why
    rather than blaming the store; episodes as long as a clip keep the usual cause."""
    segments = np.r_[np.full(5, 40.0), np.zeros(N - 5)]

    def starved(length):
        d = data(prefs__segments_per_s=segments, rollout__ep_len_mean=np.full(N, length))
        d.prefs = {"labeler": "synthetic", "segment_length": 25, "horizon": "variable"}
        return fired(d)["prefs-starved"]

    short = starved(9.0)
    assert short.severity == "error" and "episodes last 9 steps" in short.message
    assert "shorter than one clip" in short.message and "prefs.horizon" in short.message
    assert short.evidence["segment_length"] == 25
    long = starved(200.0)
    assert "shorter than one clip" not in long.message and "starved queue" in long.message


def test_the_horizon_rules_name_survival_bias_and_its_mirror():
    """`prefs-variable-horizon`: a variable horizon on an env that ended episodes early;
    `prefs-length-bias`: the episode's length carries the learned return while the model does
    not track the true reward, survival bias (longer pays) or its mirror (shorter pays)."""
    ends = np.linspace(0, 400, N)
    run = data(prefs__env_terminations=ends, prefs__terminated_frac=np.full(N, 0.9))
    run.learned_reward, run.prefs = True, {"horizon": "variable"}
    f = fired(run)["prefs-variable-horizon"]
    assert f.severity == "warning" and "400 training episodes early (90% of the last" in f.message
    fixed = data(prefs__env_terminations=ends)
    fixed.learned_reward, fixed.prefs = True, {"horizon": "restart"}
    assert "prefs-variable-horizon" not in fired(fixed)
    never = data(prefs__env_terminations=np.zeros(N))
    never.learned_reward, never.prefs = True, {"horizon": "variable"}
    assert "prefs-variable-horizon" not in fired(never)

    def variable(seg, true):
        d = data(
            prefs__env_terminations=ends,
            reward_model__segment_corr=np.full(N, seg),
            prefs__true_return_mean=true,
        )
        d.learned_reward, d.prefs = True, {"horizon": "variable"}
        return fired(d)["prefs-variable-horizon"]

    # Pong from preferences: the games' own ends, a model that tracks the score, a policy
    # that learned: said, as info; a model that does not track it, or no learning: a warning
    rising, flat = np.linspace(-21, 5, N), np.full(N, -21.0)
    healthy = variable(0.86, rising)
    assert healthy.severity == "info" and "segment correlation 0.86" in healthy.message
    assert "no sign that the length carried the reward" in healthy.message
    assert variable(0.09, rising).severity == "warning"  # survival bias: solved, model blind
    assert variable(0.86, flat).severity == "warning"

    def biased(corr, seg, true):
        d = data(
            prefs__len_return_corr=np.full(N, corr),
            reward_model__segment_corr=np.full(N, seg),
            prefs__true_return_mean=true,
        )
        d.learned_reward, d.prefs = True, {"horizon": "variable"}
        return fired(d).get("prefs-length-bias")

    survival = biased(0.95, 0.1, flat_returns())
    assert survival.severity == "error" and "survival bias" in survival.message
    mirror = biased(-0.9, 0.2, flat_returns())
    assert mirror.severity == "error" and "its mirror" in mirror.message
    assert biased(0.95, 0.1, learning_returns()).severity == "warning"  # the task improved
    assert biased(0.95, 0.8, flat_returns()) is None  # the model tracks the true reward
    assert biased(0.3, 0.1, flat_returns()) is None  # length says little


def test_labels_that_say_nothing_are_named():
    labels = np.linspace(100, 500, N)
    acrobot = data(
        prefs__labels=labels,
        prefs__labels_equal=labels * 0.98,
        prefs__true_return_mean=flat_returns(),
    )
    acrobot.learned_reward = True
    f = fired(acrobot)["labels-uninformative"]
    assert f.severity == "warning" and "98%" in f.message
    healthy = data(prefs__labels=labels, prefs__labels_equal=labels * 0.3)
    assert "labels-uninformative" not in fired(healthy)
    solved = data(
        prefs__labels=labels,
        prefs__labels_equal=labels * 0.95,
        prefs__true_return_mean=learning_returns(),
    )
    solved.learned_reward = True
    assert "labels-uninformative" not in fired(solved)  # alike because all do the task
    few = data(prefs__labels=np.full(N, 20.0), prefs__labels_equal=np.full(N, 20.0))
    assert "labels-uninformative" not in fired(few)


def test_a_task_solved_early_is_not_never_better_nor_uninformative():
    """Acrobot from preferences reaches the goal in the first 15% of the run: the return then
    does not "improve" between the early and late windows, and ties stay most labels (clips of
    a policy that does the task are alike), but the run is solved (the env's reward_threshold,
    -100): neither `never-better` nor `labels-uninformative` may say it never did the task."""
    labels = np.linspace(250, 500, N)
    early_solve = np.r_[np.linspace(-500, -90, 5), -88 + rng.normal(0, 4, N - 5)]
    for env_id, expect in (("Acrobot-v1", False), (None, True)):  # no threshold known: fires
        d = data(
            prefs__labels=labels, prefs__labels_equal=labels * 0.93,
            prefs__true_return_mean=early_solve,
        )  # fmt: skip
        d.learned_reward, d.env_id = True, env_id
        found = fired(d)
        assert ("never-better" in found) is expect, (env_id, list(found))
        assert ("labels-uninformative" in found) is expect, (env_id, list(found))


def test_failures_that_persist_under_a_fixed_horizon_are_named():
    """`prefs-failures-persist`: an env that ends the first episodes at failure and still ends
    most of the last ones, under the restart horizon; quiet where the policy learned not to fail,
    where ends are successes (few at first, more later: Acrobot), under a variable horizon
    (another rule's) and on plain runs."""

    def run(frac, horizon="restart", learned=True):
        d = data(prefs__terminated_frac=frac)
        d.learned_reward, d.prefs = learned, {"horizon": horizon, "absorb_steps": 25}
        return fired(d)

    stuck = np.r_[np.full(N // 5, 1.0), np.full(N - N // 5, 0.9)]
    f = run(stuck)["prefs-failures-persist"]
    assert f.severity == "warning" and "90% of the policy's last episodes" in f.message
    assert "25 absorbing steps" in f.message
    for other in ("absorb", "terminal"):  # an end is not cheap there: another cause
        assert "prefs-failures-persist" not in run(stuck, other)
    learned = np.r_[np.full(N // 2, 0.95), np.full(N - N // 2, 0.2)]  # it stopped falling
    assert "prefs-failures-persist" not in run(learned)
    successes = np.linspace(0.0, 0.85, N)  # Acrobot: ends are the goal, more as it learns
    assert "prefs-failures-persist" not in run(successes)
    assert "prefs-failures-persist" not in run(stuck, "variable")
    assert "prefs-failures-persist" not in run(stuck, learned=False)


def test_ends_the_labels_never_showed_are_named():
    """`labels-ends-unseen`: under a fixed horizon, an env that ends episodes early, labels that
    hardly ever held an end and a policy that stopped ending (CliffWalking: the goal never
    reached); quiet where ends were shown (Hopper's falls), where the policy ends its episodes
    (Acrobot reaching its goal), on envs that never end, under a variable horizon, on plain runs."""
    shown = np.linspace(300, 680, N)

    def run(ends, frac, terminations=None, horizon="terminal", learned=True):
        terminations = np.ones(N) if terminations is None else terminations
        d = data(
            prefs__labeled_segments=shown,
            prefs__labeled_ends=ends,
            prefs__env_terminations=terminations,
            prefs__terminated_frac=frac,
        )
        d.learned_reward, d.prefs = learned, {"horizon": horizon}
        return fired(d)

    never = np.r_[np.full(N // 10, 0.11), np.zeros(N - N // 10)]
    f = run(np.ones(N), never)["labels-ends-unseen"]
    assert f.severity == "warning" and "1 of 680 labeled segments" in f.message
    assert "labels-ends-unseen" not in run(shown * 0.2, never)  # Hopper: falls were labeled
    assert "labels-ends-unseen" not in run(np.ones(N), np.linspace(0.0, 0.9, N))  # Acrobot
    # the policy never ended an episode: the env's ends are known from the labels' one end...
    assert "labels-ends-unseen" in run(np.ones(N), np.zeros(N), terminations=np.zeros(N))
    # ... or from the random policy's (prefs/random_ends); an env never seen to end: quiet
    unseen = run(np.zeros(N), np.zeros(N), terminations=np.zeros(N))
    assert "labels-ends-unseen" not in unseen
    d = data(
        prefs__labeled_segments=shown,
        prefs__labeled_ends=np.zeros(N),
        prefs__env_terminations=np.zeros(N),
        prefs__terminated_frac=np.zeros(N),
        prefs__random_ends=np.full(N, 3.0),
    )
    d.learned_reward, d.prefs = True, {"horizon": "restart"}
    assert "0 of 680 labeled segments" in fired(d)["labels-ends-unseen"].message
    assert "labels-ends-unseen" not in run(np.ones(N), never, horizon="variable")
    assert "labels-ends-unseen" not in run(np.ones(N), never, learned=False)


def test_an_env_without_a_reward_of_its_own_is_named_and_its_true_return_not_judged():
    """A person labels an env that gives no reward (the reason to label it): the true return is
    0 in every episode and no labeled clip gained or lost any. The rules asking whether the true
    return improved said `never-better` of such a run; they are skipped, and one finding says
    why. A return that is constant because a goal was never reached (MountainCar's -200, every
    clip losing reward) is a reward: judged as before."""

    def run(true, losses, labeler="human"):
        d = data(
            prefs__true_return_mean=true,
            prefs__labeled_gains=np.zeros(N),
            prefs__labeled_losses=losses,
            prefs__labeled_segments=np.linspace(10, 90, N),
        )
        d.learned_reward, d.prefs = True, {"labeler": labeler}
        return fired(d)

    person = run(np.zeros(N), np.zeros(N))
    f = person["true-return-constant"]
    assert f.severity == "info" and "no reward of its own" in f.message
    assert f"the true return was 0 in every one of {N}" in f.message
    assert "never-better" not in person
    synthetic = run(np.zeros(N), np.zeros(N), labeler="synthetic")
    assert synthetic["true-return-constant"].severity == "warning"
    unreached = run(np.full(N, -200.0), np.linspace(10, 90, N))  # a reward, never more than -200
    assert "true-return-constant" not in unreached and "never-better" in unreached
    varying = run(flat_returns(), np.zeros(N))
    assert "true-return-constant" not in varying
