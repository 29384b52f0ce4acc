"""backflip server [--stop]: the warm seed servers local runs fork their seeds from."""

from __future__ import annotations

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "server",
        help="list (or --stop) the warm seed servers that local runs fork their seeds from",
        description="Local runs fork each seed from a warm seed server: a process that has "
        "imported torch, Gymnasium and backflip's training code once, so a seed starts in "
        "milliseconds. The first run starts one; it exits after BACKFLIP_WARM_IDLE seconds "
        "(default 600) without a seed, or when a file it imported changes (the next run "
        "starts a fresh one). BACKFLIP_WARM=0 gives each command a server of its own. This "
        "lists the servers of this user and, with --stop, asks them to exit once their seeds "
        "end.",
    )
    p.add_argument("--stop", action="store_true", help="ask every server to exit")
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.launch import warm

    found = warm.servers()
    if not found:
        print(f"no warm seed server running (sockets in {warm.folder()})")
        return 0
    for server in found:
        seeds = f"{server['seeds']} seed{'s' * (server['seeds'] != 1)} running"
        print(f"pid {server['pid']}  {seeds}  {server['python']}  {server['address']}")
        if args.stop:
            warm.stop(server["address"])
    if args.stop:
        print(f"asked {len(found)} to exit (each once its seeds end)")
    return 0
