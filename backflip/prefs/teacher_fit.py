"""A labeler as a B-Pref teacher: β, ε and γ by maximum likelihood from its answers against the
true rewards stored with each segment (`backflip prefs fit-teacher RUN`). For a simulated
teacher it checks that the simulation is what it says; for a person it gives the numbers to
simulate them with (`--set prefs.teacher_beta=... --set prefs.teacher_mistake=...`).

**Model** (`labelers.Teacher`). For a pair whose true rewards are r¹, r² (H steps each), a teacher
with myopia γ judges Δ = Σ_t γ^(H−t) (r¹_t − r²_t) and answers "left" with probability

    P(left) = ε + (1 − 2ε) σ(β Δ)

— Bradley–Terry with rationality β, then flipped with probability ε ∈ [0, 0.5]. β is per unit of
true return; β = ∞ is the rational teacher (the higher return always, but for mistakes). A
teacher that answers uniformly at random with probability ρ (`error_rate`) is this model with
ε = ρ / 2.

**Data.** The answers "left" and "right" to pairs whose undiscounted true returns differ
(`labelers.oracle_choice` is not "equal"). "Equal" and "can't tell" answers, combined labels and
pairs with tied returns say nothing about β or ε under this model; they are counted and reported
(the skip and equal thresholds are not estimated).

**Estimation.** For a fixed β the log-likelihood is concave in ε, so ε̂(β) is found by a
bracketed Newton iteration; the profile ℓ(β) = max_ε ℓ(β, ε) is scanned on a log grid of β
(relative to the median |Δ|) plus β = ∞, and the best cell is refined by golden-section search.

**Intervals**: profile likelihood (Wilks): a parameter's 95% interval holds the values whose
profile log-likelihood is within χ²₁(0.95) / 2 = 1.92 of the maximum. β's interval is unbounded
above when a rational teacher (β = ∞) fits about as well: answers that disagree with the true
return only as often as ε explains, at any |Δ|.

**γ** is profiled over [0.5, 1] (each γ: the full β, ε fit), with its interval the same way, and
tested against γ = 1 by the likelihood ratio (γ = 1 is on the boundary of the range, so the
p-value is that of a 50:50 mixture of χ²₀ and χ²₁). It is identifiable only through *when*
within the segments the rewards differ; the numbers to simulate with are those at γ̂ when the
test rejects γ = 1 at 5%, else those at γ = 1 (B-Pref's default teacher).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats as sps

from backflip.prefs.labelers import Teacher, oracle_choice

CHI2_95 = float(sps.chi2.ppf(0.95, 1))  # 3.841
MIN_ANSWERS = 20  # clear answers on pairs whose returns differ, for a fit to be attempted
GAMMA_RANGE = (0.5, 1.0)
_BETA_DECADES = (-3.0, 6.0)  # the β grid, relative to 1 / median |Δ|


# --- the likelihood -----------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


def _agree_prob(beta: np.ndarray, z: np.ndarray) -> np.ndarray:
    """(B, N): σ(β z) for each β (inf: the rational teacher) and signed margin z."""
    beta = np.atleast_1d(np.asarray(beta, np.float64))
    finite = np.isfinite(beta)
    out = np.empty((len(beta), len(z)))
    out[finite] = _sigmoid(beta[finite, None] * z[None, :])
    out[~finite] = np.where(z > 0, 1.0, np.where(z < 0, 0.0, 0.5))
    return out


def _loglik(q: np.ndarray, eps) -> np.ndarray:
    """Σ_i log(ε + (1 − 2ε) q_i) over the last axis of `q` (broadcast against `eps`)."""
    eps = np.asarray(eps, np.float64)[..., None]
    return np.log(np.maximum(eps + (1 - 2 * eps) * q, 1e-300)).sum(-1)


def _best_eps(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of q (B, N): the ε in [0, 0.5] maximizing the concave Σ log(ε + (1−2ε) q),
    and that maximum. Bracketed Newton on the derivative."""
    a = 1 - 2 * q  # d/dε of each term's argument
    lo, hi = np.zeros(len(q)), np.full(len(q), 0.5)
    tiny = 1e-12

    def slope(e):  # first and second derivative in ε; the argument is q + ε (1 − 2q)
        g = a / np.maximum(q + e[:, None] * a, 1e-300)
        return g.sum(1), -(g**2).sum(1)

    d_lo, _ = slope(np.full(len(q), tiny))
    d_hi, _ = slope(hi)
    eps = np.where(d_lo <= 0, 0.0, np.where(d_hi >= 0, 0.5, 0.1))
    active = (d_lo > 0) & (d_hi < 0)
    for _ in range(60):
        if not active.any():
            break
        d1, d2 = slope(eps)
        lo = np.where(active & (d1 > 0), eps, lo)
        hi = np.where(active & (d1 <= 0), eps, hi)
        newton = eps - d1 / np.minimum(d2, -1e-300)
        step = np.where((newton > lo) & (newton < hi), newton, (lo + hi) / 2)
        done = np.abs(step - eps) < 1e-13
        eps = np.where(active, step, eps)
        active &= ~done
    return eps, _loglik(q, eps)


def _golden(f, a: float, b: float, iters: int = 30) -> float:
    """The x in [a, b] maximizing a unimodal f."""
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _crossing(f, inside: float, outside: float, target: float, iters: int = 40) -> float:
    """The x between `inside` (f ≥ target) and `outside` (f < target) where f = target."""
    for _ in range(iters):
        mid = (inside + outside) / 2
        if f(mid) >= target:
            inside = mid
        else:
            outside = mid
    return (inside + outside) / 2


# --- fits ---------------------------------------------------------------------------------------


def margins(diffs: np.ndarray, left_chosen: np.ndarray, gamma: float) -> np.ndarray:
    """Signed margins z = ±Δ_γ (positive when the chosen segment's discounted return is higher).

    `diffs` (N, H): r¹ − r² per step, right-aligned (segments shorter than H padded with zeros
    at the start), so step t of a segment of length H weighs γ^(H−t)."""
    w = gamma ** np.arange(diffs.shape[1] - 1, -1, -1, dtype=np.float64)
    delta = diffs @ w
    return np.where(left_chosen, delta, -delta)


def fit_beta_eps(z: np.ndarray, intervals: bool = True) -> dict:
    """Maximum-likelihood β and ε for signed margins `z`, with profile-likelihood 95% intervals.

    β = inf for a rational teacher; an interval's bound is inf (upper β) when the data cannot
    exclude a rational teacher, 0 (lower β) when they cannot exclude a random one."""
    z = np.asarray(z, np.float64)
    scale = float(np.median(np.abs(z[z != 0]))) if np.any(z != 0) else 1.0
    # a coarser grid when only the maximum is wanted (the γ profile); refined around its best cell
    log_grid = np.linspace(*_BETA_DECADES, 181 if intervals else 46) - math.log10(scale)
    betas = 10.0**log_grid
    q_grid = _agree_prob(betas, z)
    eps_grid, ll_grid = _best_eps(q_grid)
    q_inf = _agree_prob(np.array([np.inf]), z)
    eps_inf, ll_inf = (float(v[0]) for v in _best_eps(q_inf))

    def profile_beta(log_beta: float) -> float:
        return float(_best_eps(_agree_prob(np.array([10.0**log_beta]), z))[1][0])

    i = int(np.argmax(ll_grid))
    if ll_inf >= ll_grid[i] - 1e-9:
        beta, eps, ll = math.inf, eps_inf, ll_inf
    else:
        lo, hi = log_grid[max(i - 1, 0)], log_grid[min(i + 1, len(log_grid) - 1)]
        lb = _golden(profile_beta, lo, hi)
        beta = 10.0**lb
        eps_arr, ll_arr = _best_eps(_agree_prob(np.array([beta]), z))
        eps, ll = float(eps_arr[0]), float(ll_arr[0])
        if ll < ll_grid[i]:  # the refinement never loses to the grid
            beta, eps, ll = float(betas[i]), float(eps_grid[i]), float(ll_grid[i])
    out = {"beta": beta, "eps": eps, "loglik": ll, "n": len(z)}
    if not intervals:
        return out
    target = ll - CHI2_95 / 2

    # β: where the profile falls below the target on either side of β̂
    above = ll_grid >= target
    log_hat = math.log10(beta) if math.isfinite(beta) else math.inf
    # (grid points between the last one below the target and β̂ are above it)
    below_hat = np.flatnonzero(~above & (log_grid < log_hat))
    if len(below_hat) == 0:
        beta_lo = 0.0
    else:
        j = int(below_hat[-1])
        inside = log_grid[j + 1] if j + 1 < len(log_grid) and log_grid[j + 1] < log_hat else log_hat
        if math.isinf(inside):  # only the rational teacher fits: the bound is the grid's top
            beta_lo = float(betas[-1])
        else:
            beta_lo = 10.0 ** _crossing(profile_beta, inside, log_grid[j], target)
    above_hat = np.flatnonzero(~above & (log_grid > log_hat))
    if len(above_hat) == 0:
        # beyond the grid's top (10^6 / median |Δ|) the teacher is as good as rational
        beta_hi = math.inf if ll_inf >= target else float(betas[-1])
    else:
        j = int(above_hat[0])
        inside = log_grid[j - 1] if log_grid[j - 1] > log_hat else log_hat
        beta_hi = 10.0 ** _crossing(profile_beta, inside, log_grid[j], target)

    # ε: profile over β at each ε
    def profile_eps(e: float) -> float:
        ll_b = _loglik(q_grid, e)
        k = int(np.argmax(ll_b))
        best = max(float(ll_b[k]), float(_loglik(q_inf, e)[0]))
        lo, hi = log_grid[max(k - 1, 0)], log_grid[min(k + 1, len(log_grid) - 1)]
        lb = _golden(lambda x: float(_loglik(_agree_prob(np.array([10.0**x]), z), e)[0]), lo, hi)
        return max(best, float(_loglik(_agree_prob(np.array([10.0**lb]), z), e)[0]))

    eps_lo = 0.0 if profile_eps(0.0) >= target else _crossing(profile_eps, eps, 0.0, target)
    eps_hi = 0.5 if profile_eps(0.5) >= target else _crossing(profile_eps, eps, 0.5, target)
    out.update(beta_ci=(beta_lo, beta_hi), eps_ci=(eps_lo, eps_hi))
    return out


def fit_gamma(diffs: np.ndarray, left_chosen: np.ndarray) -> dict:
    """γ by profile likelihood over GAMMA_RANGE (each γ: the best β, ε), its 95% interval, the
    β and ε fit at γ̂ with their intervals, and the likelihood-ratio p-value against γ = 1."""

    def profile(gamma: float) -> float:
        return fit_beta_eps(margins(diffs, left_chosen, gamma), intervals=False)["loglik"]

    grid = np.linspace(*GAMMA_RANGE, 11)
    ll = np.array([profile(g) for g in grid])
    i = int(np.argmax(ll))
    gamma = _golden(profile, grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)], iters=20)
    best = profile(gamma)
    if best < ll[i]:
        gamma, best = float(grid[i]), float(ll[i])
    if ll[-1] >= best - 1e-9:  # a flat profile (e.g. a rational teacher): no sign of myopia
        gamma, best = 1.0, float(ll[-1])
    target = best - CHI2_95 / 2
    lower = np.flatnonzero((ll < target) & (grid < gamma))
    g_lo = (
        GAMMA_RANGE[0]
        if len(lower) == 0
        else _crossing(profile, gamma, grid[lower[-1]], target, 20)
    )
    upper = np.flatnonzero((ll < target) & (grid > gamma))
    g_hi = (
        GAMMA_RANGE[1] if len(upper) == 0 else _crossing(profile, gamma, grid[upper[0]], target, 20)
    )
    stat = max(0.0, 2 * (best - ll[-1]))
    p = 1.0 if stat == 0 else float(0.5 * sps.chi2.sf(stat, 1))
    at = fit_beta_eps(margins(diffs, left_chosen, gamma))
    return {**at, "gamma": float(gamma), "gamma_ci": (float(g_lo), float(g_hi)), "lr_p": p}


# --- from a run's answers -----------------------------------------------------------------------


def collect(db_paths: list[Path]) -> dict[tuple[str, str], dict]:
    """The answers of each labeler over these databases (a run's seeds): {(kind, who): {"choice":
    [...], "left": [rewards], "right": [rewards]}} — people by name, simulated teachers by the
    spec stored with their labels."""
    from backflip.prefs.db import PreferenceDB

    groups: dict[tuple[str, str], dict] = {}
    for path in db_paths:
        db = PreferenceDB(path)
        try:
            rows = db.graded_answers()
            rewards = db.segment_rewards([r[k] for r in rows for k in ("left", "right")])
        finally:
            db.close()
        for r in rows:
            g = groups.setdefault((r["kind"], r["who"]), {"choice": [], "left": [], "right": []})
            g["choice"].append(r["choice"])
            g["left"].append(rewards[r["left"]])
            g["right"].append(rewards[r["right"]])
    return groups


def fit_labeler(kind: str, who: str, answers: dict, gamma: bool = True) -> dict:
    """The fit of one labeler's answers (module docstring), or the reason there is none
    (`reason`). The counts say what was used: clear answers on pairs with differing returns."""
    choices = answers["choice"]
    counts = {c: choices.count(c) for c in ("left", "right", "equal", "skip", "mixed")}
    clear, ties = [], 0
    for i, c in enumerate(choices):
        if c in ("left", "right"):
            r1, r2 = float(np.sum(answers["left"][i])), float(np.sum(answers["right"][i]))
            if oracle_choice(r1, r2) == "equal":
                ties += 1
            else:
                clear.append(i)
    teacher = Teacher.parse(who) if kind == "synthetic" else None
    out = {
        "kind": kind,
        "who": who,
        "teacher": None if teacher is None else teacher_params(teacher),
        "answers": len(choices),
        "used": len(clear),
        "ties": ties,
        **{k: v for k, v in counts.items() if k in ("equal", "skip", "mixed")},
    }
    if not clear and counts["left"] + counts["right"] > 0:
        out["reason"] = "the true returns of the pairs it answered never differ"
        return out
    if len(clear) < MIN_ANSWERS:
        out["reason"] = (
            f"{len(clear)} left/right answers on pairs whose true returns differ; "
            f"at least {MIN_ANSWERS} are needed"
        )
        return out
    h = max(len(answers["left"][i]) for i in clear)
    diffs = np.zeros((len(clear), h))
    for row, i in enumerate(clear):
        d = np.asarray(answers["left"][i], np.float64) - np.asarray(answers["right"][i])
        diffs[row, h - len(d) :] = d
    left_chosen = np.array([choices[i] == "left" for i in clear])
    z1 = margins(diffs, left_chosen, 1.0)
    out["agree_with_return"] = float(np.mean(z1 > 0))
    out["gamma_1"] = fit_beta_eps(z1)
    free = fit_gamma(diffs, left_chosen) if gamma and h > 1 else None
    out["gamma_free"] = free
    use_free = free is not None and free["lr_p"] < 0.05
    chosen = free if use_free else out["gamma_1"]
    sim = {"teacher_mistake": round(chosen["eps"], 4)}
    if math.isfinite(chosen["beta"]):
        sim["teacher_beta"] = float(f"{chosen['beta']:.4g}")
    if use_free:
        sim["teacher_gamma"] = round(free["gamma"], 3)
    out["simulate"] = sim
    return out


def teacher_params(teacher: Teacher) -> dict:
    """A simulated teacher's parameters as stored (β None: rational)."""
    return {
        "beta": teacher.beta,
        "gamma": teacher.gamma,
        "mistake": teacher.mistake,
        "skip": teacher.skip,
        "equal": teacher.equal,
        "error_rate": teacher.error_rate,
    }


def fit_run(run_dir: Path, seeds: list[int], gamma: bool = True) -> list[dict]:
    """One fit per labeler over these seeds of a preference run (people first, by name)."""
    from backflip.runs.layout import PREFS_DB, seed_dir

    paths = [seed_dir(run_dir, s) / PREFS_DB for s in seeds]
    groups = collect([p for p in paths if p.exists()])
    order = sorted(groups, key=lambda k: (k[0] != "person", k[1]))
    return [fit_labeler(kind, who, groups[(kind, who)], gamma) for kind, who in order]


def _num(x: float, digits: int = 3) -> str:
    return "∞" if math.isinf(x) else f"{x:.{digits}g}"


def format_fit(fit: dict) -> str:
    """A labeler's fit for the terminal."""
    name = fit["who"] if fit["kind"] == "person" else fit["who"] or "(unnamed)"
    head = f"{'person' if fit['kind'] == 'person' else 'labeler'} {name}: {fit['answers']} answers"
    extra = ", ".join(
        f"{fit[k]} {label}"
        for k, label in (("equal", "equal"), ("skip", "can't tell"), ("mixed", "combined"))
        if fit.get(k)
    )
    head += f" ({extra})" if extra else ""
    if "reason" in fit:
        return f"{head}\n  no fit: {fit['reason']}"
    lines = [
        f"{head}; {fit['used']} left/right answers on pairs whose true returns differ "
        f"({fit['ties']} ties left out), {fit['agree_with_return']:.1%} for the higher return"
    ]
    g1 = fit["gamma_1"]
    lines.append(
        f"  γ = 1:  β = {_num(g1['beta'])} [95% {_num(g1['beta_ci'][0])}, "
        f"{_num(g1['beta_ci'][1])}] per unit of return,  ε = {g1['eps']:.3f} "
        f"[{g1['eps_ci'][0]:.3f}, {g1['eps_ci'][1]:.3f}]"
    )
    free = fit.get("gamma_free")
    if free is not None:
        lines.append(
            f"  γ free: γ = {free['gamma']:.3f} [{free['gamma_ci'][0]:.3f}, "
            f"{free['gamma_ci'][1]:.3f}],  β = {_num(free['beta'])} [{_num(free['beta_ci'][0])}, "
            f"{_num(free['beta_ci'][1])}],  ε = {free['eps']:.3f} [{free['eps_ci'][0]:.3f}, "
            f"{free['eps_ci'][1]:.3f}];  against γ = 1: p = {free['lr_p']:.2g}"
        )
    sets = " ".join(f"--set prefs.{k}={v}" for k, v in fit["simulate"].items())
    lines.append(f"  to simulate: --labeler synthetic {sets}")
    if fit.get("teacher") is not None:
        t = fit["teacher"]
        true = ", ".join(
            f"{k} {'∞' if v is None else f'{v:g}'}"
            for k, v in t.items()
            if k in ("beta", "gamma", "mistake", "error_rate")
        )
        lines.append(f"  (simulated with {true}; an error_rate ρ is ε = ρ/2 here)")
    return "\n".join(lines)
