"""Findings as text: the block at the end of `backflip train`/`show`, and `backflip doctor`."""

from __future__ import annotations

import textwrap

from backflip.doctor.findings import SEVERITIES

WIDTH = 100


def counts(findings: list[dict]) -> str:
    """'1 error, 2 warnings, 3 info' (severities present only)."""
    parts = []
    for sev in reversed(SEVERITIES):
        n = sum(f["severity"] == sev for f in findings)
        if n:
            parts.append(f"{n} {sev}" + ("s" if n != 1 and sev != "info" else ""))
    return ", ".join(parts)


def grouped(findings: list[dict]) -> list[tuple[dict, list[str]]]:
    """Findings of the same rule and severity across seeds: (the first, every series label)."""
    groups: dict[tuple, tuple[dict, list[str]]] = {}
    for f in findings:
        key = (f["rule"], f["severity"])
        label = f.get("evidence", {}).get("series")
        if key not in groups:
            groups[key] = (f, [])
        if label:
            groups[key][1].append(label)
    order = sorted(groups.values(), key=lambda g: -SEVERITIES.index(g[0]["severity"]))
    return order


def summary_lines(findings: list[dict], run_id: str, max_groups: int = 8) -> list[str]:
    """The doctor's block in the closing summary of `backflip train` (one line per rule)."""
    if not findings:
        return ["doctor: no findings"]
    lines = [f"doctor: {counts(findings)} — details: backflip doctor {run_id}"]
    groups = grouped(findings)
    for f, labels in groups[:max_groups]:
        seen = f.get("evidence", {}).get("seen") or f["message"]
        where = f" [{_labels(labels)}]" if labels else ""
        text = textwrap.shorten(f"{f['rule']}{where}: {seen}", WIDTH + 30, placeholder=" ...")
        lines.append(f"  {f['severity']:<7} {text}")
    if len(groups) > max_groups:
        lines.append(f"  ... and {len(groups) - max_groups} more")
    return lines


def _labels(labels: list[str]) -> str:
    seeds = [lab.removeprefix("seed ") for lab in labels if lab.startswith("seed ")]
    if len(seeds) == len(labels):
        return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(seeds)
    return ", ".join(labels[:4]) + (f" +{len(labels) - 4}" if len(labels) > 4 else "")


def full_report(target, findings: list[dict], rules_checked: int) -> str:
    """`backflip doctor TARGET`: every finding with its full message, worst first."""
    lines = [f"doctor: {target.target} — {target.describe()}"]
    lines += [f"note: {n}" for n in target.notes]
    lines.append(
        f"{rules_checked} rules per series, {len(target.runs)} series: "
        + (counts(findings) or "no findings")
    )
    for f, labels in grouped(findings):
        lines.append("")
        head = f"{f['severity'].upper()} {f['rule']}"
        if labels:
            head += f" — {_labels(labels)}"
        lines.append(head)
        same = [g for g in findings if g["rule"] == f["rule"] and g["severity"] == f["severity"]]
        lines += textwrap.wrap(
            same[0]["message"], WIDTH, initial_indent="  ", subsequent_indent="    "
        )
        for g in same[1:]:
            seen = g.get("evidence", {}).get("seen", g["message"])
            label = g.get("evidence", {}).get("series")
            lines += textwrap.wrap(
                f"{label + ': ' if label else ''}{seen}",
                WIDTH,
                initial_indent="  ",
                subsequent_indent="    ",
            )
    return "\n".join(lines)


def catalog_markdown() -> str:
    """The rule list of docs/doctor.md, generated from the rules themselves (a test keeps the
    document in sync: `python -m backflip.doctor.report --write docs/doctor.md` updates it)."""
    from backflip.doctor import RULES, SEED_RULES

    out = []
    for r in [*RULES, *SEED_RULES]:
        live = ", checked live" if r.live else ""
        out += [
            f"#### `{r.id}` (catalog entry {r.entry}{live})",
            "",
            f"- reads: {', '.join(f'`{x}`' for x in r.reads)}",
            f"- fires when: {r.threshold}",
            f"- usually: {r.cause}",
            f"- check: {r.check_next}",
            f"- source: {r.source}",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def write_catalog(path) -> None:
    """Replace the rule list between the markers of docs/doctor.md."""
    from pathlib import Path

    path = Path(path)
    text = path.read_text()
    start, end = "<!-- rules:start -->\n", "<!-- rules:end -->"
    a, b = text.index(start) + len(start), text.index(end)
    path.write_text(text[:a] + catalog_markdown() + text[b:])


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        write_catalog(sys.argv[2])
    else:
        print(catalog_markdown(), end="")
