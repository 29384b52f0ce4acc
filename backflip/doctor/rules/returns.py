"""The return: episode lengths, the return against the random policy's, the greedy evaluation (catalog entries 10, 11)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from backflip.doctor import tasks
from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    JONES,
    MIN_ROWS,
    SCHULMAN,
    TRUE_READ,
    _rows,
    verdict,
)
from backflip.doctor.series import (
    EARLY,
    EVAL_RETURNS,
    RunData,
    between,
    detrended_std,
    finite,
    fmt,
    head,
    progress,
    spearman,
    tail,
)
from backflip.returns import EVAL_RETURN
from backflip.runs.layout import EPISODES
from backflip.stats import scipy_stats

# --- entry 10: episode length ---------------------------------------------------------------------


@rule(
    "ep-len-collapse",
    entry="10",
    reads=("rollout/ep_len_mean", "rollout/ep_len_min", "rollout/ep_return_mean", TRUE_READ),
    threshold="late mean length < 0.6× early and within 25% of the shortest episode seen, "
    "while the return does not improve",
    cause="a degenerate policy that ends episodes as fast as possible (often after an "
    "entropy collapse), or an environment that terminates immediately",
    check_next="the policy's entropy and actions (watch a video: `backflip watch`), the "
    "termination condition",
    source=f"{SCHULMAN}; {JONES}",
)
def ep_len_collapse(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("rollout/ep_len_mean")) is None:
        return None
    if (p := progress(d)) is None or p.improved:
        return None
    end = d.horizon
    early = float(np.mean(head(finite(s), 0.15, end)[1]))
    late_steps, late = tail(finite(s), 0.2, end)
    late_m = float(np.mean(late))
    shortest = (
        float(np.nanmin(d.get("rollout/ep_len_min")[1]))
        if d.get("rollout/ep_len_min") is not None
        else float(np.nanmin(s[1]))
    )
    if not (late_m < 0.6 * early and late_m <= 1.25 * shortest):
        return None
    return Hit(
        "warning",
        f"episodes shrank from {fmt(early)} to {fmt(late_m)} steps (the "
        f"shortest seen: {fmt(shortest)}) while the {p.describe()}",
        metric="rollout/ep_len_mean",
        step=int(late_steps[-1]),
        evidence={"early": early, "late": late_m, "shortest": shortest, **p.evidence()},
    )


@rule(
    "ep-len-constant",
    entry="10",
    reads=("rollout/ep_len_min", "rollout/ep_len_max"),
    threshold="every episode has the same length",
    cause="a fixed horizon (fine when the task is built so, e.g. Pendulum's 200 steps), or an "
    "environment that never terminates before its time limit",
    check_next="whether the task can end early; with a fixed horizon, episode length carries "
    "no signal about the policy",
    source=f"{SCHULMAN}; {JONES}",
)
def ep_len_constant(d: RunData):
    if d.episodes is not None and len(d.episodes[2]) >= 10:
        lens = d.episodes[2]
        if lens.min() == lens.max():
            return Hit(
                "info",
                f"all {len(lens)} episodes lasted exactly {int(lens[0])} steps",
                metric="rollout/ep_len_mean",
                evidence={"length": int(lens[0])},
            )
        return None
    lo, hi = d.get("rollout/ep_len_min"), d.get("rollout/ep_len_max")
    if lo is None or hi is None or len(lo[0]) < MIN_ROWS:
        return None
    if np.nanmin(lo[1]) == np.nanmax(hi[1]):
        return Hit(
            "info",
            f"every episode lasted exactly {fmt(float(lo[1][0]))} steps",
            metric="rollout/ep_len_mean",
            evidence={"length": float(lo[1][0])},
        )
    return None


@rule(
    "losing-slower",
    entry="10",
    reads=("rollout/ep_len_mean", "rollout/ep_return_mean", TRUE_READ),
    threshold="return not improving while mean episode length grows > 1.5×",
    cause="the agent learns to postpone the end ('losing slower') rather than to win",
    check_next="watch episodes; whether the reward pays for survival",
    source=SCHULMAN,
)
def losing_slower(d: RunData):
    if _rows(d) < MIN_ROWS or (s := d.get("rollout/ep_len_mean")) is None:
        return None
    if (p := progress(d)) is None or p.improved:
        return None
    end = d.horizon
    early = float(np.mean(head(finite(s), 0.15, end)[1]))
    late = float(np.mean(tail(finite(s), 0.2, end)[1]))
    if early <= 0 or late <= 1.5 * early:
        return None
    return Hit(
        "info",
        f"episodes grew from {fmt(early)} to {fmt(late)} steps while the {p.describe()}",
        metric="rollout/ep_len_mean",
        step=d.end,
        evidence={"early": early, "late": late, **p.evidence()},
    )


# --- entry 11: return vs the random policy --------------------------------------------------------


@rule(
    "never-better",
    entry="11",
    reads=("rollout/ep_return_max", "rollout/ep_return_mean", "episodes", TRUE_READ),
    threshold="the return does not improve, and after the first 15% of training no window "
    "beats the best of the first 15% by more than noise (per-episode data with at least 30 "
    "early episodes: the late 90th percentile does not beat the early maximum); quiet when the late return reaches the env's "
    "reward_threshold (solved within the first 15%)",
    cause="the policy never does the right thing more often than the initial (near-random) "
    "policy did: if random exploration never finds reward, RL likely won't either",
    check_next="`backflip preflight ENV` (does a random policy ever succeed?), reward shaping, "
    "and the learning signals (entropy, KL, update size)",
    source=SCHULMAN,
)
def never_better(d: RunData):
    if _rows(d) < MIN_ROWS or (p := progress(d)) is None or p.improved:
        return None
    if verdict(d).solved:  # learned before the late windows began (Acrobot from preferences)
        return None
    if p.basis == "episodes" and _early_episodes(d) < NEVER_BETTER_EARLY:
        # the best of a few long early episodes is a lucky one (MovingDot from preferences: 16
        # in the first 15%, the best 157 against a late 90th percentile of 132 on a run that
        # had learned within them): the logged windows' test instead
        p = progress(d, dataclasses.replace(d.returns, episodes=None))
        if p is None or p.improved:
            return None
    if p.basis == "episodes":
        steps, rets, _ = d.episodes_of(d.returns)
        late = rets[steps >= 0.85 * d.horizon]
        late = late[np.isfinite(late)]
        if len(late) < 10:
            return None
        p90 = float(np.quantile(late, 0.9))
        if p90 > p.early_max:
            return None
        seen = (
            f"the late episodes' 90th-percentile {p.name} {fmt(p90)} never beats the best "
            f"early episode ({fmt(p.early_max)})"
        )
        return Hit(
            "warning",
            seen,
            metric=d.returns.max or d.returns.mean,
            step=int(steps[-1]),
            evidence={"late_p90": p90, "early_max": p.early_max, **p.evidence()},
        )
    margin = max(3 * p.noise, 0.05 * abs(p.early_max), 1e-9)
    if p.best > p.early_max + margin:
        return None
    return Hit(
        "warning",
        f"the best {p.name} after the first 15% ({fmt(p.best)}) never beats the "
        f"early best ({fmt(p.early_max)}) by more than noise",
        metric=p.metric,
        step=p.step_late,
        evidence={"best": p.best, "early_max": p.early_max, **p.evidence()},
    )


NEVER_BETTER_EARLY = 30  # early episodes whose best one the late 90th percentile must beat


def _early_episodes(d: RunData) -> int:
    """Episodes of the return's own file in the first 15% of training (`progress`'s window)."""
    eps = d.episodes_of(d.returns)
    return 0 if eps is None else int(np.sum(eps[0] <= EARLY * d.horizon))


# the last 20% of training against the 20% before it
STILL_LATE, STILL_BEFORE = 0.2, 0.4


@rule(
    "still-improving",
    entry="11",
    reads=("episodes", "rollout/ep_return_mean", TRUE_READ),
    threshold="on a finished run that has not reached the env's reward_threshold, the last "
    "20% of training's return beats the 20% before it: per-episode data, a one-sided "
    "Mann-Whitney test (p < 0.01) by at least a fifth of the earlier window's spread; a logged "
    "mean (overlapping windows of episodes), by one standard deviation of the earlier window "
    "around its trend and 5% of its magnitude, with a rank correlation with the step of at "
    "least 0.5 over both windows; info",
    cause="the budget ended while the policy was still learning: the final return is where "
    "training was stopped, not where it levels off, and a method that learns more slowly looks "
    "worse at this budget than at its plateau",
    check_next="the learning curve (`backflip show`, the UI's run page); a longer run before "
    "comparing final levels, or comparisons at equal steps only",
    source="Henderson et al. 2017, 'Deep RL that Matters' (budgets and learning curves, not one "
    "final number); issue 34 (MinAtar Breakout from preferences, rising at 2e5 steps)",
)
def still_improving(d: RunData):
    if _rows(d) < MIN_ROWS or d.end < 0.9 * d.horizon:  # finished runs only
        return None
    if verdict(d).solved:
        return None
    r, end = d.returns, d.horizon
    lo, hi = 1 - STILL_BEFORE, 1 - STILL_LATE
    if (eps := d.episodes_of(r)) is not None:
        steps, rets, _ = eps
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        before = rets[(steps > lo * end) & (steps <= hi * end)]
        late = rets[steps > hi * end]
        if len(before) < 10 or len(late) < 10:
            return None
        if late.mean() <= before.mean() + 0.2 * before.std():
            return None
        try:
            pvalue = float(scipy_stats().mannwhitneyu(late, before, alternative="greater").pvalue)
        except ValueError:  # every value identical
            return None
        if pvalue >= 0.01:
            return None
        metric, step, evidence = EPISODES, int(steps[-1]), {"p_value": pvalue}
    else:
        s = d.get(r.mean)
        if s is None:
            return None
        s = finite(s)
        before_s, late_s = between(s, lo, hi, end), between(s, hi, 1.0, end)
        if len(before_s[0]) < 3 or len(late_s[0]) < 3:
            return None
        before, late = before_s[1], late_s[1]
        # a logged mean's points overlap (each a window of episodes): a steady trend over both
        # windows, and a rise beyond the noise around it, rather than a test on their points
        noise = detrended_std(before_s)
        margin = max(noise, 0.05 * abs(float(np.mean(before))), 1e-9)
        trend = spearman(np.r_[before_s[0], late_s[0]], np.r_[before, late])
        if float(np.mean(late)) <= float(np.mean(before)) + margin or not trend >= 0.5:
            return None
        metric, step = r.mean, int(late_s[0][-1])
        evidence = {"noise": noise, "spearman": trend}
    b, la = float(np.mean(before)), float(np.mean(late))
    return Hit(
        "info",
        f"the {r.name} was still rising when training ended: {fmt(la)} over the last 20% of "
        f"steps against {fmt(b)} over the 20% before",
        metric=metric,
        step=step,
        evidence={"before": b, "late": la, **evidence},
    )


@rule(
    "trivial-policy",
    entry="11",
    reads=("episodes", "rollout/ep_return_mean", TRUE_READ, "env id"),
    threshold="the last 20% of training's mean return sits at the level of a policy that does "
    "nothing (the zero action, or one constant action; the env's own episodes, seeds 0-2) — "
    "within 2 standard errors of the difference of the two means (its episodes' spread over "
    "its 3 episodes and the run's late episodes) or 5% of the way to the optimum, and nearer "
    "to it than halfway to the random policy's level — on a task where that is not the "
    "optimum: error when the env's reward_threshold says so, warning when only a better return "
    "seen in the run does",
    cause="the policy converged to a trivial behaviour (actions at zero or at one constant): "
    "exploration never found the reward (sparse rewards: MountainCar's flag), an action cost "
    "made doing nothing the safe local optimum, an entropy bonus or action noise too small, or "
    "a collapse of the policy",
    check_next="exploration (entropy bonus, action noise, gSDE, a longer random phase), reward "
    "shaping or the reward scale against the action cost; watch episodes (`backflip watch`)",
    source=f"{SCHULMAN}; issue 23 (MountainCarContinuous runs that learned to stand still)",
)
def trivial_policy(d: RunData):
    levels = tasks.trivial_returns(d.env_id)
    if _rows(d) < MIN_ROWS or not levels or d.end < 0.5 * d.horizon:
        return None
    r = d.returns
    if (eps := d.episodes_of(r)) is not None and len(eps[1]) >= 10:
        steps, rets, _ = eps
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        late = rets[steps >= 0.8 * d.horizon]
        late = late if len(late) >= 10 else rets[-10:]
        best = float(np.max(rets)) if len(rets) else -math.inf
        metric, n_late = EPISODES, len(late)
    elif (s := d.get(r.mean)) is not None and len(finite(s)[0]) >= 3:
        late = tail(finite(s), 0.2, d.horizon)[1]
        mx = d.get(r.max) if r.max else None
        best = float(np.nanmax((mx or s)[1]))
        metric, n_late = r.mean, None  # rows of means: many episodes each, taken as exact
    else:
        return None
    if not len(late):
        return None
    m = float(np.mean(late))
    threshold = tasks.reward_threshold(d.env_id)
    rand = levels.get("uniformly random actions")
    for what, (mu, sd) in levels.items():
        if what == "uniformly random actions":
            continue
        top = threshold if threshold is not None else best
        gap = top - mu
        if not gap > 0 or (threshold is None and gap <= 2 * sd + 0.05 * abs(mu)):
            continue  # doing nothing may be the optimum, or nothing better was seen
        # the trivial level is the mean of TRIVIAL_EPISODES episodes and the run's a mean of
        # its late ones: their difference has this standard error (a per-episode spread is not
        # the uncertainty of a mean: Swimmer's zero action spreads ±16 an episode, and a 40
        # from PPO was called doing nothing)
        se = sd * math.sqrt(1 / tasks.TRIVIAL_EPISODES + (1 / n_late if n_late else 0.0))
        tol = max(2 * se, 0.05 * gap)
        if rand is not None and abs(rand[0] - mu) > 0:
            tol = max(min(tol, 0.5 * abs(rand[0] - mu)), 2 * se)
        if abs(m - mu) > tol + 1e-9 * max(abs(mu), 1.0):
            continue
        against = (
            f"the task's threshold is {fmt(threshold)}"
            if threshold is not None
            else f"the run's best was {fmt(best)}"
        )
        rnd = f"; uniformly random actions: {fmt(rand[0])}" if rand is not None else ""
        return Hit(
            "error" if threshold is not None else "warning",
            f"the {r.name} over the last 20% of training ({fmt(m)}) sits at the level of "
            f"{what} ({fmt(mu)} ± {fmt(sd)}{rnd}), and {against}",
            metric=metric if metric != EPISODES else r.mean,
            step=d.end,
            evidence={
                "late_mean": m,
                "trivial": what,
                "trivial_return": mu,
                "random_return": rand[0] if rand else None,
                "reward_threshold": threshold,
                "best": best,
            },
        )
    return None


GREEDY_GAP_SHARE = 0.25  # of the training return's scale: a gap that changes a verdict
GREEDY_GAP_Z = 2.5  # standard errors: one-sided p ~ 0.006 per run when the policies are alike


@rule(
    "greedy-gap",
    entry="11",
    reads=(EVAL_RETURN, "eval/return_std", "episodes", "rollout/ep_return_mean", TRUE_READ),
    threshold="the final greedy evaluation's mean return is below training's at its end (the "
    "last 10% of steps, at least the last 10 episodes) "
    "by more than a quarter of max(|training mean|, its per-episode std) and by more than 2.5 "
    "standard errors of the difference (per-episode spreads of both, at least 5 evaluation "
    "episodes); a warning",
    cause="the deterministic policy (argmax, or the Gaussian's mean) is not the policy that "
    "learned: where two actions are close in probability the argmax can pick one that goes "
    "nowhere (a no-op, a push into a wall, two states whose best actions point at each other), "
    "and a greedy episode then stays there to the end, where sampling stumbles out",
    check_next="the per-episode greedy returns (several exactly equal, such as 0: stuck); watch "
    "greedy episodes (`backflip watch`); the policy's entropy at the end; more training, an "
    "entropy bonus, or an encoder that separates the states (cnn=keypoints for small objects)",
    source="issue 22 (MovingDot84: PPO's greedy 44 against a training return of ~90; 10 of 20 "
    "greedy episodes a no-op from the first step)",
)
def greedy_gap(d: RunData):
    ev, sd = d.get(EVAL_RETURN), d.get("eval/return_std")
    r = d.returns
    if ev is None or r is EVAL_RETURNS or d.end < 0.5 * d.horizon:
        return None
    step, g = int(ev[0][-1]), float(ev[1][-1])
    n_eval = len(d.status.get("final_eval_returns") or []) or int(d.hp.get("eval_episodes", 0))
    if not math.isfinite(g) or step < 0.9 * d.end or n_eval < 5:
        return None
    if (eps := d.episodes_of(r)) is not None:
        steps, rets, _ = eps
        ok = np.isfinite(rets)
        steps, rets = steps[ok], rets[ok]
        late = rets[steps >= 0.9 * d.horizon]
        late = late if len(late) >= 10 else rets[-10:]
        if len(late) < 10:
            return None
        m, s_train, n_train = float(np.mean(late)), float(np.std(late, ddof=1)), len(late)
    elif (series := d.get(r.mean)) is not None and len(finite(series)[0]) >= 3:
        late = tail(finite(series), 0.1, d.horizon)[1]
        # means over episodes, whose own spread is unknown: the evaluation's stands in for it
        m, s_train, n_train = float(np.mean(late)), math.nan, None
    else:
        return None
    s_eval = float(sd[1][-1]) if sd is not None and sd[0][-1] == step else math.nan
    spread = s_train if math.isfinite(s_train) else s_eval
    if not math.isfinite(spread):
        return None
    s_eval = s_eval if math.isfinite(s_eval) else spread
    se = math.sqrt(s_eval**2 / n_eval + (spread**2 / n_train if n_train else 0.0))
    gap = m - g
    if gap <= GREEDY_GAP_SHARE * max(abs(m), spread) or gap <= GREEDY_GAP_Z * se:
        return None
    return Hit(
        "warning",
        f"the final greedy evaluation's mean {r.name} ({fmt(g)} over {n_eval} episodes) is "
        f"{fmt(gap)} below training's at its end ({fmt(m)})",
        metric=EVAL_RETURN,
        step=step,
        evidence={"greedy": g, "training": m, "gap": gap, "std_error": se, "n_eval": n_eval},
    )
