"""backflip runs [--env E] [--algo A] [--status S] [--grep TEXT] [--json] [--reindex|--repair]"""

from __future__ import annotations

import contextlib
import sys

from backflip.commands import add_home, print_json
from backflip.errors import UserError
from backflip.runs.layout import RUN_JSON

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "runs", help="list archived runs", description="List archived runs, newest first."
    )
    p.add_argument("--env")
    p.add_argument("--algo")
    p.add_argument("--status", choices=["running", "finished", "failed", "interrupted"])
    p.add_argument("--grep", metavar="TEXT", help="match text in id, message, env, algo or tags")
    p.add_argument("--tag")
    p.add_argument("-n", "--limit", type=int, default=None, help="show at most this many")
    p.add_argument(
        "--reindex",
        action="store_true",
        help="rebuild index.sqlite from the run directories, naming every one it cannot read",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="the same, saying what it repaired: runs whose launcher died are finalized from "
        "their seeds, results recomputed from intact seeds, damaged run.json files restored",
    )
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.runs import index
    from backflip.runs.archive import home_dir, load_run
    from backflip.summary import duration, fmt, run_state, text_table

    home = home_dir(args.home)
    if args.reindex or args.repair:
        n, damaged = index.reindex(home)
        said = sys.stderr if args.json else sys.stdout  # --json: stdout is the JSON alone
        print(f"indexed {n} run{'s' * (n != 1)} from {home}", file=said)
        for run_id, why in damaged:
            print(f"not indexed: {run_id}: {why}", file=said)
    rows = index.query(
        home,
        env=args.env,
        algo=args.algo,
        status=args.status,
        grep=args.grep,
        tag=args.tag,
        limit=args.limit,
    )
    for r in rows:  # a running preference run may wait for its person, or orphans train on
        if r["status"] == "running" and (home / r["id"] / RUN_JSON).exists():
            with contextlib.suppress(UserError):
                r["status"] = run_state(load_run(home / r["id"]))
    damaged = [] if args.reindex or args.repair else index.damaged(home)
    if args.json:
        for r in rows:
            r.pop("record", None)
        print_json(rows)
        return 0
    for run_id, why in damaged:  # never dropped silently
        print(f"damaged: {run_id}: {why}", file=sys.stderr)
    if not rows:
        print(
            f"no runs in {home}"
            + (
                " matching the filters"
                if any((args.env, args.algo, args.status, args.grep, args.tag))
                else ""
            )
        )
        return 0
    header = ["id", "started", "status", "algo", "env", "seeds", "steps", "final return"]
    header += ["duration", "message"]
    table = []
    for r in rows:
        if r["final_mean"] is None:
            final = "-"
        elif r["n_seeds"] == 1:  # one seed: a value, no range (as `show` says: no interval)
            final = f"{fmt(r['final_mean'])} (1 seed)"
        else:  # the mean over seeds [min, max]
            final = f"{fmt(r['final_mean'])} [{fmt(r['final_min'])}, {fmt(r['final_max'])}]"
        table.append(
            [
                r["id"],
                (r["created"] or "")[:16].replace("T", " "),
                r["status"],
                r["algo"],
                r["env"],
                str(r["n_seeds"]),
                f"{r['steps'] or 0:,}",
                final,
                duration(r["duration_s"]),
                " ".join((r["message"] or "").split()),  # one line per run
            ]
        )
    print(text_table(header, table))
    return 0
