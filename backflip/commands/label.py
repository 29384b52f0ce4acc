"""backflip label RUN_ID: the human labeling page for a preference run (docs/preferences.md)."""

from __future__ import annotations

from backflip.commands import add_home


def register(sub) -> None:
    p = sub.add_parser(
        "label",
        help="label pairs of clips for a preference run in the browser",
        description="Serve the labeling page for RUN_ID's preference database. Works while the "
        "run trains (start it with --labeler human) and after. Loopback only by default.",
    )
    p.add_argument("run", metavar="RUN_ID", help="run id, unique prefix, `last`, or a path")
    p.add_argument("--seed", type=int, help="which seed's queries (default: the run's first)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks one)")
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.errors import UserError
    from backflip.prefs.web import serve
    from backflip.runs.archive import home_dir, load_run, resolve_run, seed_dir

    run_dir = resolve_run(home_dir(args.home), args.run)
    record = load_run(run_dir)
    if "prefs" not in record.get("config", {}):
        raise UserError(f"run {record['id']} is not a preference run (backflip prefs train ...)")
    seeds = record["config"]["seeds"]
    seed = seeds[0] if args.seed is None else args.seed
    if seed not in seeds:
        raise UserError(f"run {record['id']} has seeds {seeds}, not {seed}")
    folder = seed_dir(run_dir, seed)
    if not (folder / "prefs.sqlite").exists():
        raise UserError(f"no preference database yet in {folder} (has the seed started?)")
    try:
        server = serve(folder, args.host, args.port)
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who can reach it can label (no login)")
    print(f"labeling run {record['id']} seed {seed}: http://{args.host}:{server.server_port}/")
    print("keys: ← left, → right, ↑ equal, ↓ can't tell, U undo — Ctrl-C to stop", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
