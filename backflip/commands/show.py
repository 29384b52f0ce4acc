"""backflip show ID [--json]"""

from __future__ import annotations

from backflip.commands import add_format, add_home, print_json
from backflip.runs.layout import CODE_PATCH, FINDINGS

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser("show", help="everything about one run, and how to reproduce it")
    p.add_argument("run", metavar="ID", help="run id, unique prefix, `last`, or a run directory")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="write a figure of every seed's learning curve and their IQM with a 95%% band "
        "(PNG, SVG or PDF: the file's suffix or --format)",
    )
    add_format(p)
    p.add_argument(
        "--metric", default="return", help="curve for --plot: return or a metrics.csv name"
    )
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.algos import budget_line
    from backflip.runs.archive import home_dir, load_run
    from backflip.runs.index import resolve_run
    from backflip.summary import reproduce_command, run_summary, seed_table_rows, text_table

    run_dir = resolve_run(home_dir(args.home), args.run)
    record = load_run(run_dir)
    record["reproduce"] = reproduce_command(record)
    if (run_dir / FINDINGS).exists():  # written by the doctor after training
        import json

        try:
            record["findings"] = json.loads((run_dir / FINDINGS).read_text())["findings"]
        except (json.JSONDecodeError, KeyError, OSError):
            pass  # a damaged findings file: `backflip doctor ID` recomputes it
    if args.plot:
        from backflip.plots import figure_path, run_figure

        path = figure_path(args.plot, args.format)
        record["plot"] = str(run_figure(run_dir, path, args.metric))
    if args.json:
        print_json(record)
        return 0
    print(run_summary(record))
    print(f"directory: {run_dir}")
    print(f"started {record.get('created')}, ended {record.get('ended', '-')}")
    if record.get("rerun_of"):
        print(f"rerun of: {record['rerun_of']}")
    stated = budget_line(record.get("budget") or {})
    if stated:  # the steps each seed took are in the table below
        print(stated)
    header = ["seed", "status", "final eval", "steps", "steps/s", "wall", "error"]
    print(text_table(header, seed_table_rows(record["seeds"])))
    print("\nconfig:")
    cfg = record["config"]
    for section in ("hp", "run", "env", "doctor", "prefs"):
        if section == "prefs" and not cfg.get(section):  # a preference run's settings
            continue
        values = cfg.get(section, {})
        print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    prov = record.get("provenance", {})
    git = prov.get("git")
    print("\nprovenance:")
    if git:
        print(
            f"  git: {git.get('root')} @ {git.get('commit')} ({git.get('branch')})"
            + (" with uncommitted changes (code.patch)" if git.get("dirty") else ", clean")
        )
    own = prov.get("backflip_git")
    if own:
        print(
            f"  backflip git: {own.get('root')} @ {own.get('commit')} ({own.get('branch')})"
            + (" with uncommitted changes (backflip.patch)" if own.get("dirty") else ", clean")
        )
    bf = prov.get("backflip", {})
    print(f"  backflip {bf.get('version')} source sha256 {str(bf.get('source_sha256'))[:16]}")
    host = prov.get("host", {})
    print(
        f"  host {host.get('hostname')}: {host.get('cpu')}, {host.get('cpu_count')} CPUs, "
        f"{host.get('os')}"
    )
    print(
        f"  python {prov.get('python', {}).get('version')}, "
        + ", ".join(f"{k} {v}" for k, v in prov.get("packages", {}).items())
    )
    print(f"\ncommand: {' '.join(record.get('argv', []))}")
    print(f"reproduce: {record['reproduce']}")
    if git and git.get("commit"):
        patch = " && git apply " + str(run_dir / CODE_PATCH) if git.get("dirty") else ""
        print(f"  code: git -C {git['root']} checkout {git['commit']}{patch}")
    print(f"  or: backflip rerun {record['id']}")
    if record.get("plot"):
        print(f"plot: {record['plot']}")
    return 0
