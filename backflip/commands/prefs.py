"""backflip prefs train|gather|pretrain|fit-teacher|check-reward: learning from preferences
(docs/preferences.md)."""

from __future__ import annotations

import sys

from backflip.commands import add_home, add_sets, add_workers, check_reward, fit_teacher
from backflip.commands.train import (
    DEFAULT_SEEDS,
    _steps,
    add_seed_args,
    execute,
    list_keys,
    seeds_from,
)
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "prefs",
        help="learn a reward from preferences (synthetic or human) and train a policy on it",
        description="Christiano et al. (2017): a reward model fit to pairwise preferences "
        "replaces the env's reward; any algorithm trains on it. See docs/preferences.md.",
    )
    stages = p.add_subparsers(dest="stage", metavar="STAGE")

    t = stages.add_parser("train", help="the whole pipeline: labels, reward model and policy")
    t.add_argument("algo", help="the policy's algorithm (ppo, ...)")
    t.add_argument("--env", required=True, metavar="ENV_ID")
    t.add_argument("--reward-model", metavar="RUN", help="use RUN's saved reward model, frozen")
    _common(t)

    g = stages.add_parser("gather", help="only gather the initial labels, from a random policy")
    g.add_argument("--env", required=True, metavar="ENV_ID")
    _common(g)

    r = stages.add_parser("pretrain", help="only fit a reward model to the labels of a run")
    r.add_argument("--env", metavar="ENV_ID", help="default: the env of the --prefs run")
    _common(r)
    p.set_defaults(func=run)
    fit_teacher.register(stages)  # after the parent's default: their own `func` wins
    check_reward.register(stages)


def _common(p) -> None:
    p.add_argument(
        "--labeler",
        metavar="LABELER",
        help="synthetic (default: the oracle on the true reward), human (the labeling page), or "
        "one of B-Pref's simulated teachers: bpref-oracle, bpref-stoc, bpref-mistake, "
        "bpref-skip, bpref-equal, bpref-myopic (prefs.teacher_* adjust them)",
    )
    p.add_argument("--labels", type=int, metavar="N", help="labels to ask for in all (the cap)")
    p.add_argument(
        "--preset",
        choices=("cpu", "paper"),
        help="the env's settings: cpu (sized for a CPU) or paper (Christiano et al.'s, GPU-scale; "
        "Atari only); default paper with --set device=cuda where there is one, else cpu",
    )
    p.add_argument(
        "--prefs", metavar="FROM_RUN", help="start from the labels in FROM_RUN's database"
    )
    # one seed by default: each seed asks for its own labels, from a person with --labeler human
    add_seed_args(
        p,
        default=None,
        default_text="5, or 1 with --labeler human: each seed asks a person for its own labels",
    )
    p.add_argument("--steps", type=_steps, metavar="N", help="agent steps per seed")
    add_workers(p)
    add_sets(p, "override a setting; prefs.KEY for the pipeline (see --list-keys)")
    p.add_argument("--config", metavar="FILE", help="YAML or TOML file of settings")
    p.add_argument("-m", "--message", default="")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--list-keys", action="store_true", help="print every setting with its default")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)


def build(args, home):
    """(TrainConfig, PrefsConfig) from the arguments: presets < --config < --set < flags."""
    from backflip.config import _build, load_config_file, parse_sets, resolve
    from backflip.prefs.pipeline import PrefsConfig
    from backflip.prefs.presets import PAPER, preset_for
    from backflip.runs.archive import load_run
    from backflip.runs.index import resolve_run

    stage = {"train": "full", "gather": "gather", "pretrain": "pretrain"}[args.stage]
    algo = getattr(args, "algo", "ppo")
    env = args.env
    source = resolve_run(home, args.prefs) if args.prefs else None
    frozen = resolve_run(home, args.reward_model) if getattr(args, "reward_model", None) else None
    if stage == "pretrain":
        if source is None:
            raise UserError("prefs pretrain needs --prefs FROM_RUN (the labels to fit)")
        env = env or load_run(source)["config"]["env_id"]
    file_values = load_config_file(args.config) if args.config else {}
    file_prefs = file_values.pop("prefs", {}) or {}
    sets = parse_sets(args.sets)
    set_prefs = {k[6:]: v for k, v in sets.items() if k.startswith("prefs.")}
    sets = {k: v for k, v in sets.items() if not k.startswith("prefs.")}
    device = str(sets.get("device", file_values.get("device", "cpu")))
    name = (
        getattr(args, "preset", None)
        or set_prefs.pop("preset", None)
        or file_prefs.pop("preset", None)
        or ("paper" if device.startswith("cuda") and env in PAPER else "cpu")
    )
    set_prefs.pop("preset", None)
    file_prefs.pop("preset", None)
    preset = preset_for(env, name)
    # an algorithm's entry may set its own budget and pipeline settings (SAC needs fewer steps)
    policy_preset = dict(preset.get("policy", {}).get(algo, {}))
    algo_steps, algo_prefs = policy_preset.pop("steps", None), policy_preset.pop("prefs", {})
    steps = args.steps or file_values.pop("steps", None) or algo_steps or preset.get("steps")
    if args.seeds is None:  # the statistics want 5 seeds; a person labels each one
        labeler = args.labeler or {
            "labeler": "synthetic",
            **preset.get("prefs", {}),
            **algo_prefs,
            **file_prefs,
            **set_prefs,
        }.get("labeler")
        args.seeds = 1 if labeler == "human" else DEFAULT_SEEDS
    cfg = resolve(algo, env, seeds_from(args), steps, {**policy_preset, **file_values}, sets)
    values = {
        **preset.get("prefs", {}),
        **algo_prefs,
        **file_prefs,
        **set_prefs,
        "stage": stage,
        "preset": name,
    }
    if stage == "full" and frozen is not None:
        values["stage"] = "policy"
    for flag, key in (("labeler", "labeler"), ("labels", "labels")):
        if getattr(args, flag, None) is not None:
            values[key] = getattr(args, flag)
    if source is not None:
        values["import_from"] = str(source.resolve())
    if frozen is not None:
        values["reward_model"] = str(frozen.resolve())
        if getattr(args, "labels", None) is None and "labels" not in {**file_prefs, **set_prefs}:
            values["labels"] = 0  # a preset's label budget is not asked for on a frozen model
    pcfg = _build(PrefsConfig, values, "prefs.")
    if pcfg.action_input == "heads":  # refused here, not in every seed's process
        from backflip.envs import make_env
        from backflip.prefs.pipeline import check_action_input

        probe = make_env(cfg.env_id, cfg.env)
        check_action_input(pcfg, probe.action_space)
        probe.close()
    if pcfg.stage == "policy" and pcfg.labels:
        raise UserError("--reward-model trains on a frozen model: drop --labels (or use --prefs)")
    return cfg, pcfg


def ask_task(pcfg, interactive: bool) -> None:
    """A person labels this run: make sure the page can tell them what "better" means."""
    if pcfg.labeler != "human" or pcfg.task.strip() or pcfg.stage not in ("full", "gather"):
        return
    if interactive:
        pcfg.task = input(
            "A person will label this run. What makes a clip better? One line, shown on the "
            "labeling page (e.g. 'move the dot to the centre'): "
        ).strip()
    if not pcfg.task:
        raise UserError(
            "a person labels this run: say what makes a clip better, "
            "e.g. --set prefs.task='move the dot to the centre' (shown on the labeling page)"
        )


def run(args) -> int:
    from backflip.config import describe, format_value
    from backflip.runs.archive import home_dir

    if not args.stage:
        print(
            "usage: backflip prefs {train,gather,pretrain,fit-teacher,check-reward} ... (see --help)",
            file=sys.stderr,
        )
        return 2
    home = home_dir(args.home, create=True)
    cfg, pcfg = build(args, home)
    if args.list_keys:
        list_keys(cfg)
        print("# PrefsConfig")
        for name, tp, _default, doc in describe(type(pcfg)):  # key=value as --set takes it
            print(f"  prefs.{name}={format_value(getattr(pcfg, name))}  ({tp}) {doc}")
        return 0
    ask_task(pcfg, sys.stdin.isatty() and not args.json)
    from backflip.prefs.presets import PAPER

    if cfg.env_id in PAPER:
        other = {"cpu": "the paper's GPU-scale settings: --preset paper", "paper": "--preset cpu"}
        print(
            f"preset {pcfg.preset} for {cfg.env_id} ({other[pcfg.preset]}; docs/preferences.md)",
            file=sys.stderr,
        )
    if pcfg.mode == "async":
        print(
            "note: prefs.mode=async trains the reward model beside the policy in a second "
            "thread; runs of this command will not give the same curves (prefs.mode=sync does)",
            file=sys.stderr,
        )

    def where_to_label(run_dir):
        if pcfg.labeler == "human":
            print(
                f"a person labels this run: open the page with `backflip label {run_dir.name}` "
                "(or `backflip ui`, Label); the seeds wait for the answers",
                file=sys.stderr,
                flush=True,
            )

    return execute(
        cfg,
        home,
        sys.argv,
        args.message,
        args.workers,
        not args.no_progress,
        tags=["prefs", *args.tag],
        as_json=args.json,
        extra={"prefs": pcfg.to_dict()},
        on_created=where_to_label,
    )
