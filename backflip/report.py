"""`backflip report`: a static HTML report of one or more runs that opens without a server.

    <out>/index.html            the runs side by side: final scores, curves with intervals, verdicts
    <out>/runs/<id>.html        each run's page, as in `backflip ui` (curves embedded as JSON)
    <out>/files/<id>/...        its videos, copied
    <out>/assets/               the style sheet, the page script and uPlot
    <out>/figures/              with `figures=png|svg|pdf`: the same curves and comparison as
                                figures for a paper (`backflip.plots`)

The pages are the UI's own templates rendered with links between files (`ReportLinks`), so a
report and the live UI never drift apart. Checkpoints and other large files stay in the archive
and are linked by their path on disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from backflip.errors import UserError
from backflip.runs.archive import keep_out_of_git
from backflip.ui import data
from backflip.ui.render import STATIC, ReportLinks, render


def write_report(
    run_dirs: list[Path],
    out: Path,
    videos: bool = True,
    home: Path | None = None,
    figures: str | None = None,
) -> Path:
    """Write the report for `run_dirs` into `out`; returns the path of its index.html.

    `home` is the archive they belong to (default: the first run's parent), where the comparison
    counts each side's tuning budget. `figures` (png, svg or pdf) also writes each run's curves
    and the comparison as figure files in `<out>/figures/`."""
    if not run_dirs:
        raise UserError("report: name at least one run")
    try:
        new = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        if new:  # a folder it made: kept out of git (a folder of the user's own is theirs)
            keep_out_of_git(out)
    except OSError as e:
        raise UserError(f"cannot create {out}: {e.strerror or e}") from None
    assets = out / "assets"
    if assets.exists():
        shutil.rmtree(assets)
    shutil.copytree(STATIC, assets)

    by_id = {d.name: d for d in run_dirs}
    details, copied = {}, set()
    for run_id, d in by_id.items():
        detail = data.run_detail(d)
        if not videos:
            detail["videos"] = []
        for v in detail["videos"]:
            target = out / "files" / run_id / v["rel"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(d / v["rel"], target)
            copied.add((run_id, v["rel"]))
        details[run_id] = detail

    (out / "runs").mkdir(exist_ok=True)
    for run_id, d in by_id.items():
        boot = {"run": run_id, "status": details[run_id]["record"]["status"]}
        boot["curves"] = data.run_curves(d)
        html = render(
            "run.html",
            ReportLinks(by_id, copied, depth=1),
            nav="runs",
            d=details[run_id],
            boot=boot,
        )
        (out / "runs" / f"{run_id}.html").write_text(html)

    c = data.compare(home or run_dirs[0].parent, list(by_id.values()))
    html = render(
        "compare.html",
        ReportLinks(by_id, copied, depth=0),
        nav="compare",
        c=c,
        ids=list(by_id),
        error=None,
        candidates=[],
        boot={"compare": c},
        heading=f"Report: {len(by_id)} run{'s' * (len(by_id) != 1)}",
    )
    index = out / "index.html"
    index.write_text(html)
    if figures:
        write_figures(c, by_id, out / "figures", figures)
    return index


def write_figures(c: dict, by_id: dict, folder: Path, fmt: str) -> list[Path]:
    """The report's curves as paper figures: one per run (`plots.run_figure`) and the comparison
    (`plots.comparison_figure`, from the same report the page shows)."""
    from backflip.plots import comparison_figure, figure_path, run_figure

    folder.mkdir(exist_ok=True)
    paths = [run_figure(d, figure_path(folder / run_id, fmt)) for run_id, d in by_id.items()]
    if c["sides"]:
        paths.append(comparison_figure(c["sides"], figure_path(folder / "compare", fmt)))
    return paths
