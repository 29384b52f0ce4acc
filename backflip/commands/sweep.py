"""backflip sweep ALGO --env E --vary key=v1,v2|auto [--vary ...] [--grid] --seeds N"""

from __future__ import annotations

import sys

from backflip.commands import (
    add_backend,
    add_format,
    add_home,
    add_sets,
    add_workers,
    backend_address,
    backend_of,
    print_json,
)
from backflip.commands.train import _steps, add_seed_args, check_backend, seeds_from

# the library is imported inside functions: `backflip --help` imports every command module


def add_study_args(p) -> None:
    """Arguments shared by `sweep` and `ablate`: what to train, and where."""
    p.add_argument("algo", help="algorithm (ppo, ...)")
    p.add_argument("--env", required=True, metavar="ENV_ID")
    add_seed_args(p)
    p.add_argument("--steps", type=_steps, metavar="N", help="env steps per seed")
    add_sets(p, "change the default configuration every variant starts from (repeatable)")
    p.add_argument("--config", metavar="FILE", help="YAML or TOML file of settings")
    add_workers(p)
    add_backend(p)
    p.add_argument("--no-plot", action="store_true")
    add_format(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="sensitivity of the result to each hyperparameter, with CIs",
        description="Run the default configuration and variants of it (one hyperparameter at "
        "a time, or a grid), all with the same seeds; report each setting's IQM [95%% CI], its "
        "probability of improvement over the default, and flag fragile settings.",
    )
    add_study_args(p)
    p.add_argument(
        "--vary",
        action="append",
        required=True,
        metavar="KEY=V1,V2|auto",
        help="values to try (repeatable); auto: ×0.3 and ×3 of the default, or the neighbours "
        "of a discrete setting; tuple settings separate values with ';'",
    )
    p.add_argument("--grid", action="store_true", help="every combination, not one at a time")
    p.set_defaults(func=run)


def launch_study(args, kind: str, make_variants) -> int:
    from backflip.algos import get_algo
    from backflip.config import load_config_file, parse_sets
    from backflip.envs import check_supported
    from backflip.experiments.sweep import build_configs, format_study, judge, run_study, save_study
    from backflip.runconfig import resolve_on_env
    from backflip.runs.archive import home_dir

    home = home_dir(args.home, create=True)
    spec = get_algo(args.algo)
    file_values = load_config_file(args.config) if args.config else {}
    sets = parse_sets(args.sets)
    seeds = seeds_from(args)
    base = resolve_on_env(args.algo, args.env, seeds, args.steps, file_values, sets)
    check_supported(spec, base.env_id, base.env)
    check_backend(backend_of(args), backend_address(args))
    variants, skipped = make_variants(spec, base, file_values, sets, seeds)
    if not variants:
        from backflip.errors import UserError

        raise UserError("nothing to run: no variant differs from the default configuration")
    base, cfgs = build_configs(args.algo, args.env, seeds, args.steps, file_values, sets, variants)
    if not args.json:
        print(
            f"{kind}: {len(variants) + 1} runs × {len(seeds)} seeds of {args.algo} on {args.env}",
            flush=True,
        )
    study = run_study(
        kind,
        home,
        sys.argv,
        base,
        cfgs,
        variants,
        args.workers,
        not args.no_progress and not args.json,
        backend_of(args),
        backend_address(args),
    )
    study["skipped"] = skipped
    study = save_study(home, judge(study), plot=not args.no_plot, fmt=args.format or "png")
    if args.json:
        print_json(study)
    else:
        print(format_study(study))
    return 0 if all(s == "finished" for s in study["runs_status"].values()) else 1


def run(args) -> int:
    from backflip.experiments.sweep import drop_invalid, parse_vary, sweep_variants

    def make(spec, base, file_values, sets, seeds):
        flat = base.flat()
        varies = [parse_vary(v, spec, flat) for v in args.vary]
        keys = [k for k, _, _ in varies]
        if len(set(keys)) < len(keys):
            from backflip.errors import UserError

            raise UserError("each key may be varied once")
        variants = sweep_variants(varies, flat, args.grid)
        auto_keys = {k for k, _, auto in varies if auto}
        explicit = [v for v in variants if not set(v["overrides"]) & auto_keys]
        automatic = [v for v in variants if set(v["overrides"]) & auto_keys]
        kept, skipped = drop_invalid(
            args.algo, args.env, seeds, args.steps, file_values, sets, automatic
        )
        return [v for v in variants if v in explicit or v in kept], skipped

    return launch_study(args, "sweep", make)
