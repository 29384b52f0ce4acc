"""backflip train ALGO --env ENV_ID [--seeds N] [--steps N] [--set key=value]..."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings

from backflip.commands import (
    add_backend,
    add_home,
    add_sets,
    add_workers,
    backend_address,
    backend_of,
    print_json,
)
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train an algorithm on an env, N seeds in parallel, archived",
        description="Train ALGO on a Gymnasium env with N seeds in parallel; the run "
        "is archived with its config, code, metrics and checkpoints.",
    )
    p.add_argument("algo", help="algorithm (ppo, ...)")
    p.add_argument(
        "--env", required=True, metavar="ENV_ID", help="Gymnasium env id, e.g. CartPole-v1"
    )
    add_seed_args(p)
    p.add_argument(
        "--steps",
        type=_steps,
        metavar="N",
        help="env steps per seed (default: the algorithm's budget for this env)",
    )
    add_workers(p)
    add_sets(p, "override a setting (repeatable); see `backflip train ALGO --env E --list-keys`")
    add_backend(p)
    p.add_argument("--config", metavar="FILE", help="YAML or TOML file of settings")
    p.add_argument("-m", "--message", default="", help="the question this run is meant to answer")
    p.add_argument("--tag", action="append", default=[], help="label the run (repeatable)")
    p.add_argument(
        "--surprise",
        metavar="ANSWER",
        help="how surprised you would be if this run failed (stored with the run; asked "
        "interactively before long runs unless given, see $BACKFLIP_ASK_AFTER_MIN)",
    )
    p.add_argument("--no-ask", action="store_true", help="never ask the pre-mortem question")
    p.add_argument("--list-keys", action="store_true", help="print every setting with its default")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.add_argument("--json", action="store_true", help="print the final record as JSON")
    add_home(p)
    p.set_defaults(func=run)


DEFAULT_SEEDS = 5  # what the statistics need for an interval worth reading (stats.py)


def add_seed_args(p, default: int | None = DEFAULT_SEEDS, default_text: str = "") -> None:
    """--seeds N (default 5: results come with an interval), --seed-start S, --seed-list.
    A command whose default depends on other arguments passes None and says so in
    `default_text`."""
    p.add_argument(
        "--seeds",
        type=int,
        default=default,
        action=Given,
        metavar="N",
        help=f"number of seeds (default {default_text or default}; --seeds 1 for a quick look, "
        "with no interval)",
    )
    p.add_argument(
        "--seed-start",
        type=int,
        default=0,
        action=Given,
        metavar="S",
        help="first seed (default 0)",
    )
    p.add_argument("--seed-list", metavar="S,S,...", help="explicit seeds instead of --seeds")


class Given(argparse.Action):
    """Store the value, and that it was given on the command line (`args.given`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        given = getattr(namespace, "given", None) or set()
        namespace.given = given | {self.dest}


def seeds_from(args) -> list[int]:
    """The seeds of --seed-list, or --seeds N from --seed-start, checked (config.check_seeds);
    --seed-list with --seeds or --seed-start is refused (which seeds would it be?)."""
    from backflip.config import MAX_SEEDS, check_seeds, parse_seed_list

    if args.seed_list is not None:
        clash = sorted(getattr(args, "given", None) or set())
        if clash:
            flags = " and ".join(f"--{name.replace('_', '-')}" for name in clash)
            raise UserError(f"--seed-list names the seeds: drop {flags}")
        return parse_seed_list(args.seed_list)
    if args.seeds < 1:
        raise UserError("--seeds must be at least 1")
    if args.seeds > MAX_SEEDS:
        raise UserError(f"at most {MAX_SEEDS} seeds per run, got --seeds {args.seeds}")
    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    check_seeds(seeds)
    return seeds


def _steps(text: str) -> str:
    """--steps as given: `config.parse_steps` checks it (one line, exit 2, like every setting)."""
    return text


def run(args) -> int:
    from backflip.config import check_tags, load_config_file, parse_sets
    from backflip.runconfig import action_line, resolve_on_env
    from backflip.runs.archive import home_dir

    # everything is checked before anything is created
    file_values = load_config_file(args.config) if args.config else {}
    cfg = resolve_on_env(
        args.algo, args.env, seeds_from(args), args.steps, file_values, parse_sets(args.sets)
    )
    check_tags(args.tag)
    notes = [line] if (line := action_line(cfg)) else []
    if args.list_keys:
        for line in notes:
            print(f"# {line}")
        return list_keys(cfg)
    for line in notes:
        print(line, file=sys.stderr, flush=True)
    home = home_dir(args.home, create=True)
    return execute(
        cfg,
        home,
        sys.argv,
        args.message,
        args.workers,
        not args.no_progress,
        tags=args.tag,
        as_json=args.json,
        backend=backend_of(args),
        address=backend_address(args),
        surprise=args.surprise,
        ask=not args.no_ask,
        notes=notes,
    )


def execute(
    cfg,
    home,
    argv,
    message="",
    workers=None,
    progress=True,
    rerun_of=None,
    tags=None,
    as_json=False,
    notes=None,
    backend="local",
    address=None,
    surprise=None,
    ask=True,
    on_created=None,
) -> int:
    """Validate, launch, summarize: shared by `train`, `rerun` and `prefs train`.

    `notes`: lines said at launch that the run record keeps (`notes`: a preference run's
    horizon, the settings derived from its env); `on_created(run_dir)` runs once the run exists,
    after its id is printed."""
    from backflip.algos import get_algo
    from backflip.config import check_device
    from backflip.envs import AtariProtocolWarning, check_supported
    from backflip.journal import expected_seconds, premortem
    from backflip.launch import launch_run, prepare
    from backflip.runs.archive import read_record, run_lock, write_record
    from backflip.summary import run_summary

    spec = get_algo(cfg.algo)
    check_backend(backend, address)
    prepare(backend)  # the seeds' server imports torch while the launcher checks and records
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AtariProtocolWarning)
        obs_shape = check_supported(spec, cfg.env_id, cfg.env)
    for w in caught:
        if issubclass(w.category, AtariProtocolWarning):
            print(f"warning: {w.message}", file=sys.stderr, flush=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    check_cnns(cfg, obs_shape)
    check_device(cfg.run.device)
    workers = workers or os.cpu_count() or 1
    expected = expected_seconds(home, cfg.algo, cfg.env_id, cfg.steps, len(cfg.seeds), workers)
    answer = premortem(expected, surprise, ask=ask and not as_json)

    def created(run_dir):
        what = f"{cfg.algo} on learned reward" if cfg.kind == "prefs" else cfg.algo
        if answer is not None:  # before any seed starts, so finalize_run keeps it
            with run_lock(run_dir):
                record = read_record(run_dir)
                record["premortem"] = answer
                write_record(run_dir, record)
        print(
            f"run {run_dir.name}: {what} on {cfg.env_id}, {len(cfg.seeds)} seed(s) × "
            f"{cfg.steps:,} steps → {run_dir}",
            file=sys.stderr if as_json else sys.stdout,  # --json: stdout is the JSON alone
            flush=True,
        )
        if on_created is not None:
            on_created(run_dir)

    record = launch_run(
        cfg,
        home,
        list(argv),
        message,
        workers,
        progress and not as_json and backend != "inline",  # a live display would garble pdb
        rerun_of=rerun_of,
        tags=tags,
        on_created=created,
        notes=notes,
        backend=backend,
        address=address,
    )
    if as_json:
        print_json(record)
    else:
        print(run_summary(record))
        print(f"archived in {record['dir']} — details: backflip show {record['id']}")
        if record["status"] == "interrupted":
            print(f"continue the unfinished seeds with: backflip resume {record['id']}")
    return {"finished": 0, "interrupted": 130}.get(record["status"], 1)


def check_cnns(cfg, obs_shape: tuple[int, ...]) -> None:
    """The policy's CNN (and a preference run's reward CNN) fit the env's frames: one line
    before the run is created, never a PyTorch shape error in a seed (`backflip.cnns`)."""
    from backflip.cnns import POLICY_CNN_MIN, REWARD_CNN_MIN, pick_cnn

    if len(obs_shape) != 3:
        return
    if hasattr(cfg.hp, "cnn"):
        pick_cnn(cfg.hp.cnn, obs_shape, POLICY_CNN_MIN, "nature", "cnn")
    if cfg.prefs is not None:
        pick_cnn(cfg.prefs.cnn, obs_shape, REWARD_CNN_MIN, "paper", "prefs.cnn")


def check_backend(backend: str, address: str | dict | None) -> None:
    """A clear message before anything is archived: ray or submitit missing, or --address
    without ray (`address`: from `commands.backend_address`)."""
    import importlib.util

    if isinstance(address, str) and address and backend != "ray":
        raise UserError("--address is for --backend ray")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise UserError("--backend ray needs Ray: pip install 'backflip[ray]'")
    if backend == "slurm" and importlib.util.find_spec("submitit") is None:
        raise UserError("--backend slurm needs submitit: pip install 'backflip[slurm]'")


def list_keys(cfg) -> int:

    from backflip.config import RunOptions, describe, domain_of, format_value, sections

    current = cfg.flat()
    parts = [("", type(cfg.hp)), ("", RunOptions)]
    parts += [(f"{k}.", c) for k, c in sections(cfg.kind).items()]
    for prefix, cls in parts:
        print(f"# {cls.__name__}")
        for name, tp, _default, doc in describe(cls):
            value = current[prefix + name]
            if dataclasses.is_dataclass(value):
                continue
            domain = domain_of(prefix + name, cfg.algo)
            allowed = f", {domain.text()}" if domain else ""
            # key=value exactly as --set accepts it
            print(f"  {prefix + name}={format_value(value)}  ({tp}{allowed}) {doc}")
    return 0
