"""The runs themselves: non-finite values, failed and short seeds, missing returns, throughput and memory (catalog entries 1, 12, 13)."""

from __future__ import annotations

import itertools

import numpy as np

from backflip.doctor.findings import Hit, rule
from backflip.doctor.rules.common import (
    JONES,
    MIN_ROWS,
    RAHTZ,
    SCHULMAN,
    TRUE_READ,
    _rows,
)
from backflip.doctor.series import (
    RunData,
    after_warmup,
    finite,
    fmt,
    spearman,
)
from backflip.runs.layout import STATUS

# --- entry 1: non-finite values ---------------------------------------------------------------


@rule(
    "nonfinite",
    entry="1",
    reads=("every metric",),
    threshold="any NaN or ±inf at any step",
    cause="a numerical blow-up (exploding loss or learning rate), or NaN/inf coming from the "
    "environment (rewards, observations) and spreading into the update",
    check_next="the metric that went bad first: env/* means the environment produced it, "
    "train/* means the update did; lower the learning rate, clip gradients, check the reward",
    source="common practice; SB3 VecCheckNan",
    live=False,  # the seed process checks every row itself (doctor.stop_on_nan)
)
def nonfinite(d: RunData):
    first_step, names = None, []
    for name, (steps, values) in d.metrics.items():
        bad = ~np.isfinite(values)
        if bad.any():
            s = int(steps[np.argmax(bad)])
            if first_step is None or s < first_step:
                first_step, names = s, [name]
            elif s == first_step:
                names.append(name)
    stopped = "non-finite" in str(d.status.get("error", ""))
    if first_step is None and not stopped:
        return None
    if first_step is None:  # only the status knows (the row was not written)
        return Hit("error", f"the seed was stopped: {d.status['error']}", evidence={"stopped": 1})
    names.sort(key=lambda n: (not n.startswith("env/"), not n.startswith("rollout/"), n))
    first = names[0]
    if first.startswith("env/"):
        origin = "the environment (its raw rewards or observations)"
    elif d.learned_reward and first.startswith(("rollout/ep_return", "env/reward")):
        origin = "the learned reward (the reward model's output r̂)"
    elif first.startswith(("rollout/ep_return", "eval/return")):
        origin = "the rewards (episode returns became non-finite)"
    elif first.startswith("rollout/"):
        origin = "the value estimates or advantages"
    elif first.startswith("train/"):
        origin = "the update (losses, gradients or parameters)"
    else:
        origin = f"{first}"
    seen = (
        f"non-finite values first at step {first_step:,} in {', '.join(names[:5])}"
        + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        + f": it started in {origin}"
        + (" and the seed was stopped there" if stopped else "")
    )
    return Hit(
        "error",
        seen,
        metric=names[0],
        step=first_step,
        evidence={"first_step": first_step, "metrics": names, "stopped": stopped},
    )


@rule(
    "seed-failed",
    entry="-",
    reads=(STATUS,),
    threshold="the seed's process ended with an error",
    cause="an exception in the algorithm or the environment, or the process was killed",
    check_next="the seed's traceback.txt and stderr.log in the run directory",
    source="backflip archive",
)
def seed_failed(d: RunData):
    err = str(d.status.get("error") or "")
    if d.status.get("status") != "failed" or "non-finite" in err:
        return None
    return Hit("error", f"the seed failed: {err[:200]}", evidence={"error": err})


@rule(
    "short-run",
    entry="-",
    reads=("every metric",),
    threshold=f"fewer than {MIN_ROWS} metric rows",
    cause="a short budget or an early stop",
    check_next="train longer before trusting trend rules (they were skipped)",
    source="backflip",
)
def short_run(d: RunData):
    n = _rows(d)
    if 0 < n < MIN_ROWS:
        return Hit("info", f"only {n} metric rows: trend rules need {MIN_ROWS}")
    return None


@rule(
    "no-returns",
    entry="-",
    reads=("rollout/ep_return_mean", "episodes", TRUE_READ),
    threshold="metric rows but no episode return at all",
    cause="no episode finished within the budget, or the writer did not log returns: CleanRL's "
    "scripts under Gymnasium 1.x log none (they read infos['final_info'], which Gymnasium 1.0 "
    "removed)",
    check_next="the episodes' length against the budget; for CleanRL, Gymnasium 0.29 (the "
    "version its scripts declare). The rules about the return were skipped",
    source="backflip",
)
def no_returns(d: RunData):
    if not _rows(d) or d.get(d.returns.mean) is not None or d.episodes is not None:
        return None
    seen = f"{_rows(d)} metric rows up to step {d.end:,} and no episode {d.returns.name}"
    if d.source == "cleanrl":
        return Hit(
            "info",
            seen + " (no charts/episodic_return)",
            cause="CleanRL's scripts log episode returns from infos['final_info'], which "
            "Gymnasium 1.0 removed: under Gymnasium 1.x they log none",
        )
    return Hit("info", seen)


# --- entry 12: throughput ----------------------------------------------------------------------


def _first_update(d: RunData) -> float | None:
    """The step of the first logged loss (any metric named like `*loss*`: backflip's `loss/*`,
    SB3's `train/*_loss`, CleanRL's `losses/*`), or None: before it an off-policy agent only
    acts (learning_starts), several times faster than once it also updates."""
    firsts = [s[0][0] for k in d.metrics if "loss" in k and (s := d.get(k)) is not None]
    return float(min(firsts)) if firsts else None


def _throughput(d: RunData, name: str):
    """(steps, values) of a throughput series without evaluation rows, rows before the first
    update, startup and zeros."""
    s = d.get(name)
    if s is None:
        return None
    steps, v = s
    ok = np.isfinite(v) & (v > 0)
    if (first := _first_update(d)) is not None:
        ok &= steps >= first
    ev = d.get("time/eval_s")
    if ev is not None:
        ok &= ~np.isin(steps, ev[0])
    steps, v = steps[ok], v[ok]
    return after_warmup((steps, v), d.horizon, 0.1)


def _decline(steps, v) -> dict | None:
    """A steady decline: five consecutive segments whose medians never rise by more than 15%,
    and either the last < 0.7× the first with a rank trend ρ < −0.8, or the last < 0.5× the
    first with ρ < −0.6. A machine that gets busy for a while makes bumps, not a staircase."""
    if len(v) < MIN_ROWS:
        return None
    medians = [float(np.median(p)) for p in np.array_split(np.asarray(v, np.float64), 5)]
    rho = spearman(steps, v)
    steady = all(b <= 1.15 * a for a, b in itertools.pairwise(medians))
    ratio = medians[-1] / medians[0] if medians[0] > 0 else 1.0
    if steady and ((ratio < 0.7 and rho < -0.8) or (ratio < 0.5 and rho < -0.6)):
        return {"segment_medians": medians, "spearman": rho, "last_over_first": ratio}
    return None


@rule(
    "throughput-decline",
    entry="12",
    reads=("time/sps_cpu", "time/sps", "sys/load_avg"),
    threshold="steady decline: medians of five consecutive segments never rise by > 15%, and "
    "the last is < 0.7× the first with Spearman ρ(step, steps/s) < −0.8, or < 0.5× with "
    "ρ < −0.6 (evaluation rows, rows before the first logged loss — an off-policy agent's "
    "learning_starts — and the first 10% excluded). Warning when steps per CPU-second decline (the process's own work grows) "
    "and the machine's load average did not rise by > 25%; info otherwise",
    cause="a leak or growing per-step work (a list that grows, a buffer scanned each step, "
    "a thread that blocks more and more — Rahtz missed one for months)",
    check_next="profile two points of the run (py-spy dump), look for structures that grow "
    "with steps",
    source=f"{RAHTZ}; {JONES}",
    live=True,
)
def throughput_decline(d: RunData):
    cpu = _throughput(d, "time/sps_cpu")
    wall = _throughput(d, "time/sps")
    load_note, busier, load_ev = "", False, {}
    if (load := d.get("sys/load_avg")) is not None:
        parts = np.array_split(finite(after_warmup(load, d.horizon, 0.1))[1], 5)
        if len(parts[0]) and len(parts[-1]):
            la, lc = float(np.median(parts[0])), float(np.median(parts[-1]))
            busier = lc > 1.25 * la
            load_note = f"; the machine's load average went from {la:.1f} to {lc:.1f}"
            load_ev = {"load_first": la, "load_last": lc}
    for name, series in (("time/sps_cpu", cpu), ("time/sps", wall)):
        decl = _decline(*series) if series is not None else None
        if not decl:
            continue
        m = decl["segment_medians"]
        what = "steps per CPU-second" if name == "time/sps_cpu" else "steps/s"
        seen = f"{what} fell steadily from {fmt(m[0])} to {fmt(m[-1])} (ρ = {decl['spearman']:.2f})"
        ev = {**decl, **load_ev}
        if name == "time/sps" and cpu is not None and len(cpu[1]) >= MIN_ROWS:
            return Hit(
                "info",
                seen + " but steps per CPU-second did not" + load_note,
                metric=name,
                step=int(series[0][-1]),
                evidence=ev,
                cause="other processes competing for the CPU, or waiting (I/O, locks, a "
                "blocked thread)",
                check_next="the machine's load; if it was idle, look for waits that grow",
            )
        if busier:
            return Hit(
                "info",
                seen + load_note,
                metric=name,
                step=int(series[0][-1]),
                evidence=ev,
                cause="the machine got busier (other processes share the "
                "CPU), or growing work per step",
                check_next="rerun on a quiet machine before hunting a leak",
            )
        if name == "time/sps":
            seen += " (wall clock; without CPU time, competition from other processes can't be "
            seen += "ruled out)"
        return Hit("warning", seen + load_note, metric=name, step=int(series[0][-1]), evidence=ev)
    return None


# --- entry 13: memory -----------------------------------------------------------------------------


@rule(
    "memory-growth",
    entry="13",
    reads=("sys/rss_mb",),
    threshold="after warm-up RSS grows by > 100 MiB and > 25% with Spearman ρ > 0.8",
    cause="a leak (tensors kept with their graphs, lists of episodes) or a replay buffer "
    "filling up (then it stops at capacity — check it fits in memory)",
    check_next="what grows with steps; for off-policy runs the buffer size × observation size",
    source=f"{RAHTZ}; {SCHULMAN}",
    live=True,
)
def memory_growth(d: RunData):
    if (s := d.get("sys/rss_mb")) is None:
        return None
    steps, v = after_warmup(finite(s), d.horizon)
    if len(v) < MIN_ROWS:
        return None
    growth = float(v[-1] - v[0])
    rho = spearman(steps, v)
    if growth <= 100 or growth <= 0.25 * v[0] or not rho > 0.8:
        return None
    rate = growth / max(int(steps[-1] - steps[0]), 1) * 1e6
    return Hit(
        "warning",
        f"resident memory grew from {v[0]:.0f} to {v[-1]:.0f} MiB after warm-up "
        f"(ρ = {rho:.2f}, {rate:.0f} MiB per million steps)",
        metric="sys/rss_mb",
        step=int(steps[-1]),
        evidence={"start_mb": float(v[0]), "end_mb": float(v[-1]), "mb_per_million_steps": rate},
    )
