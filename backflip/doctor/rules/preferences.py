"""Learning from preferences: the labels, the reward model, the horizon (catalog entries 19-20; docs/preferences.md)."""

from __future__ import annotations

import numpy as np

from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    MIN_ROWS,
    RAHTZ,
    TRUE_READ,
    _rows,
    verdict,
)
from backflip.doctor.series import (
    CONSTANT_FROM,
    LEARNED_RETURNS,
    RunData,
    finite,
    fmt,
    progress,
)
from backflip.returns import EVAL_RETURN, TRUE_RETURN

# --- entries 19–20: learning from preferences ------------------------------------------------------


def _starved(d: RunData, name: str):
    s = d.get(name)
    if s is None:
        return None
    steps, v = finite(s)
    if len(v) < 5 or not (v > 0).any():
        return None
    last_pos = int(np.flatnonzero(v > 0)[-1])
    # rows at later steps only: the pipeline's rows while the reward model pretrains share the
    # step before the policy's first (CEM's one generation of 64k steps logs no row until its
    # end: ten pretraining rows at step 0 read as ten starved ones)
    zeros = len(np.unique(steps[last_pos + 1 :][steps[last_pos + 1 :] > steps[last_pos]]))
    span = steps[-1] - steps[last_pos]
    if zeros >= 3 and span >= 0.1 * max(d.end, 1):
        return steps[last_pos], zeros, span
    return None


@rule(
    "prefs-starved",
    entry="19",
    reads=(
        "prefs/labels_per_s",
        "prefs/segments_per_s",
        "prefs/label_debt",
        "rollout/ep_len_mean",
    ),
    threshold="labels/s or segments/s was positive, then 0 on rows at ≥ 3 later steps "
    "spanning ≥ 10% of training while training went on (for labels: only while labels are owed, "
    "prefs/label_debt > 0, when it is logged, and only from a synthetic labeler: a person's "
    "pace, or labeling a person ended, is not a starved queue); segments stopped with the "
    "policy's episodes (median over the second half) shorter than prefs.segment_length are "
    "named as such",
    cause="a starved queue: the segment store or query queue stopped delivering (Rahtz: once "
    "a database filled, no new segments reached the labeler)",
    check_next="prefs/queue_depth and prefs/seconds_since_label; the segment store's capacity "
    "and whether the labeler process is alive",
    source=RAHTZ,
    live=True,
)
def prefs_starved(d: RunData):
    person = d.prefs.get("labeler") == "human"
    for name in ("prefs/labels_per_s", "prefs/segments_per_s"):
        if person and name == "prefs/labels_per_s":
            continue  # a person answers at their pace; the seed waits for them (status waiting)
        hit = _starved(d, name)
        if hit is None:
            continue
        debt = d.get("prefs/label_debt")
        if name == "prefs/labels_per_s" and debt is not None and debt[1][-1] <= 0:
            continue  # the schedule asks for no more labels: a pause, not starvation
        last, zeros, span = hit
        seen = (
            f"{name} dropped to 0 after step {int(last):,} and stayed there for "
            f"{zeros} rows ({int(span):,} steps) while training continued"
        )
        evidence = {"last_positive_step": int(last), "zero_rows": zeros}
        short = name == "prefs/segments_per_s" and _episodes_shorter_than_a_clip(d)
        if short:
            length, clip = short
            evidence.update(episode_length=length, segment_length=clip)
            return Hit(
                "error",
                seen + f"; the policy's episodes last {fmt(length)} steps (median, second "
                f"half) and a clip {clip}",
                metric=name,
                step=int(last),
                evidence=evidence,
                cause="episodes shorter than one clip: a clip is cut from one episode, so none "
                "is completed and no new segment reaches the labeler (under prefs.horizon="
                "variable the env's own ends cut them: CartPole from preferences ending its "
                "episodes within ~9 steps, the mirror of survival bias)",
                check_next="prefs.horizon (a fixed horizon, the default, keeps each episode to "
                "the time limit) or shorter clips (prefs.segment_length); prefs-length-bias",
            )
        return Hit("error", seen, metric=name, step=int(last), evidence=evidence)
    return None


def _episodes_shorter_than_a_clip(d: RunData) -> tuple[float, int] | None:
    """(the policy's median episode length over the second half, the clip length) where the
    episodes were shorter than one clip, else None."""
    clip = d.prefs.get("segment_length")
    lengths = d.get("rollout/ep_len_mean")
    if not clip or lengths is None:
        return None
    v = finite(lengths)[1]
    if len(v) < 2:
        return None
    length = float(np.median(v[len(v) // 2 :]))
    return (length, int(clip)) if length < clip else None


@rule(
    "reward-model-fit",
    entry="20",
    reads=("reward_model/val_train_loss_ratio", "reward_model/l2"),
    threshold="median validation/training loss ratio over the second half outside 1.1–1.5; "
    "below 1.1 only where the L2 does not adapt: not when the logged L2 fell by more than one "
    "step (1.2×) over the run (the pipeline is lowering it toward the band, or it reached its "
    "floor with validation as good as training: a model that generalizes from its labels)",
    cause="> 1.5: the reward model overfits its labels (too little regularization; with L2 "
    "pinned at its ceiling, too few labels for the model); < 1.1: over-regularized (too much "
    "L2/dropout), it could fit the labels better",
    check_next="the adaptive L2 strength (reward_model/l2) and the number of labels",
    source="Christiano et al. 2017",
    live=True,
)
def reward_model_fit(d: RunData):
    if (s := d.get("reward_model/val_train_loss_ratio")) is None:
        return None
    steps, v = finite(s)
    if len(v) < 6:
        return None
    med = float(np.median(v[len(v) // 2 :]))
    if 1.1 <= med <= 1.5:
        return None
    l2 = d.get("reward_model/l2")
    l2 = finite(l2)[1] if l2 is not None else None
    if med < 1.1 and l2 is not None and len(l2) >= 3 and l2[-1] * 1.2 < l2[0]:
        return None  # the pipeline's adaptive L2 is doing what this finding would ask
    # the pipeline moves each member's L2 one step (1.2×) a round toward the band: overfitting
    # with the L2 still at its highest in the last rows means it is pinned at its ceiling
    late = l2[len(l2) // 2 :] if l2 is not None else np.array([])
    ceiling = med > 1.5 and len(late) >= 3 and bool(np.all(late[-3:] >= late.max() / 1.05))
    which = "overfitting (> 1.5)" if med > 1.5 else "over-regularized (< 1.1)"
    if ceiling:
        which += f" with L2 pinned at its ceiling ({fmt(float(late[-1]))}): too few labels"
    return Hit(
        "warning",
        f"validation/training loss ratio {fmt(med)} over the second half: {which}",
        metric="reward_model/val_train_loss_ratio",
        step=int(steps[-1]),
        evidence={"median": med, "l2_at_ceiling": ceiling},
    )


@rule(
    "reward-model-corr",
    entry="20",
    reads=("reward_model/segment_corr", "reward_model/return_corr"),
    threshold="correlation between predicted and true return < 0.5 over the last quarter, or "
    "fallen by > 0.3 from its best: of the policy's segments (what the model is trained to "
    "rank) where the run logs it, else of its episodes; info only while the true return "
    "improved (the test of 'did the return improve?' above), or when only the episodes' "
    "correlation is low",
    cause="the reward model does not track the task: too few or noisy labels, segments that "
    "don't cover what the policy now does, a normalization mismatch on its input",
    check_next="label accuracy, the query selection, observation normalization of the reward "
    "model's input",
    source="Christiano et al. 2017",
    live=True,
)
def reward_model_corr(d: RunData):
    def verdict(metric):  # (late, best, step) when the correlation is low or fell, else None
        if (s := d.get(metric)) is None:
            return None
        steps, v = finite(s)
        if len(v) < 6:
            return None
        late, best = float(np.median(v[-max(len(v) // 4, 2) :])), float(np.max(v))
        return (late, best, int(steps[-1])) if late < 0.5 or best - late > 0.3 else ()

    segments, episodes = verdict("reward_model/segment_corr"), verdict("reward_model/return_corr")
    if segments == () and episodes:  # segments ranked: the episodes' returns are alike
        late, best, step = episodes
        return Hit(
            "info",
            f"predicted-vs-true episode return correlation is {fmt(late)} late (best "
            f"{fmt(best)}), while the model still ranks the policy's segments: the episodes' "
            "true returns differ too little for their sums to be ranked",
            metric="reward_model/return_corr",
            step=step,
            evidence={"late": late, "best": best},
        )
    unit = "segment" if segments is not None else "episode"
    if not (low := segments if segments is not None else episodes):
        return None
    late, best, step = low
    metric = "reward_model/segment_corr" if unit == "segment" else "reward_model/return_corr"
    seen = f"predicted-vs-true {unit} return correlation is {fmt(late)} late (best {fmt(best)})"
    true = progress(d) if d.learned_reward else None
    if true is not None and true.improved:
        # Over the last 20 episodes (or segments), each summed under the model of its day: when
        # the policy has learned, their true returns differ by little more than where they
        # started, and r̂'s sums need not rank them although r̂ ranks the actions (a MovingDot84
        # run at 1.13 of PPO ended at 0.20). Said, not warned, while the task improves.
        return Hit(
            "info",
            f"{seen}, while the {true.describe()} improved",
            metric=metric,
            step=step,
            evidence={"late": late, "best": best, **true.evidence()},
        )
    return Hit("warning", seen, metric=metric, step=step, evidence={"late": late, "best": best})


@rule(
    "reward-model-gamed",
    entry="20",
    reads=("rollout/ep_return_mean", "episodes", TRUE_RETURN, EVAL_RETURN),
    threshold="preference runs: the learned-reward return improves (the test of 'did the "
    "return improve?' above, on rollout/ep_return_* or episodes.csv) while the true return "
    "does not",
    cause="the policy games the reward model: it found behaviour that r̂ rewards and the task "
    "does not (labels that don't cover the states the policy now visits, a reward model that "
    "stopped tracking the task)",
    check_next="reward_model/return_corr over training (does r̂ still track the true return of "
    "new episodes?), watch episodes (`backflip watch`), labels asked while the policy trains "
    "rather than up front, prefs.selection=disagreement",
    source="Christiano et al. 2017 (with offline labels the policy exploits the reward "
    "predictor); docs/preferences.md",
)
def reward_model_gamed(d: RunData):
    if not d.learned_reward or _rows(d) < MIN_ROWS:
        return None
    learned, true = progress(d, LEARNED_RETURNS), progress(d)
    if learned is None or true is None or not learned.improved or true.improved:
        return None
    return Hit(
        "warning",
        f"the {learned.describe()}, but the {true.describe()}",
        metric=true.metric,
        step=true.step_late,
        evidence={
            **true.evidence(),
            "learned_metric": learned.metric,
            "learned_early": learned.early,
            "learned_late": learned.late,
        },
    )


@rule(
    "labels-one-sided",
    entry="20",
    reads=("prefs/labeled_segments", "prefs/labeled_gains", "prefs/labeled_losses"),
    threshold="at the last row: >= 100 labeled segments, >= 10% of them with a true return of "
    "exactly 0 (a sparse reward), one sign of true return on < 2% of them but at least one (so "
    "the env does give it: a reward that is never negative, or an absorbing state's 0, is not "
    "one-sided) and the other on >= 20%",
    cause="the clips asked about come from the policy (and the random one before it), which "
    "seldom gains reward (or seldom loses it): the model is shown one side of the task and "
    "learns it alone: to avoid losing, not to win (Pong from preferences: 13 of 2,582 labeled "
    "segments won a point, 1,218 lost one; longer rallies, every point still lost)",
    check_next="backflip prefs check-reward RUN --policy RUN2 with a policy that does the task "
    "(does r̂ pay for what it was hardly shown?); more labels early, from more exploratory play",
    source="Christiano et al. 2017 (the reward model learns only what its clips show); "
    "docs/benchmarks.md (Pong)",
)
def labels_one_sided(d: RunData):
    counts = [d.get(f"prefs/labeled_{k}") for k in ("segments", "gains", "losses")]
    if any(c is None for c in counts):
        return None
    series = [finite(c) for c in counts]
    if any(len(v) == 0 for _, v in series):
        return None
    shown, gains, losses = (float(v[-1]) for _, v in series)
    if shown < 100 or (shown - gains - losses) < 0.1 * shown:
        return None
    rare, common = sorted([("gained", gains), ("lost", losses)], key=lambda x: x[1])
    if rare[1] >= 0.02 * shown or common[1] < 0.2 * shown or rare[1] == 0:
        return None
    return Hit(
        "warning",
        f"of {int(shown):,} labeled segments, {int(gains):,} gained true reward and "
        f"{int(losses):,} lost it: the reward model was hardly shown what the task "
        f"{'rewards' if rare[0] == 'gained' else 'punishes'}",
        metric="prefs/labeled_segments",
        step=int(series[0][0][-1]),
        evidence={"labeled_segments": shown, "gains": gains, "losses": losses},
    )


def no_true_reward(d: RunData) -> tuple[float, int] | None:
    """(the value, how many returns) when a preference run's env gave no reward to read: its true
    return took one value in every episode and evaluation (`RunData.constant_return`) and no
    labeled clip gained or lost true reward (MountainCar's -1 a step, or Pong's lost points in a
    game always lost 21-0, are rewards: not this)."""
    if not d.learned_reward or (same := d.constant_return) is None:
        return None
    last = [d.get(f"prefs/labeled_{kind}") for kind in ("gains", "losses")]
    if any(s is None or not len(finite(s)[1]) or finite(s)[1][-1] != 0 for s in last):
        return None
    return same


@rule(
    "true-return-constant",
    entry="20",
    reads=(
        TRUE_RETURN,
        "true_episodes",
        EVAL_RETURN,
        "prefs/labeled_gains",
        "prefs/labeled_losses",
    ),
    threshold=f"a preference run whose true return took one value in every episode and greedy "
    f"evaluation it logged (>= {CONSTANT_FROM}) while no labeled clip gained or lost true reward; "
    "the rules that ask whether the true return improved are then skipped (a person: info; a "
    "synthetic teacher, whose labels are the true reward's: a warning)",
    cause="an env with no reward of its own: a person says what is good, and the true return is "
    "a placeholder that cannot say whether the policy improved",
    check_next="the run's clips and videos (backflip watch), the learned return "
    "(rollout/ep_return_mean), the reward model's validation accuracy on the person's labels",
    source="Christiano et al. 2017 (their human-labeled tasks had no reward to report); "
    "docs/preferences.md",
)
def true_return_constant(d: RunData):
    if (same := no_true_reward(d)) is None:
        return None
    value, n = same
    person = d.prefs.get("labeler") == "human"
    why = (
        "the env gives no reward of its own, so it measures nothing here: judge the run by its "
        "clips, videos and the learned return"
        if person
        else "a synthetic teacher labels by it, so every label was a tie: nothing to learn from"
    )
    return Hit(
        "info" if person else "warning",
        f"the true return was {fmt(value)} in every one of {n:,} episodes and evaluations and no "
        f"labeled clip gained or lost true reward: {why}; the rules asking whether it improved "
        "are skipped",
        metric=d.returns.mean,
        evidence={"value": value, "episodes": n, "labeler": d.prefs.get("labeler")},
    )


CONSTANT_SKIPS = (TRUE_RETURN, TRUE_READ, EVAL_RETURN)
"""what a rule reads that a constant true return leaves nothing in (`diagnose` skips it)"""


@rule(
    "labels-uninformative",
    entry="20",
    reads=("prefs/labels", "prefs/labels_equal"),
    threshold="at the last row: >= 50 labels, >= 80% of them 'equally good' (0.5), and the true "
    "return did not improve and did not reach the env's reward_threshold (a policy that does "
    "the task well is shown clips alike too)",
    cause="the clips asked about never differ in what the task rewards: a sparse reward that "
    "neither the random policy nor the policy reached (Acrobot's goal, CliffWalking's far "
    "corner), so the reward model learns nothing (until a label prefers a clip the policy is "
    "paid the same for every step, and explores on its own); or a labeler who cannot tell the "
    "clips apart",
    check_next="prefs/labeled_gains and labeled_losses; exploration that reaches the reward "
    "(prefs.explore_steps before the first labels, an entropy bonus, more random clips: "
    "prefs.random_envs, prefs.initial_frac); a denser "
    "task, or a person who can say which clip came nearer",
    source="Christiano et al. 2017 (labels carry information only where clips differ); "
    "docs/preferences.md",
)
def labels_uninformative(d: RunData):
    labels, equal = d.get("prefs/labels"), d.get("prefs/labels_equal")
    if labels is None or equal is None:
        return None
    (steps, n), (_, e) = finite(labels), finite(equal)
    if not len(n) or not len(e) or n[-1] < 50:
        return None
    share = float(e[-1]) / float(n[-1])
    true = progress(d) if d.learned_reward else None
    if share < 0.8 or (true is not None and true.improved) or verdict(d).solved:
        return None
    return Hit(
        "warning",
        f"{int(e[-1]):,} of {int(n[-1]):,} labels were 'equally good' ({share:.0%}): the clips "
        "shown hardly ever differed in what the task rewards",
        metric="prefs/labels_equal",
        step=int(steps[-1]),
        evidence={"labels": float(n[-1]), "equal": float(e[-1]), "share": share},
    )


KOSTRIKOV = "Kostrikov et al. 2019, 'Discriminator-Actor-Critic' (absorbing states)"


@rule(
    "prefs-variable-horizon",
    entry="20",
    reads=("prefs/env_terminations", "prefs/terminated_frac"),
    threshold="a preference run with prefs.horizon=variable whose env ended at least one "
    "training episode early (terminated, before its time limit); info when the run shows the "
    "risk did not come true: the reward model's segment correlation with the true reward >= "
    "0.5 (median over the last quarter of rows, as prefs-length-bias reads it) and the true "
    "return improved (the Atari presets keep the games' own ends by choice)",
    cause="episodes that end when the env ends them have a length that carries reward: a "
    "learned reward standardized to mean 0 pays for staying alive where it is mostly "
    "positive (survival bias: an env that ends at failure is 'solved' by surviving whatever "
    "r̂ says) and for ending early where it is mostly negative (the mirror: an env that ends "
    "at success learns never to finish); the reward model never sees the end",
    check_next="prefs.horizon=restart (the default: a fixed horizon, the end an absorbing state "
    "the reward model values, then a fresh start) or absorb; prefs/len_return_corr",
    source=f"Christiano et al. 2017 (termination removed); {KOSTRIKOV}",
    live=True,
)
def prefs_variable_horizon(d: RunData):
    if not d.learned_reward or d.prefs.get("horizon") != "variable":
        return None
    if (s := d.get("prefs/env_terminations")) is None:
        return None
    steps, ends = finite(s)
    if not len(ends) or ends[-1] < 1:
        return None
    frac = d.get("prefs/terminated_frac")
    share = f" ({100 * float(frac[1][-1]):.0f}% of the last episodes)" if frac else ""
    seg, true = late_median(d, "reward_model/segment_corr"), progress(d)
    tracked = seg is not None and seg >= SEGMENT_TRACKS and true is not None and true.improved
    said = (
        f"; the reward model tracks the task (segment correlation {fmt(seg)}) and the "
        f"{true.describe()}: no sign that the length carried the reward"
        if tracked
        else ""
    )
    return Hit(
        "info" if tracked else "warning",
        f"the env ended {int(ends[-1]):,} training episodes early{share} while episodes were "
        f"variable (prefs.horizon=variable): their length can carry the learned reward{said}",
        metric="prefs/env_terminations",
        step=int(steps[-1]),
        evidence={"terminations": float(ends[-1]), "segment_corr": seg},
    )


SEGMENT_TRACKS = 0.5
"""the reward model's segment correlation with the true reward at and above which it is taken
to track the task (prefs-variable-horizon, prefs-length-bias)"""


def late_median(d: RunData, name: str) -> float | None:
    """The median of a series over the last quarter of its finite rows (at least 3)."""
    if (s := d.get(name)) is None:
        return None
    _, v = finite(s)
    return float(np.median(v[-max(len(v) // 4, 3) :])) if len(v) else None


@rule(
    "prefs-failures-persist",
    entry="20",
    reads=("prefs/terminated_frac",),
    threshold="a preference run under prefs.horizon=restart whose env "
    "ended ≥ 80% of the policy's first episodes early (median over the first tenth of rows: "
    "an env that ends at failure) and still ≥ 50% over the last quarter (≥ 10 rows)",
    cause="the policy still fails most of its episodes at the end of the run. Under the restart "
    "horizon an end costs absorb_steps steps of the absorbing state's learned value, then the "
    "env restarts and the policy gets another try; on the env's own episodes it ends the "
    "return: the pressure not to fail is far weaker, and learning not to fail slow. PPO on "
    "the true reward under the same horizon lags as much (InvertedDoublePendulum, 2e5 steps: "
    "docs/preferences.md, 'What the fixed horizon costs')",
    check_next="prefs.horizon=terminal (on-policy learners, their default: the end valued as "
    "the absorbing state for ever; InvertedDoublePendulum 0.06 -> 0.89); how much the horizon "
    "alone costs on this env (benchmarks/horizon_cost.py); reward_model/segment_corr",
    source=f"{KOSTRIKOV}; Christiano et al. 2017 (termination replaced by a penalty)",
    live=True,
)
def prefs_failures_persist(d: RunData):
    if not d.learned_reward or d.prefs.get("horizon") != "restart":
        return None
    if (s := d.get("prefs/terminated_frac")) is None:
        return None
    steps, frac = finite(s)
    if len(frac) < 10:
        return None
    early = float(np.median(frac[: max(len(frac) // 10, 3)]))
    late = float(np.median(frac[-max(len(frac) // 4, 3) :]))
    if early < 0.8 or late < 0.5:
        return None
    absorb = d.prefs.get("absorb_steps")
    cost = f"{absorb if absorb is not None else 'a few'} absorbing steps, then a fresh start"
    return Hit(
        "warning",
        f"the env still ended {100 * late:.0f}% of the policy's last episodes early "
        f"({100 * early:.0f}% of its first): under the restart horizon a failure costs "
        f"{cost}, where on the env's own episodes it ends the return (prefs.horizon=terminal "
        "values the end for ever)",
        metric="prefs/terminated_frac",
        step=int(steps[-1]),
        evidence={"early": early, "late": late},
    )


@rule(
    "labels-ends-unseen",
    entry="20",
    reads=(
        "prefs/labeled_segments",
        "prefs/labeled_ends",
        "prefs/env_terminations",
        "prefs/random_ends",
        "prefs/terminated_frac",
    ),
    threshold="a preference run under a fixed horizon (restart, absorb, terminal) whose env "
    "can end episodes early (it ended one of the random policy's or the policy's, or a labeled "
    "segment holds an end), at the last row: >= 100 labeled "
    "segments, fewer than 1% of them holding an episode's end (a step in the absorbing state), "
    "the policy's last episodes ending early <= 5% of the time (median over the last quarter "
    "of rows), and the env's reward_threshold not reached",
    cause="the reward model was hardly ever shown what an episode's end is worth: its absorbing "
    "value is a guess, and the policy, paid by it, learned not to end. Where the end is the "
    "goal (CliffWalking's far corner, Acrobot's swing-up, a maze's exit) the task is then "
    "never done: the clips asked about come from a random policy and from the policy itself, "
    "and neither reaches it (CliffWalking: 1 of ~680 labeled segments ended, every seed's "
    "greedy policy walked the 1,000 steps without reaching the goal or falling)",
    check_next="prefs/labeled_ends against prefs/labeled_segments; clips that reach the end: "
    "exploration before the first labels (prefs.explore_steps: CliffWalking reached its goal "
    "on 8 of 8 seeds exploring a tenth of 1e5 steps, -13 on 7), more random clips first "
    "(prefs.random_envs, prefs.initial_frac, a larger prefs.store_size), or a person who can "
    "say which clip came nearer; backflip prefs check-reward RUN --policy RUN2 with a policy that reaches it",
    source=f"{KOSTRIKOV}; Christiano et al. 2017 (the reward model learns only what its clips "
    "show); docs/preferences.md",
)
def labels_ends_unseen(d: RunData):
    if not d.learned_reward or d.prefs.get("horizon") not in ("restart", "absorb", "terminal"):
        return None
    series = [d.get(f"prefs/{k}") for k in ("labeled_segments", "labeled_ends")]
    ends, frac = d.get("prefs/env_terminations"), d.get("prefs/terminated_frac")
    if any(s is None for s in (*series, ends, frac)):
        return None
    (steps, shown), (_, labeled) = (finite(s) for s in series)
    (_, terminations), (_, f) = finite(ends), finite(frac)
    if not (len(shown) and len(labeled) and len(terminations) and len(f) >= 4):
        return None
    random = finite(d.get("prefs/random_ends") or (np.zeros(0), np.zeros(0)))[1]
    random_ends = float(random[-1]) if len(random) else 0.0
    can_end = terminations[-1] >= 1 or random_ends >= 1 or labeled[-1] >= 1
    if shown[-1] < 100 or not can_end or labeled[-1] >= 0.01 * shown[-1]:
        return None
    late = float(np.median(f[-max(len(f) // 4, 3) :]))
    if late > 0.05 or verdict(d).solved:
        return None
    return Hit(
        "warning",
        f"{int(labeled[-1]):,} of {int(shown[-1]):,} labeled segments held an episode's end, "
        f"and the policy's last episodes ended early {100 * late:.0f}% of the time: the reward "
        "model was hardly shown what ending is worth, and where the end is the goal it is "
        "never reached",
        metric="prefs/labeled_ends",
        step=int(steps[-1]),
        evidence={
            "labeled_segments": float(shown[-1]),
            "labeled_ends": float(labeled[-1]),
            "late_terminated_frac": late,
        },
    )


@rule(
    "prefs-length-bias",
    entry="20",
    reads=("prefs/len_return_corr", "reward_model/segment_corr"),
    threshold="preference runs: |correlation of episode length with learned return| >= 0.8 "
    "(median over the last quarter of rows, >= 6 rows) while the reward model's segment "
    "correlation with the true reward is < 0.5 there; an error when the true return did not "
    "improve, else a warning",
    cause="the episode's length, not the reward model, decides what the policy is paid: "
    "survival bias when longer episodes earn more learned return (the agent is paid for "
    "staying alive), its mirror when shorter ones do (paid for ending the episode)",
    check_next="prefs.horizon=restart or absorb (a fixed horizon, the end an absorbing state "
    "the reward model values); prefs/terminated_frac, backflip prefs check-reward RUN",
    source=f"{KOSTRIKOV}; Christiano et al. 2017",
    live=True,
)
def prefs_length_bias(d: RunData):
    if not d.learned_reward or (s := d.get("prefs/len_return_corr")) is None:
        return None
    steps, corr = finite(s)
    if len(corr) < 6:
        return None
    late = float(np.median(corr[-max(len(corr) // 4, 3) :]))
    if abs(late) < 0.8:
        return None
    seg_late = late_median(d, "reward_model/segment_corr")
    if seg_late is not None and seg_late >= SEGMENT_TRACKS:
        return None
    survival = late > 0
    what = (
        "survival bias: longer episodes earn more learned return, so the agent is paid for "
        "staying alive whatever the reward model judges"
        if survival
        else "its mirror: shorter episodes earn more learned return, so the agent is paid for "
        "ending the episode"
    )
    true = progress(d)
    wrong = true is not None and not true.improved and d.end >= 0.5 * d.horizon
    seen_seg = f", segment correlation {fmt(seg_late)}" if seg_late is not None else ""
    return Hit(
        "error" if wrong else "warning",
        f"episode length and learned return correlate at {fmt(late)}{seen_seg}: {what}"
        + (f"; the {true.describe()}" if true is not None else ""),
        metric="prefs/len_return_corr",
        step=int(steps[-1]),
        evidence={"len_return_corr": late, "segment_corr": seg_late, "survival": survival},
    )


@rule(
    "stale-replay-rewards",
    entry="20",
    reads=("prefs/replay_reward_lag",),
    threshold="an off-policy learner on a learned reward whose replay buffer's rewards were "
    "≥ 2 reward-model versions behind the newest model on ≥ 3 rows",
    cause="the replay buffer keeps the rewards of the reward model that was current when each "
    "transition was stored: the learner fits Q-values to judgements the model has since "
    "revised, a moving target no label can correct (prefs.relabel=false, or an algorithm that "
    "does not show its buffer to run.register_replay)",
    check_next="prefs.relabel (true by default) and whether the algorithm calls "
    "run.register_replay; prefs/relabels should grow with reward_model/updates",
    source="Lee, Smith & Abbeel 2021, 'PEBBLE' (relabel the replay buffer after each reward "
    "update); docs/preferences.md",
    live=True,
)
def stale_replay_rewards(d: RunData):
    if (s := d.get("prefs/replay_reward_lag")) is None:
        return None
    steps, lag = finite(s)
    stale = lag >= 2
    if stale.sum() < 3:
        return None
    first = int(steps[np.argmax(stale)])
    return Hit(
        "warning",
        f"the replay buffer's rewards were up to {int(lag.max())} reward-model versions old "
        f"(from step {first:,}, on {int(stale.sum())} rows): the learner trains on stale "
        "judgements",
        metric="prefs/replay_reward_lag",
        step=first,
        evidence={"max_lag": float(lag.max()), "stale_rows": int(stale.sum())},
    )
