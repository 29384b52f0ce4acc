"""Figures for comparisons, sweeps, ablations, batteries and plans (matplotlib, no display), as
PNG, SVG or PDF, sized and set for a two-column paper.

Every figure shows uncertainty: curves are the IQM across seeds with a 95% bootstrap band
(`backflip.curves`), final scores are every seed's point plus the IQM and its 95% CI, score
distributions (performance profiles) carry their stratified bootstrap band (`backflip.stats`).

**For papers.** A figure is one column (`SINGLE_COLUMN`, 3.3 in) or the full text width of a
two-column paper (`DOUBLE_COLUMN`, 6.9 in) wide, with 8 pt text everywhere (9 pt for a figure's
title), so it is printed at its own size and stays readable. The format is the file's: PNG (200 dpi), SVG or
PDF (`figure_path` resolves `--format` against a file name). Fonts are embedded: PDF as TrueType
(`pdf.fonttype` 42, never Type 3, which journals and arXiv reject), SVG with every glyph as a
path (`svg.fonttype` "path": the figure renders the same where the font is not installed; the
text is no longer selectable). Each figure is written by `_save`, the one place they are saved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from backflip.errors import UserError

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
FORMATS = ("png", "svg", "pdf")
SINGLE_COLUMN = 3.3  # inches: one column of a two-column paper
DOUBLE_COLUMN = 6.9  # inches: the full text width of a two-column paper
DPI = 200  # PNG resolution: 3.3 in -> 660 px
PAPER = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 9,
    "lines.linewidth": 1.2,
    "lines.markersize": 3,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "grid.linewidth": 0.5,
    "legend.frameon": False,
    "pdf.fonttype": 42,  # TrueType, embedded (Type 3 fonts are refused by many venues)
    "ps.fonttype": 42,
    "svg.fonttype": "path",  # glyphs as paths: no font needed to view it
    "svg.hashsalt": "backflip",  # the same figure gives the same SVG
    "font.family": "DejaVu Sans",  # ships with matplotlib: always there to embed
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(width: float, height: float, **kw):
    """A new figure in the paper style (`PAPER`), `width` x `height` inches."""
    plt = _pyplot()
    with plt.rc_context(PAPER):
        return plt.subplots(figsize=(width, height), layout="constrained", **kw)


def figure_path(path: str | Path, fmt: str | None = None) -> Path:
    """Where a figure goes and in which format: `fmt` (png, svg, pdf) or the file's suffix, PNG
    when neither says. A file without a suffix gets the format's; a suffix that contradicts
    `fmt` is one clear error."""
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"--format {fmt}: choose one of {', '.join(FORMATS)}")
    if suffix in FORMATS:
        if fmt and fmt != suffix:
            raise UserError(f"--format {fmt} but the file {path} is .{suffix}: say one format")
        return path
    if suffix and fmt is None:
        raise UserError(f"cannot write a figure as .{suffix} ({path}): use .png, .svg or .pdf")
    return path.with_name(path.name + "." + (fmt or "png"))


def _save(fig, path: str | Path) -> Path:
    """Write `fig` in its file's format (PNG at `DPI`), fonts embedded, without a timestamp (the
    same figure gives the same file); close it."""
    plt = _pyplot()
    path = figure_path(path)
    fmt = path.suffix.lstrip(".").lower()
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
    with plt.rc_context(PAPER):
        fig.savefig(path, format=fmt, dpi=DPI, metadata=metadata[fmt])
    plt.close(fig)
    return path


def _finite(x) -> bool:
    """A number that is not NaN (None: a value archived as JSON null)."""
    return x is not None and bool(np.isfinite(x))


def _paper(draw):
    """Run a figure function in the paper style: every text, line and tick it creates gets the
    sizes of `PAPER` (matplotlib reads them when each artist is made)."""
    import functools

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with _pyplot().rc_context(PAPER):
            return draw(*args, **kwargs)

    return wrapper


def _band(ax, curve: dict, label: str, color: str) -> None:
    """The IQM line (dots when there are few points: one point is no line) and its band; the
    legend says when there is no band ("no interval: 1 seed")."""
    step = np.asarray(curve["step"], float)
    f = lambda k: np.array([np.nan if v is None else v for v in curve[k]], float)  # noqa: E731
    if curve.get("no_interval"):
        label = f"{label} ({curve['no_interval']})"
    marker = "o" if step.size < 40 else None
    ax.plot(step, f("iqm"), color=color, label=label, marker=marker)
    ax.fill_between(step, f("low"), f("high"), color=color, alpha=0.2, lw=0)


def _profile(ax, profile: dict, label: str, color: str) -> None:
    """A score distribution: the fraction of runs above each tau, with its 95% band."""
    tau = np.asarray(profile["tau"], float)
    f = lambda k: np.array([np.nan if v is None else v for v in profile[k]], float)  # noqa: E731
    ax.plot(tau, f("fraction"), color=color, label=label)
    ax.fill_between(tau, f("low"), f("high"), color=color, alpha=0.2, lw=0)


def _finals(ax, sides: list[dict]) -> None:
    """Per-seed final scores (jittered points) with the IQM and its 95% CI."""
    rng = np.random.default_rng(0)
    for i, side in enumerate(sides):
        color = COLORS[i % len(COLORS)]
        scores = np.asarray([s for s in side["finals"] if s is not None], float)
        ax.scatter(i + rng.uniform(-0.12, 0.12, scores.size), scores, s=6, color=color, alpha=0.6)
        agg = side.get("summary") or {}
        if agg.get("n"):
            lo, hi = agg.get("ci_low"), agg.get("ci_high")
            err = None
            if _finite(lo) and _finite(hi):
                err = [[agg["iqm"] - lo], [hi - agg["iqm"]]]
            ax.errorbar(i + 0.3, agg["iqm"], yerr=err, fmt="D", color=color, capsize=3, ms=3)
    ax.set_xticks(range(len(sides)), [s["label"] for s in sides])
    ax.set_xlim(-0.5, len(sides) - 0.3)
    ax.set_title("final scores; IQM, 95% CI")
    ax.grid(axis="y", alpha=0.3)


@_paper
def comparison_figure(
    sides: list[dict],
    path: str | Path,
    metric: str = "return",
    curve_label: str | None = None,
    score_label: str = "final eval return",
) -> Path:
    """Full text width: learning curves (IQM, 95% band), final scores per seed (IQM, 95% CI)
    and, when the sides carry one, their score distributions (performance profiles).

    `sides`: [{"label", "curve" (curves.aggregate_curves dict or None), "finals", "summary",
    "profile" (stats.performance_profile dict, optional)}]."""
    with_profile = any(s.get("profile") for s in sides)
    ratios = [2.0, 1.0, 1.3] if with_profile else [2.2, 1.0]
    fig, axes = _figure(DOUBLE_COLUMN, 2.3, ncols=len(ratios), width_ratios=ratios)
    ax1, ax2 = axes[0], axes[1]
    for i, side in enumerate(sides):
        if side.get("curve") and side["curve"]["step"]:
            _band(ax1, side["curve"], side["label"], COLORS[i % len(COLORS)])
    default = "training return (last 20 ep.)" if metric == "return" else metric
    x_label = "environment steps"
    if any((s.get("curve") or {}).get("x") == "fraction of budget" for s in sides):
        x_label = "fraction of each task's step budget"
    ax1.set_xlabel(x_label)
    ax1.set_ylabel(curve_label or default)
    ax1.set_title("IQM across seeds, 95% band")
    ax1.grid(alpha=0.3)
    ax1.legend(loc="best")
    _finals(ax2, sides)
    ax2.set_ylabel(score_label)
    if with_profile:
        ax3 = axes[2]
        for i, side in enumerate(sides):
            if side.get("profile"):
                _profile(ax3, side["profile"], side["label"], COLORS[i % len(COLORS)])
        ax3.set_xlabel("score \u03c4")
        ax3.set_ylabel("fraction of runs > \u03c4")
        ax3.set_title("score distribution, 95% band")
        ax3.set_ylim(-0.02, 1.02)
        ax3.grid(alpha=0.3)
    return _save(fig, path)


@_paper
def aggregate_figure(groups: list[dict], path: str | Path, title: str = "") -> Path:
    """rliable's figure for several algorithms (or configs) across tasks, full text width: the
    IQM and the optimality gap of normalized scores with their 95% stratified bootstrap CIs,
    the score distributions (performance profiles) with their bands, and the sample-efficiency
    curves (IQM of normalized scores over steps, 95% band).

    `groups`: [{"label", "aggregate": {"iqm": (v, lo, hi), "optimality_gap": (v, lo, hi)},
    "profile": stats.performance_profile dict, "curve": curves.aggregate_task_curves dict or
    None}]."""
    curves = any(g.get("curve") for g in groups)
    ratios = [1.0, 1.0, 1.3] + ([1.5] if curves else [])
    height = max(2.5, 1.5 + 0.22 * len(groups))  # room for the legend row below the panels
    fig, axes = _figure(DOUBLE_COLUMN, height, ncols=len(ratios), width_ratios=ratios)
    ys = np.arange(len(groups))[::-1]
    for ax, key, name in (
        (axes[0], "iqm", "IQM"),
        (axes[1], "optimality_gap", "optimality gap"),
    ):
        for y, (i, g) in zip(ys, enumerate(groups), strict=True):
            value, lo, hi = g["aggregate"][key]
            color = COLORS[i % len(COLORS)]
            if _finite(lo) and _finite(hi):
                ax.barh(y, hi - lo, left=lo, height=0.6, color=color, alpha=0.35, lw=0)
            ax.plot([value, value], [y - 0.3, y + 0.3], color=color, lw=1.5)
        ax.set_yticks(ys, [g["label"] for g in groups] if key == "iqm" else [])
        ax.set_title(name + ("\n(lower is better)" if key == "optimality_gap" else ""))
        ax.set_xlabel("normalized score")
        ax.grid(axis="x", alpha=0.3)
    for i, g in enumerate(groups):
        _profile(axes[2], g["profile"], g["label"], COLORS[i % len(COLORS)])
    axes[2].set_xlabel("normalized score \u03c4")
    axes[2].set_ylabel("fraction of runs > \u03c4")
    axes[2].set_title("score distributions")
    axes[2].set_ylim(-0.02, 1.02)
    axes[2].grid(alpha=0.3)
    if curves:
        ax = axes[3]
        for i, g in enumerate(groups):
            if g.get("curve"):
                _band(ax, g["curve"], g["label"], COLORS[i % len(COLORS)])
        xs = {g["curve"]["x"] for g in groups if g.get("curve")}
        ax.set_xlabel("fraction of step budget" if "fraction of budget" in xs else "env steps")
        ax.set_ylabel("IQM normalized score")
        ax.set_title("sample efficiency, 95% band")
        ax.grid(alpha=0.3)
    handles, labels = axes[2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(groups), 5))
    if title:
        fig.suptitle(title)
    return _save(fig, path)


@_paper
def sensitivity_figure(panels: dict, base: dict, path: str | Path, title: str) -> Path:
    """One panel per hyperparameter (or switch): IQM [95% CI] of the final score at each value
    tried, in order, the default in black over a grey band of its CI; fragile values in red.
    Four panels to a row, the full text width of a two-column paper.

    `panels`: {key: [{"value", "summary", "flag", "default": bool}]}; `base`: the default's
    summary.
    """
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    width = min(DOUBLE_COLUMN, 1.8 * cols + 0.5)
    fig, axes = _figure(width, 1.9 * rows + 0.3, nrows=rows, ncols=cols, squeeze=False)
    colors = {"fragile": "#d62728", "helps": "#d62728", "better": "#2ca02c", "hurts": "#2ca02c"}
    flat = axes.reshape(-1)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (key, points) in zip(flat, panels.items(), strict=False):
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
            ax.errorbar(j, s["iqm"], yerr=err, fmt="o", color=color, capsize=3)
        labels = [_short(p["value"]) + ("\n(default)" if p["default"] else "") for p in points]
        ax.set_xticks(range(len(points)), labels)
        ax.set_xlim(-0.5, len(points) - 0.5)
        ax.set_title(key)
        ax.grid(axis="y", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("final eval return: IQM, 95% CI")
    fig.suptitle(title + "\n(red: worse than the default with confidence)")
    return _save(fig, path)


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


@_paper
def run_figure(run_dir: str | Path, path: str | Path, metric: str = "return") -> Path:
    """One run, one column wide: every seed's curve, and their IQM with a 95% band."""
    from backflip.curves import aggregate_curves, run_seed_curves
    from backflip.runs.archive import read_record

    record = read_record(Path(run_dir))
    per_seed = run_seed_curves(run_dir, record["config"]["seeds"], metric)
    fig, ax = _figure(SINGLE_COLUMN, 2.4)
    for seed, (steps, values, _end) in per_seed.items():
        marker = "o" if steps.size < 40 else None
        ax.plot(steps, values, lw=0.6, alpha=0.5, label=f"seed {seed}", marker=marker, ms=2)
    if per_seed:
        agg = aggregate_curves(list(per_seed.values()))
        _band(ax, agg, "IQM" if agg["no_interval"] else "IQM (95% band)", "black")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(metric)
    ax.set_title(f"{record['id']}: {record['algo']} on {record['env']}")
    ax.grid(alpha=0.3)
    ax.legend(ncols=2)
    return _save(fig, path)
