"""HTML from the templates in `templates/`, for the live server and the static report alike.

Pages differ between the two only in their links: `ServerLinks` point at the app's routes,
`ReportLinks` at files written next to each other (so a report opens from disk, no server).
Every value is escaped by Jinja's autoescape; data for the page script travels as JSON in a
`<script type="application/json">` block (`|tojson` escapes `<`, `>` and `&`, and writes through
`backflip.jsonout`: a NaN would make the page's `JSON.parse` fail and leave it blank).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from urllib.parse import quote, urlencode

HERE = Path(__file__).parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"


class ServerLinks:
    """Links of the live server (`backflip ui`)."""

    live = True

    def static(self, name: str) -> str:
        return f"/static/{name}"

    def index(self, **params) -> str:
        params = {k: v for k, v in params.items() if v}
        return "/" + (f"?{urlencode(params)}" if params else "")

    def run(self, run_id: str) -> str:
        return f"/runs/{quote(run_id)}"

    def file(self, run_id: str, rel: str) -> str:
        return f"/files/{quote(run_id)}/{quote(rel)}"

    def compare(self, ids: list[str] | None = None, metric: str | None = None) -> str:
        params = {"ids": ",".join(ids or [])}
        if metric:
            params["metric"] = metric
        return "/compare?" + urlencode(params) if ids else "/compare"

    def journal(self) -> str:
        return "/journal"

    def label(self) -> str:
        return "/label/"

    def api(self, path: str) -> str:
        return f"/api/{path}"


class ReportLinks(ServerLinks):
    """Links between the files of a static report (`backflip report`): relative, no server."""

    live = False

    def __init__(self, run_dirs: dict[str, Path], copied: set[tuple[str, str]], depth: int = 0):
        self.run_dirs, self.copied, self.up = run_dirs, copied, "../" * depth

    def static(self, name: str) -> str:
        return f"{self.up}assets/{name}"

    def index(self, **params) -> str:
        return f"{self.up}index.html"

    def run(self, run_id: str) -> str:
        return f"{self.up}runs/{quote(run_id)}.html" if run_id in self.run_dirs else "#"

    def file(self, run_id: str, rel: str) -> str:
        """Copied into the report (videos): a relative link; else the archive's file on disk."""
        if (run_id, rel) in self.copied:
            return f"{self.up}files/{quote(run_id)}/{quote(rel)}"
        if run_id in self.run_dirs:
            return (self.run_dirs[run_id] / rel).resolve().as_uri()
        return "#"

    def compare(self, ids=None, metric=None) -> str:
        return f"{self.up}index.html#compare"

    def journal(self) -> str:
        return "#"

    def label(self) -> str:
        return "#"

    def api(self, path: str) -> str:
        return ""


# --- filters ----------------------------------------------------------------------------------------


def fmt(x, digits: int = 1) -> str:
    from backflip.summary import fmt as _fmt

    return _fmt(x, digits)


def ci(summary: dict) -> str:
    """A summary's IQM interval: "[349.2, 500.0]" or "[no interval: 1 seed]" (`stats.interval`)."""
    from backflip.experiments.compare import interval_of

    return interval_of(summary or {})


def duration(seconds) -> str:
    from backflip.summary import duration as _duration

    return _duration(seconds)


def when(text: str | None) -> str:
    """'2026-11-22T07:56:48+00:00' -> '2026-11-22 07:56'."""
    return (text or "")[:16].replace("T", " ")


def ago(text: str | None) -> str:
    try:
        t = datetime.fromisoformat(text or "")
    except ValueError:
        return ""
    s = (datetime.now(UTC) - (t if t.tzinfo else t.replace(tzinfo=UTC))).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return "just now"


def size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def slug(name: str) -> str:
    """A metric name as an HTML id: 'train/approx_kl' -> 'm-train-approx_kl'."""
    return "m-" + "".join(c if c.isalnum() or c in "_-" else "-" for c in str(name))


def index_rows(rows: list[dict], links) -> str:
    """The `<tr>`s of the runs index, built directly: one template pass per row would cost
    ~0.5 ms each, too slow for 1,000 rows (benchmarks/ui_index.py). Every value is escaped."""
    from markupsafe import Markup

    from backflip.stats import interval

    out = []
    pick = links.live
    for r in rows:
        rid = escape(r["id"])
        status = escape(str(r["status"]))
        steps = r["steps"] or 0
        if r["status"] == "running":
            steps_cell = '<span class="live-steps">…</span>'
        else:
            steps_cell = f"{steps:,}"
        if r["final_iqm"] is not None:
            ci = escape(interval(r["ci_low"], r["ci_high"], r["n_seeds"]))
            result = f'{fmt(r["final_iqm"])} <span class="muted">{ci}</span>'

            result_v = r["final_iqm"]
        elif r["final_mean"] is not None:
            result, result_v = fmt(r["final_mean"]), r["final_mean"]
        else:
            result, result_v = '<span class="muted">–</span>', ""
        tags = "".join(
            f'<a class="tag" href="{escape(links.index(tag=t))}">{escape(t)}</a>'
            for t in (r["tags"] or "").split(",")
            if t
        )
        out.append(
            f'<tr data-id="{rid}" data-status="{status}">'
            + (
                f'<td><input type="checkbox" class="pick" value="{rid}" aria-label="select {rid}"></td>'
                if pick
                else ""
            )
            + f'<td><a href="{escape(links.run(r["id"]))}">{rid}</a></td>'
            f'<td data-v="{escape(str(r["created"]))}">{escape(when(r["created"]))}</td>'
            f'<td><span class="badge {status}">{status}</span></td>'
            f"<td>{escape(str(r['algo']))}</td><td>{escape(str(r['env']))}</td>"
            f'<td class="num">{r["n_seeds"]}</td>'
            f'<td data-v="{steps}" class="num progress-cell">{steps_cell}</td>'
            f'<td data-v="{result_v}" class="num result">{result}</td>'
            f'<td data-v="{r["duration_s"] or 0}" class="num duration">{duration(r["duration_s"])}</td>'
            f'<td class="question">{escape(r["message"] or "")}</td>'
            f"<td>{tags}</td></tr>"
        )
    return Markup("\n".join(out))


@functools.cache
def environment():
    from backflip import jsonout

    try:
        import jinja2
    except ImportError:
        from backflip.errors import UserError

        raise UserError("the UI needs Flask and Jinja2: pip install 'backflip[ui]'") from None
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.ChainableUndefined,  # optional keys of old records render empty
    )
    env.filters.update(fmt=fmt, ci=ci, duration=duration, when=when, ago=ago, size=size, slug=slug)
    env.policies["json.dumps_function"] = jsonout.dumps  # `|tojson`: null, never NaN
    return env


def render(template: str, links, **context) -> str:
    from backflip import __version__

    return (
        environment()
        .get_template(template)
        .render(links=links, version=__version__, live=links.live, **context)
    )
