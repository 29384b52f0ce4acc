"""backflip resume ID: continue an interrupted or failed run from its last checkpoints."""

from __future__ import annotations

import sys

from backflip.commands import (
    add_backend,
    add_home,
    add_workers,
    backend_address,
    backend_of,
    print_json,
)

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "resume",
        help="continue an interrupted or failed run from its last checkpoints",
        description="Continue each unfinished seed of a run from its last checkpoint "
        "(networks, optimizer, normalizer statistics, replay buffer, RNG states, step "
        "counters), appending to the same metrics. Finished seeds are left alone.",
    )
    p.add_argument("run", metavar="ID", help="run id, unique prefix, `last`, or a run directory")
    add_workers(p)
    add_backend(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.experiments.resume import resume_run
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run
    from backflip.summary import run_summary

    home = home_dir(args.home)
    run_dir = resolve_run(home, args.run)

    def announce(record, plan, notes):
        if args.json:  # stdout is the record's; what will differ is said before the seeds start
            for note in notes:
                print(f"not exact: {note}", file=sys.stderr, flush=True)
            return
        parts = [
            f"seed {s} from step {step:,}" if step is not None else f"seed {s} from scratch"
            for s, step in plan.items()
        ]
        print(f"resuming run {record['id']}: {', '.join(parts)}", flush=True)
        for note in notes:
            print(f"not exact: {note}", flush=True)

    record = resume_run(
        home,
        run_dir,
        args.workers,
        not args.no_progress and not args.json,
        backend=backend_of(args),
        address=backend_address(args),
        on_plan=announce,
    )
    if args.json:
        print_json(record)
    else:
        print(run_summary(record))
    return {"finished": 0, "interrupted": 130}.get(record["status"], 1)
