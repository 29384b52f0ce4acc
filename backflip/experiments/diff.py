"""`backflip diff A B`: everything that differs between two runs, and where their metrics part.

Rahtz spent days establishing that a failing run used exactly the same code as a working one.
This answers it from the archive: the resolved configs key by key, the code (the commits of the
launching repo and of backflip, the `git diff` between them when the repository is still there,
and each run's uncommitted patch), installed package versions, host and thread settings, seeds,
and, per metric, the first step at which B leaves A's seed band (the range of A's seeds there;
with one seed per side: the first step where the values differ at all).
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import numpy as np

from backflip.curves import RETURN, make_grid, on_grid, run_seed_curves
from backflip.runs.archive import load_run
from backflip.runs.index import resolve_run
from backflip.runs.layout import BACKFLIP_PATCH, CODE_PATCH, METRICS, PACKAGES, seed_dir

NOISY_GROUPS = ("time/", "sys/")  # wall-clock measurements: they always differ
MAX_DIFF_LINES = 400


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def dict_changes(a: dict, b: dict) -> list[dict]:
    """[{key, a, b}] for keys whose values differ (missing on one side: None)."""
    keys = sorted(set(a) | set(b))
    return [{"key": k, "a": a.get(k), "b": b.get(k)} for k in keys if a.get(k) != b.get(k)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def packages(run_dir: Path) -> dict[str, str]:
    text = _read(run_dir / PACKAGES) or ""
    out = {}
    for line in text.splitlines():
        name, sep, version = line.partition("==")
        if sep:
            out[name] = version
    return out


def _git_diff(root: str, a: str, b: str) -> tuple[str | None, str | None]:
    """(stat, full diff) between two commits of a repo on this machine, or (None, why not)."""
    try:
        stat = subprocess.run(
            ["git", "-C", root, "diff", "--stat", a, b],
            capture_output=True,
            text=True,
            timeout=30,
        )
        full = subprocess.run(
            ["git", "-C", root, "diff", a, b], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"git failed: {e}"
    if stat.returncode != 0:
        why = (stat.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"cannot diff in {root}: {why}"
    return stat.stdout, full.stdout


def code_changes(ra: dict, rb: dict, da: Path, db: Path) -> list[dict]:
    """Per repository (the launching repo, backflip itself): commits, git diff, patches."""
    out = []
    pa, pb = ra.get("provenance", {}), rb.get("provenance", {})
    for key, patch_name, what in (
        ("git", CODE_PATCH, "launching repository"),
        ("backflip_git", BACKFLIP_PATCH, "backflip"),
    ):
        ga, gb = pa.get(key) or {}, pb.get(key) or {}
        if not ga and not gb:
            continue
        entry = {
            "repo": what,
            "root": [ga.get("root"), gb.get("root")],
            "commit": [ga.get("commit"), gb.get("commit")],
            "dirty": [ga.get("dirty"), gb.get("dirty")],
            "same_commit": ga.get("commit") == gb.get("commit"),
        }
        if not entry["same_commit"] and ga.get("commit") and gb.get("commit"):
            root = gb.get("root") or ga.get("root")
            stat, full = _git_diff(root, ga["commit"], gb["commit"])
            if stat is None:  # the repository is gone or lacks a commit: say why
                entry["commit_diff_error"] = full
            else:
                entry["commit_diff_stat"], entry["commit_diff"] = stat, full
        patch_a, patch_b = _read(da / patch_name) or "", _read(db / patch_name) or ""
        entry["same_patch"] = patch_a == patch_b
        if patch_a != patch_b:
            entry["patch_diff"] = "".join(
                difflib.unified_diff(
                    patch_a.splitlines(True),
                    patch_b.splitlines(True),
                    f"A/{patch_name}",
                    f"B/{patch_name}",
                )
            )
        out.append(entry)
    sa = pa.get("backflip", {}).get("source_sha256")
    sb = pb.get("backflip", {}).get("source_sha256")
    out.append({"repo": "backflip source hash", "same": sa == sb, "sha256": [sa, sb]})
    return out


def _metric_names(run_dir: Path, seeds) -> set[str]:
    names: set[str] = set()
    for s in seeds:
        path = seed_dir(run_dir, s) / METRICS
        if not path.exists():
            continue
        with open(path) as f:
            next(f, None)
            for line in f:
                parts = line.rsplit(",", 2)
                if len(parts) == 3:
                    names.add(parts[1])
    return names


def divergence(run_a: Path, seeds_a, run_b: Path, seeds_b, metric: str) -> dict | None:
    """The first step where B's median over seeds leaves [min, max] of A's seeds."""
    ca = run_seed_curves(run_a, seeds_a, metric)
    cb = run_seed_curves(run_b, seeds_b, metric)
    if not ca or not cb:
        return None
    # A's own logging steps (both runs log at the same steps when budgets match)
    grid = np.unique(np.concatenate([c[0] for c in ca.values()]))
    end = min(max(c[2] for c in ca.values()), max(c[2] for c in cb.values()))
    grid = grid[grid <= end]
    if grid.size == 0:
        grid = make_grid(list(ca.values()) + list(cb.values()))
    va, vb = on_grid(list(ca.values()), grid), on_grid(list(cb.values()), grid)
    ok = np.isfinite(va).all(0) & np.isfinite(vb).any(0)
    if not ok.any():
        return None
    grid, va, vb = grid[ok], va[:, ok], vb[:, ok]
    lo, hi = va.min(0), va.max(0)
    center = np.nanmedian(vb, 0)
    tol = 1e-9 * np.maximum(1.0, np.abs(va).max(0))  # float noise in the CSV round trip
    outside = (center < lo - tol) | (center > hi + tol)
    first = int(np.argmax(outside)) if outside.any() else None
    return {
        "metric": metric,
        "steps_compared": int(grid.size),
        "first_step": int(grid[first]) if first is not None else None,
        "a_band": [float(lo[first]), float(hi[first])] if first is not None else None,
        "b_value": float(center[first]) if first is not None else None,
        "fraction_outside": float(outside.mean()),
    }


def diff_runs(home: Path, ref_a: str, ref_b: str, metrics: list[str] | None = None) -> dict:
    da, db = resolve_run(home, ref_a), resolve_run(home, ref_b)
    ra, rb = load_run(da), load_run(db)
    pa, pb = ra.get("provenance", {}), rb.get("provenance", {})
    cfg_a, cfg_b = dict(ra["config"]), dict(rb["config"])
    seeds_a, seeds_b = cfg_a.pop("seeds"), cfg_b.pop("seeds")
    pk_a, pk_b = packages(da), packages(db)
    host_a = {**flatten(pa.get("host", {})), "python": pa.get("python", {}).get("version")}
    host_b = {**flatten(pb.get("host", {})), "python": pb.get("python", {}).get("version")}
    report = {
        "a": {"id": ra["id"], "dir": str(da), "message": ra.get("message", "")},
        "b": {"id": rb["id"], "dir": str(db), "message": rb.get("message", "")},
        "config": dict_changes(flatten(cfg_a), flatten(cfg_b)),
        "seeds": {"a": seeds_a, "b": seeds_b, "same": seeds_a == seeds_b},
        "code": code_changes(ra, rb, da, db),
        "packages": dict_changes(pk_a, pk_b),
        "packages_recorded": bool(pk_a and pk_b),
        "host": dict_changes(host_a, host_b),
        "backend": dict_changes(flatten(ra.get("backend") or {}), flatten(rb.get("backend") or {})),
    }
    if metrics is None:
        names = _metric_names(da, seeds_a) & _metric_names(db, seeds_b)
        metrics = [RETURN, *sorted(n for n in names if not n.startswith(NOISY_GROUPS))]
    parts = [divergence(da, seeds_a, db, seeds_b, m) for m in metrics]
    report["metrics"] = [p for p in parts if p is not None]
    return report


def _v(x) -> str:
    return "(absent)" if x is None else repr(x) if isinstance(x, str) else str(x)


def format_diff(report: dict, full: bool = False) -> str:
    a, b = report["a"], report["b"]
    lines = [f"A = {a['id']}  {a['message']}", f"B = {b['id']}  {b['message']}", ""]

    def section(title, changes, none_text):
        lines.append(f"{title}:")
        if not changes:
            lines.append(f"  {none_text}")
        for c in changes:
            lines.append(f"  {c['key']}: {_v(c['a'])} -> {_v(c['b'])}")

    section("config", report["config"], "identical")
    s = report["seeds"]
    lines.append(
        "seeds: identical " + str(s["a"]) if s["same"] else f"seeds: A {s['a']}  B {s['b']}"
    )
    lines.append("code:")
    for c in report["code"]:
        if c["repo"] == "backflip source hash":
            lines.append(
                "  backflip source files: identical (sha256)"
                if c["same"]
                else "  backflip source files: differ (sha256 "
                f"{str(c['sha256'][0])[:12]} vs {str(c['sha256'][1])[:12]})"
            )
            continue
        commits = c["commit"]
        head = f"  {c['repo']}: "
        if c["same_commit"]:
            head += f"same commit {str(commits[0])[:12]}"
        else:
            head += f"commit {str(commits[0])[:12]} -> {str(commits[1])[:12]}"
        head += ", same uncommitted patch" if c["same_patch"] else ", uncommitted patches differ"
        lines.append(head)
        if c.get("commit_diff_stat"):
            lines += ["    " + ln for ln in c["commit_diff_stat"].rstrip().splitlines()]
        elif c.get("commit_diff_error"):
            lines.append(f"    (no diff of the commits: {c['commit_diff_error']})")
        for key in ("commit_diff", "patch_diff") if full else ("patch_diff",):
            text = c.get(key)
            if text:
                body = text.splitlines()
                lines += ["    " + ln for ln in body[:MAX_DIFF_LINES]]
                if len(body) > MAX_DIFF_LINES:
                    lines.append(f"    ... {len(body) - MAX_DIFF_LINES} more lines (--json)")
    if report["packages_recorded"]:
        section("packages", report["packages"], "identical")
    else:
        lines.append("packages: not recorded for both runs")
    section("host and threads", report["host"], "identical")
    if report["backend"]:
        section("backend", report["backend"], "identical")
    lines.append("metrics (first step where B's median over seeds leaves A's seed band):")
    if not report["metrics"]:
        lines.append("  no metric in common")
    same = [m["metric"] for m in report["metrics"] if m["first_step"] is None]
    for m in sorted(
        (m for m in report["metrics"] if m["first_step"] is not None),
        key=lambda m: m["first_step"],
    ):
        lo, hi = m["a_band"]
        lines.append(
            f"  {m['metric']}: step {m['first_step']:,} (A [{lo:.6g}, {hi:.6g}], B {m['b_value']:.6g});"
            f" outside on {100 * m['fraction_outside']:.0f}% of {m['steps_compared']} steps"
        )
    if same:
        lines.append(f"  never leaves A's band: {', '.join(same)}")
    return "\n".join(lines)
