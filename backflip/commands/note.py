"""backflip note "text" [--run ID] [--focus | --result]"""

from __future__ import annotations

from backflip.commands import add_home

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "note",
        help="write a note in the lab journal (a thought, the current focus, or a result)",
        description="Append a note to the lab journal (<home>/journal.jsonl). Without a flag it is "
        "a thought or hypothesis; --focus sets what you are working on; --result records a "
        "result. --run attaches it to a run.",
    )
    p.add_argument("text", help="the note")
    p.add_argument("--run", metavar="ID", help="attach the note to this run")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--focus", dest="kind", action="store_const", const="focus")
    kind.add_argument("--result", dest="kind", action="store_const", const="result")
    p.set_defaults(kind="thought")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.journal import add_note
    from backflip.runs.archive import home_dir
    from backflip.runs.index import resolve_run

    home = home_dir(args.home, create=True)
    run_id = resolve_run(home, args.run).name if args.run else None
    note = add_note(home, args.text, args.kind, run_id)
    where = f" on run {run_id}" if run_id else ""
    print(f"noted ({note['kind']}){where} at {note['time']}")
    return 0
