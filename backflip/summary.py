"""Plain-text summaries of runs for the terminal (`train`, `show`, `runs`)."""

from __future__ import annotations

import math
import shlex

from backflip.config import TrainConfig, format_value, run_kind
from backflip.runconfig import resolve_on_env
from backflip.runs.archive import waiting_seeds


def fmt(x, digits: int = 1) -> str:
    """A number with thousands separators; '-' for a missing or non-finite one (never 'nan')."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    try:
        return f"{x:,.{digits}f}"
    except (TypeError, ValueError):
        return str(x)


def duration(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def result_line(results: dict) -> str:
    """'IQM 500.0 [95% CI 487.2, 500.0], mean 498.1, min 471.0, max 500.0 (3 seeds)'; with one
    seed 'IQM 500.0 [no interval: 1 seed], ...'."""
    from backflip.stats import MIN_TRUSTWORTHY_SEEDS, interval  # NumPy: not for `runs`

    if not results or not results.get("n"):
        return "no seed finished an evaluation"
    n = results["n"]
    ci = interval(results.get("ci_low"), results.get("ci_high"), n, prefix="95% CI ")
    line = (
        f"IQM {fmt(results['iqm'])} {ci}, mean {fmt(results['mean'])}, "
        f"min {fmt(results['min'])}, max {fmt(results['max'])} ({n} seed{'s' * (n != 1)})"
    )
    if 1 < n < MIN_TRUSTWORTHY_SEEDS:
        line += f" — fewer than {MIN_TRUSTWORTHY_SEEDS} seeds: the interval is not trustworthy"
    return line


def reproduce_command(record: dict) -> str:
    """The command line that recreates the run's resolved configuration: `backflip train`, or
    for a preference run `backflip prefs train|gather|pretrain` with its flags; each setting
    that differs from what that command resolves by itself as `--set key=value` (parsing the
    line back gives the same config: tests/test_prefs_config.py). On an env without a preference
    preset the settings derived from the env are given explicitly, whatever their value: the
    command derives them again, and a value given back to its default would otherwise be lost."""
    cfg = record["config"]
    try:
        kind = run_kind(cfg)
        parts, flags = _command_head(cfg, kind)
        seeds = cfg["seeds"]
        contiguous = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
        if contiguous:
            parts += ["--seeds", str(len(seeds))] + (
                ["--seed-start", str(seeds[0])] if seeds[0] else []
            )
        else:
            parts += ["--seed-list", ",".join(map(str, seeds))]
        parts += ["--steps", str(cfg["steps"])]
        base = resolve_on_env(cfg["algo"], cfg["env_id"], seeds, cfg["steps"], {}, flags, kind)
        base = base.flat()
        current = TrainConfig.from_dict(cfg).flat()
        always = set()
        if kind == "prefs":
            from backflip.prefs.derive import DERIVED_KEYS
            from backflip.prefs.presets import PRESETS

            always = set() if cfg["env_id"] in PRESETS else set(DERIVED_KEYS)
        for key, value in current.items():
            if key in flags:
                continue
            if base.get(key) != value or key in always:
                parts += ["--set", f"{key}={format_value(value)}"]
    except Exception:  # noqa: BLE001 — an algorithm removed since; show the original argv
        return shlex.join(record.get("argv", []))
    if record.get("message"):
        parts += ["-m", record["message"]]
    return shlex.join(parts)


def _command_head(cfg: dict, kind: str) -> tuple[list[str], dict]:
    """The command and its flags for a run of `kind`, and the settings those flags set (which
    the resolver sees as `--set` values, so the rest is compared against them)."""
    algo, env = cfg["algo"], cfg["env_id"]
    if kind != "prefs":
        return ["backflip", "train", algo, "--env", env], {}
    prefs = cfg["prefs"]
    stage = prefs.get("stage", "full")
    flags: dict = {"prefs.preset": prefs.get("preset", "cpu")}
    if stage == "pretrain":
        head = ["backflip", "prefs", "pretrain", "--env", env]
    elif stage == "gather":
        head = ["backflip", "prefs", "gather", "--env", env]
    else:
        head = ["backflip", "prefs", "train", algo, "--env", env]
    flags["prefs.stage"] = stage
    head += ["--preset", flags["prefs.preset"]]
    if prefs.get("import_from"):
        head += ["--prefs", prefs["import_from"]]
        flags["prefs.import_from"] = prefs["import_from"]
    if stage == "policy":
        head += ["--reward-model", prefs["reward_model"]]
        flags["prefs.reward_model"] = prefs["reward_model"]
    head += ["--labels", str(prefs.get("labels", 0)), "--labeler", prefs.get("labeler", "")]
    flags["prefs.labels"], flags["prefs.labeler"] = prefs.get("labels", 0), prefs.get("labeler")
    return head, flags


def status_text(st: dict) -> str:
    """A seed's status in a few words: 'running', 'waiting for 3 labels', 'finished', or the
    long phase a running seed is in: 'pretraining the reward model 120/2,000 updates, ETA 3.0
    min' (a preference run's `Pipeline.progress`)."""
    if st.get("status") == "waiting" and st.get("labels_needed") is not None:
        n = st["labels_needed"]
        return f"waiting for {n} label{'s' * (n != 1)}"
    if st.get("status") == "running" and st.get("phase"):
        text = f"{st['phase']} {st.get('done', 0):,}/{st.get('total', 0):,} {st.get('unit', '')}"
        if st.get("done", 0) < st.get("total", 0):
            eta = st.get("eta_s")
            text += f", ETA {duration(eta)}" if eta is not None else ", ETA unknown yet"
        return text.rstrip()
    return str(st.get("status", "?"))


def run_state(record: dict) -> str:
    """A run's status for listings: 'running', or 'waiting: seed 0 needs 3 labels' while a
    preference run's seeds wait for their person, or 'running (its launcher died; ...)' while
    the seeds of a dead launcher train on, else the recorded status."""
    if record.get("orphans"):
        seeds = ", ".join(str(s) for s in record["orphans"])
        return f"running (its launcher died; seed{'s' * (len(record['orphans']) > 1)} {seeds} train on)"
    waiting = waiting_seeds(record)
    if not waiting:
        return str(record.get("status"))
    return "waiting: " + "; ".join(
        f"seed {s['seed']} {status_text(s).replace('waiting for', 'needs')}" for s in waiting
    )


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns aligned with two spaces between them, the last one unpadded (a message, an error
    of any length). Plain text: 200 rows take microseconds (a rich Table took ~1 s)."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in table
    )


def seed_table_rows(seeds: list[dict]) -> list[list[str]]:
    return [
        [
            str(s.get("seed")),
            status_text(s),
            fmt(s.get("final_eval_return")),
            f"{s.get('steps', 0) or 0:,}",
            fmt(s.get("sps"), 0),
            duration(s.get("wall_s")),
            (s.get("error") or "")[:80],
        ]
        for s in seeds
    ]


def run_summary(record: dict) -> str:
    """The closing summary of `backflip train` and the head of `backflip show`."""
    cfg = record.get("config", {})
    lines = [
        f"run {record['id']} {run_state(record)} in {duration(record.get('duration_s'))} — "
        f"{record.get('algo')} on {record.get('env')}, {len(cfg.get('seeds', []))} seed(s) × "
        f"{cfg.get('steps', 0):,} steps",
    ]
    if record.get("message"):
        lines.append(f"question: {record['message']}")
    res = record.get("results") or {}
    episodes = cfg.get("run", {}).get("eval_episodes", "?")
    lines.append(f"final greedy eval return ({episodes} episodes per seed): {result_line(res)}")
    per_seed = res.get("per_seed") or {}
    if per_seed:
        lines.append("  per seed: " + ", ".join(f"{k}: {fmt(v)}" for k, v in per_seed.items()))
    for s in record.get("seeds", []):
        if s.get("status") in ("failed", "interrupted", "missing", "unknown") and s.get("error"):
            lines.append(f"  seed {s['seed']} {s['status']}: {s['error']}")
        if (ended := s.get("labels_ended_early")) is not None:
            lines.append(
                f"  seed {s['seed']}: labeling ended early by {ended.get('by') or 'someone'} at "
                f"step {ended.get('step', 0):,}, with {ended.get('labels', 0):,} labels"
            )
    sps = [s.get("sps") for s in record.get("seeds", []) if s.get("sps")]
    if sps:
        lines.append(f"steps/s per seed: {', '.join(fmt(x, 0) for x in sps)}")
    if record.get("findings") is not None:
        from backflip.doctor.report import summary_lines  # the doctor's rules load scipy

        lines += summary_lines(record["findings"], record["id"])
    return "\n".join(lines)
