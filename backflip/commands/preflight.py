"""backflip preflight ENV_ID [--json]"""

from __future__ import annotations

from backflip.commands import add_sets, print_json
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "preflight",
        help="check an environment before training: env checker, random policy, scales",
        description="Run Gymnasium's env checker and random-policy rollouts through backflip's "
        "env factory; report returns, episode lengths, termination vs truncation, "
        "per-dimension observation ranges, reward statistics, reset determinism and Atari "
        "settings, with warnings (docs/doctor.md). Image observations: a PNG contact sheet.",
    )
    p.add_argument("env_id", metavar="ENV_ID", help="Gymnasium env id, e.g. CartPole-v1")
    p.add_argument("--episodes", type=int, default=20, help="random episodes (default 20)")
    p.add_argument(
        "--max-steps", type=int, default=20_000, help="cap on random steps (default 20000)"
    )
    p.add_argument("--seed", type=int, default=0)
    add_sets(
        p,
        "an env option, as for `backflip train` (e.g. env.obs_scale=1000)",
        metavar="env.KEY=VALUE",
    )
    p.add_argument("--sheet", metavar="PNG", help="contact sheet path (image observations)")
    p.add_argument("--json", action="store_true", help='{"target", "findings", "report"}')
    p.set_defaults(func=run)


def run(args) -> int:
    from backflip.config import EnvOptions, _build, parse_sets
    from backflip.doctor.preflight import preflight, render

    values = {}
    for key, value in parse_sets(args.sets).items():
        section, _, name = key.partition(".")
        if section != "env" or not name:
            raise UserError(f"preflight takes env.* options only, got {key!r}")
        values[name] = value
    if args.episodes < 1 or args.max_steps < 1:
        raise UserError("--episodes and --max-steps must be at least 1")
    opts = _build(EnvOptions, values, "env.")
    report = preflight(args.env_id, opts, args.episodes, args.max_steps, args.seed, args.sheet)
    if args.json:
        print_json(report.to_dict())
    else:
        print(render(report))
    return 0
