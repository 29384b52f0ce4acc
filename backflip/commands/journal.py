"""backflip journal [--since DATE] [--md] [--cpu-price P] [--gpu-price P]"""

from __future__ import annotations

from backflip.commands import add_home, print_json

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "journal",
        help="the lab journal: focus, hypotheses, ongoing runs and their questions, results, compute",
    )
    p.add_argument("--since", metavar="DATE", help="2026-11-20, 2026-11-20T08:00, 7d, 12h, today")
    p.add_argument("--md", action="store_true", help="print Markdown (to paste or keep in a file)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--cpu-price", type=float, metavar="USD", help="price per CPU hour ($BACKFLIP_CPU_PRICE)"
    )
    p.add_argument(
        "--gpu-price", type=float, metavar="USD", help="price per GPU hour ($BACKFLIP_GPU_PRICE)"
    )
    add_home(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.journal import build, parse_since, prices_from_env, to_markdown
    from backflip.runs.archive import home_dir

    cpu, gpu = prices_from_env()
    cpu = args.cpu_price if args.cpu_price is not None else cpu
    gpu = args.gpu_price if args.gpu_price is not None else gpu
    for name, price in (("--cpu-price", cpu), ("--gpu-price", gpu)):
        if price is not None and price < 0:
            from backflip.errors import UserError

            raise UserError(f"{name} must be >= 0")
    journal = build(home_dir(args.home), parse_since(args.since), cpu, gpu)
    if args.json:
        print_json(journal)
        return 0
    text = to_markdown(journal)
    if args.md:
        print(text, end="")
        return 0
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))
    return 0
