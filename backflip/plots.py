"""PNG figures for comparisons, sweeps and ablations (matplotlib, no display needed).

Every figure shows uncertainty: curves are the IQM across seeds with a 95% bootstrap band
(`backflip.curves`), final scores are every seed's point plus the IQM and its 95% CI.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finite(x) -> bool:
    """A number that is not NaN (None: a value archived as JSON null)."""
    return x is not None and bool(np.isfinite(x))


def _band(ax, curve: dict, label: str, color: str) -> None:
    """The IQM line (dots when there are few points: one point is no line) and its band; the
    legend says when there is no band ("no interval: 1 seed")."""
    step = np.asarray(curve["step"], float)
    f = lambda k: np.array([np.nan if v is None else v for v in curve[k]], float)  # noqa: E731
    if curve.get("no_interval"):
        label = f"{label} ({curve['no_interval']})"
    marker = "o" if step.size < 40 else None
    ax.plot(step, f("iqm"), color=color, label=label, lw=1.6, marker=marker, ms=3)
    ax.fill_between(step, f("low"), f("high"), color=color, alpha=0.2, lw=0)


def _finals(ax, sides: list[dict]) -> None:
    """Per-seed final scores (jittered points) with the IQM and its 95% CI."""
    rng = np.random.default_rng(0)
    for i, side in enumerate(sides):
        color = COLORS[i % len(COLORS)]
        scores = np.asarray([s for s in side["finals"] if s is not None], float)
        ax.scatter(i + rng.uniform(-0.12, 0.12, scores.size), scores, s=14, color=color, alpha=0.6)
        agg = side.get("summary") or {}
        if agg.get("n"):
            lo, hi = agg.get("ci_low"), agg.get("ci_high")
            err = None
            if _finite(lo) and _finite(hi):
                err = [[agg["iqm"] - lo], [hi - agg["iqm"]]]
            ax.errorbar(i + 0.3, agg["iqm"], yerr=err, fmt="D", color=color, capsize=4, ms=5)
    ax.set_xticks(range(len(sides)), [s["label"] for s in sides])
    ax.set_xlim(-0.5, len(sides) - 0.3)
    ax.set_title("final score per seed; IQM with 95% CI", fontsize=10)
    ax.grid(axis="y", alpha=0.3)


def comparison_figure(sides: list[dict], path: str | Path, metric: str = "return") -> Path:
    """Left: learning curves (IQM, 95% band); right: final-score distributions.

    `sides`: [{"label", "curve" (curves.aggregate_curves dict or None), "finals", "summary"}].
    """
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]}, constrained_layout=True
    )
    for i, side in enumerate(sides):
        if side.get("curve") and side["curve"]["step"]:
            _band(ax1, side["curve"], side["label"], COLORS[i % len(COLORS)])
    ax1.set_xlabel("environment steps")
    ax1.set_ylabel("training return (mean of last 20 episodes)" if metric == "return" else metric)
    ax1.set_title("learning curves: IQM across seeds, 95% bootstrap band", fontsize=10)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="best")
    _finals(ax2, sides)
    ax2.set_ylabel("final greedy evaluation return")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sensitivity_figure(panels: dict, base: dict, path: str | Path, title: str) -> Path:
    """One panel per hyperparameter (or switch): IQM [95% CI] of the final score at each value
    tried, in order, the default in black over a grey band of its CI; fragile values in red.

    `panels`: {key: [{"value", "summary", "flag", "default": bool}]}; `base`: the default's
    summary.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(3.4 * len(panels) + 0.8, 3.6),
        squeeze=False,
        constrained_layout=True,
    )
    colors = {"fragile": "#d62728", "helps": "#d62728", "better": "#2ca02c", "hurts": "#2ca02c"}
    for ax, (key, points) in zip(axes[0], panels.items(), strict=True):
        if base.get("n") and _finite(base.get("ci_low")) and _finite(base.get("ci_high")):
            ax.axhspan(base["ci_low"], base["ci_high"], color="grey", alpha=0.2, lw=0)
        for j, pt in enumerate(points):
            s = pt["summary"]
            if not s.get("n"):
                continue
            color = "black" if pt["default"] else colors.get(pt["flag"], "#1f77b4")
            err = None
            if _finite(s.get("ci_low")) and _finite(s.get("ci_high")):
                err = [[s["iqm"] - s["ci_low"]], [s["ci_high"] - s["iqm"]]]
            ax.errorbar(j, s["iqm"], yerr=err, fmt="o", color=color, capsize=4)
        labels = [_short(p["value"]) + ("\n(default)" if p["default"] else "") for p in points]
        ax.set_xticks(range(len(points)), labels, fontsize=8)
        ax.set_xlim(-0.5, len(points) - 0.5)
        ax.set_title(key, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("final greedy eval return: IQM, 95% CI")
    fig.suptitle(title + "   (red: worse than the default with confidence)", fontsize=10)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def run_figure(run_dir: str | Path, path: str | Path, metric: str = "return") -> Path:
    """One run: every seed's curve, and their IQM with a 95% band."""
    from backflip.curves import aggregate_curves, run_seed_curves
    from backflip.runs.archive import read_record

    record = read_record(Path(run_dir))
    per_seed = run_seed_curves(run_dir, record["config"]["seeds"], metric)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    for seed, (steps, values, _end) in per_seed.items():
        marker = "o" if steps.size < 40 else None
        ax.plot(steps, values, lw=0.7, alpha=0.5, label=f"seed {seed}", marker=marker, ms=2)
    if per_seed:
        agg = aggregate_curves(list(per_seed.values()))
        _band(ax, agg, "IQM" if agg["no_interval"] else "IQM (95% band)", "black")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(metric)
    ax.set_title(f"{record['id']}: {record['algo']} on {record['env']}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
