"""backflip prefs train|gather|pretrain|fit-teacher|check-reward: learning from preferences
(docs/preferences.md)."""

from __future__ import annotations

import dataclasses
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
        help="synthetic (default: the oracle on the true reward), human (the labeling page), "
        "one of B-Pref's simulated teachers: bpref-oracle, bpref-stoc, bpref-mistake, "
        "bpref-skip, bpref-equal, bpref-myopic (prefs.teacher_* adjust them), or fitted:RUN "
        "[/PERSON]: a simulated copy of a person who labeled RUN (their β, ε, γ fitted by "
        "`prefs fit-teacher`)",
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
    p.add_argument(
        "--inline",
        action="store_true",
        help="run the seeds in this process, one after another (prints and breakpoint() reach "
        "this terminal)",
    )
    add_sets(p, "override a setting; prefs.KEY for the pipeline (see --list-keys)")
    p.add_argument("--config", metavar="FILE", help="YAML or TOML file of settings")
    p.add_argument("-m", "--message", default="")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--list-keys", action="store_true", help="print every setting with its default")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true")
    add_home(p)


def build(args, home, notes: list[str] | None = None):
    """The run's TrainConfig (kind prefs) from the arguments, through the one resolver
    (`config.resolve`): settings derived from the env (no preset) < presets < --config < --set <
    the flags. `notes` receives the lines to say at launch (the horizon, the derived settings)."""
    from backflip.config import load_config_file, parse_sets
    from backflip.runconfig import action_line, resolve_on_env
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
    sets = {**parse_sets(args.sets), **flag_values(args, stage, source, frozen, home)}
    if frozen is not None and "prefs.labels" not in {**file_values, **sets}:
        sets["prefs.labels"] = 0  # a preset's label budget is not asked of a frozen model
    start = [args.seed_start] if args.seed_list is None else seeds_from(args)

    def resolved(derived=None):
        return resolve_on_env(algo, env, start, args.steps, file_values, sets, "prefs", derived)

    from backflip.prefs.derive import look
    from backflip.prefs.presets import PRESETS

    derived = None
    cfg = resolved()
    # an algorithm that cannot act in the env is refused before the env is looked at and its
    # settings derived (that takes random episodes and prints a dozen lines)
    from backflip.algos import get_algo
    from backflip.envs import check_supported, probing

    with probing():  # the launch's own check says what it finds of the env (execute)
        check_supported(get_algo(cfg.algo), cfg.env_id, cfg.env)
    facts = look(cfg.env_id, cfg.env)
    if cfg.env_id not in PRESETS:  # an env without a preset: settings derived from the env
        why = env_settings(cfg, facts)
        env_before, derived = cfg.env, {k: v for k, (v, _) in why.items()}
        cfg = resolved(derived)
        if notes is not None:
            notes += derived_lines(cfg, why)
        if cfg.env != env_before:  # a time limit given: look at the episodes it makes
            facts = look(cfg.env_id, cfg.env)
    elif "prefs.labels" not in {**file_values, **sets}:  # a preset's budget, scaled to --steps
        scaled = scaled_labels(cfg)
        if scaled is not None:
            labels, preset_labels, preset_steps = scaled
            sets["prefs.labels"] = labels
            cfg = resolved()
            if notes is not None:
                notes.append(
                    f"labels: the {cfg.prefs.preset} preset's {preset_labels:,} for "
                    f"{preset_steps:,} steps, scaled to {cfg.steps:,} steps: {labels:,}"
                )
    if "prefs.tick_steps" not in {**file_values, **sets} and (ticks := fitted_ticks(cfg)):
        sets["prefs.tick_steps"] = ticks
        before, cfg = cfg.prefs.tick_steps, resolved(derived)
        if notes is not None:
            notes.append(
                f"ticks: every {ticks:,} steps (prefs.tick_steps), not {before:,}: the labels "
                f"due while the policy trains are asked at ticks, and {before:,} would fit fewer "
                f"than {MIN_TICKS} into the {label_window(cfg):,} steps they are due in"
            )
    if args.seeds is None and args.seed_list is None:  # 5 for statistics; a person labels each
        args.seeds = 1 if cfg.prefs.labeler == "human" else DEFAULT_SEEDS
    cfg = dataclasses.replace(cfg, seeds=seeds_from(args))
    if notes is not None and (line := action_line(cfg)):
        notes.append(line)
    if notes is not None and cfg.prefs.labeler == "human":
        notes.append(clip_line(cfg, facts))
    return fix_horizon(cfg, facts, notes)


def clip_line(cfg, facts) -> str:
    """What a person will be shown of each clip: how long it lasts at the env's real speed and
    how many of its steps are rendered (`prefs.render_stride`)."""
    from backflip.video import playback

    length, speed = cfg.prefs.segment_length, facts.steps_per_s
    stride, fps = playback(speed, cfg.prefs.render_stride)
    nth = {1: "st", 2: "nd", 3: "rd"}.get(stride % 10 if stride % 100 not in (11, 12, 13) else 0)
    every = "every step" if stride == 1 else f"every {stride}{nth or 'th'} step"
    seconds = length / speed
    short = (
        "; shorter than the paper's 1-2 s (the page's speed menu plays it at down to 0.25x)"
        if seconds < 1
        else ""
    )
    return (
        f"clips: {length} steps (prefs.segment_length), {seconds:.2g} s at "
        f"{cfg.env_id}'s real speed of {speed:g} steps a second; {every} rendered "
        f"(prefs.render_stride): {-(-length // stride)} frames played at {fps:.3g} a second{short}"
    )


MIN_TICKS = 4
"""the fewest ticks a run's label window holds: a shorter budget than its tick interval was
made for (a 2,000-step look at an env, 2e4 steps of Pong under its 16,384-step ticks) asked the
labels due while the policy trains late, all at once, or never"""


def label_window(cfg) -> int:
    """The agent steps in which the labels asked while the policy trains fall due."""
    return int(cfg.steps * cfg.prefs.label_until)


def fitted_ticks(cfg) -> int | None:
    """A tick interval that fits `MIN_TICKS` ticks into the label window, when the configured
    one does not (None: it does, or no label is asked while the policy trains)."""
    p = cfg.prefs
    if p.stage != "full" or not p.labels or p.initial_frac >= 1:
        return None
    window = label_window(cfg)
    if window >= MIN_TICKS * p.tick_steps:
        return None
    return max(1, window // MIN_TICKS)


def scaled_labels(cfg) -> tuple[int, int, int] | None:
    """(labels, the preset's labels, the preset's steps) when the run's budget differs from its
    preset's: the labels asked for scale with the steps (a 2e4-step look at Pong asks 15, not
    the 1,500 of its 2e6-step preset), at least 10; None when nothing changes."""
    from backflip.prefs.presets import preset_for

    preset = preset_for(cfg.env_id, cfg.prefs.preset)
    policy = preset.get("policy", {}).get(cfg.algo, {})
    steps = policy.get("steps") or preset.get("steps")
    labels = {**preset.get("prefs", {}), **policy.get("prefs", {})}.get("labels")
    if not steps or not labels or steps == cfg.steps or cfg.prefs.stage == "policy":
        return None
    return max(10, round(labels * cfg.steps / steps)), labels, steps


def schedule_line(cfg) -> str:
    """The labels the run will ask for and when, said before it starts (a person plans an
    hour at the page by it)."""
    p = cfg.prefs
    if p.stage == "policy" or not p.labels:
        return "labels: none asked (a frozen reward model)" if p.stage == "policy" else ""
    first = p.labels if p.stage == "gather" else round(p.labels * p.initial_frac)
    when = "before the policy starts"
    if p.explore_steps and p.stage == "full":
        when = (
            f"after the policy's first {p.explore_steps:,} steps, paid for reaching new "
            "observations (prefs.explore_steps)"
        )
    who = "a person" if p.labeler == "human" else f"the {p.labeler} labeler"
    if p.teacher_from:
        person = p.teacher_from.partition("/")[2]
        who = f"a simulated copy of {person} (fitted on run {p.teacher_from.partition('/')[0]})"
    rest = (
        ""
        if p.stage == "gather"
        else f", the other {p.labels - first:,} while the policy trains, all due by "
        f"{round(p.label_until * cfg.steps):,} of its {cfg.steps:,} steps"
    )
    return (
        f"labels: {p.labels:,} asked of {who}: {first:,} {when}{rest} (the "
        "paper asked ~5,500 over 10M Atari steps, 700 on MuJoCo)"
    )


def fitted_teacher(home, ref: str) -> dict[str, object]:
    """`--labeler fitted:RUN[/PERSON]`: the settings of a synthetic labeler that answers as
    PERSON (default: the first person) answered RUN, fitted as a B-Pref teacher (β, ε, and γ
    where it differs from 1: `prefs/teacher_fit.py`), and where they come from."""
    from backflip.prefs.db import preference_seeds
    from backflip.prefs.teacher_fit import fit_run
    from backflip.runs.archive import load_run
    from backflip.runs.index import resolve_run

    run_ref, _, who = ref.partition("/")
    if not run_ref:
        raise UserError("--labeler fitted:RUN[/PERSON] needs a run whose person labeled it")
    run_dir = resolve_run(home, run_ref)
    record = load_run(run_dir)
    fits = [
        f
        for f in fit_run(run_dir, preference_seeds(record))
        if f["kind"] == "person" and (not who or f["who"] == who)
    ]
    if not fits:
        people = "a person" if not who else f"a person named {who!r}"
        raise UserError(f"run {record['id']} has no answers of {people} to fit")
    fit = fits[0]
    if "reason" in fit:
        raise UserError(f"cannot fit {fit['who']} on run {record['id']}: {fit['reason']}")
    return {
        "prefs.labeler": "synthetic",
        **{f"prefs.{k}": v for k, v in fit["simulate"].items()},
        "prefs.teacher_from": f"{record['id']}/{fit['who']}",
    }


def flag_values(args, stage: str, source, frozen, home=None) -> dict[str, object]:
    """The command's shortcuts as the settings they stand for (above --set)."""
    out: dict[str, object] = {"prefs.stage": "policy" if frozen is not None else stage}
    if getattr(args, "preset", None):
        out["prefs.preset"] = args.preset
    for flag in ("labeler", "labels"):
        if getattr(args, flag, None) is not None:
            out[f"prefs.{flag}"] = getattr(args, flag)
    if str(out.get("prefs.labeler", "")).startswith("fitted:"):
        out.update(fitted_teacher(home, str(out["prefs.labeler"])[7:]))
    if source is not None:
        out["prefs.import_from"] = str(source.resolve())
    if frozen is not None:
        out["prefs.reward_model"] = str(frozen.resolve())
    return out


def env_settings(cfg, facts) -> dict:
    """Settings derived from the env (`prefs.derive`), for an env without a preference preset:
    {key: (value, why)}."""
    from backflip.prefs.derive import derived_settings

    return derived_settings(facts, cfg.steps, person=cfg.prefs.labeler == "human")


def derived_lines(cfg, derived: dict) -> list[str]:
    """What to say at launch about the derived settings, one line each, with the value the run
    will use: one a preset, --config or --set replaced is said as replaced (the derived value
    beside it), not as if the run used it."""
    flat = cfg.flat()
    lines = [
        f"{cfg.env_id} has no preference preset: settings derived from the env "
        '(a preset, --config or --set overrides each; docs/preferences.md, "Your own env"):'
    ]
    for key, (value, why) in derived.items():
        used = flat.get(key, value)
        if used == value:
            lines.append(f"  {key}={value}: {why}")
        else:
            lines.append(f"  {key}={used}: yours (derived: {value}, {why})")
    return lines


def check_terminal(cfg) -> None:
    """`prefs.horizon=terminal` values an end in the reward the learner is paid as it steps: a
    replay buffer's relabeling (PEBBLE) recomputes rewards without it, and an end needs at least
    one absorbing step for the reward model to value."""
    from backflip.algos import values_ends

    if not values_ends(cfg.algo):
        raise UserError(
            f"prefs.horizon=terminal is for on-policy learners (ppo, a2c, vpg), not {cfg.algo}: "
            "a replay buffer's relabeled rewards do not carry an end's value yet, and CEM has no "
            "discount to value it with; use restart"
        )
    if cfg.prefs.absorb_steps < 1:
        raise UserError(
            "prefs.horizon=terminal needs prefs.absorb_steps >= 1: the end is valued as the "
            "absorbing state, which the reward model learns from clips that show it"
        )


def check_explore(cfg) -> None:
    """Exploration ends before the labels' schedule does, with steps left to learn from them."""
    p = cfg.prefs
    if p.explore_steps and p.stage == "full" and p.explore_steps >= p.label_until * cfg.steps:
        raise UserError(
            f"prefs.explore_steps={p.explore_steps:,} leaves no steps for the labels: they are "
            f"all due by {round(p.label_until * cfg.steps):,} of the {cfg.steps:,} steps "
            "(prefs.label_until); explore for fewer steps"
        )


def fix_horizon(cfg, facts, notes: list[str] | None):
    """`prefs.horizon=auto` made concrete (restart), checked against the env (a fixed horizon
    needs a time limit), and said in one line; the CNNs checked against the frames."""
    from backflip.algos import values_ends
    from backflip.envs import episode_limit
    from backflip.envs.horizon import horizon_treatment
    from backflip.prefs.derive import horizon_line

    pcfg = cfg.prefs
    treatment = horizon_treatment(pcfg, values_ends(cfg.algo))
    horizon = pcfg.horizon_steps or episode_limit(cfg.env_id, cfg.env)
    if treatment != "variable" and horizon is None:
        raise UserError(
            f"{cfg.env_id} has no time limit: prefs.horizon={treatment} needs one "
            "(--set prefs.horizon_steps=N)"
        )
    if treatment == "terminal":
        check_terminal(cfg)
    check_explore(cfg)
    from backflip.commands.train import check_cnns
    from backflip.prefs.derive import check_action_input

    check_action_input(pcfg, facts.discrete, facts.action_space)
    check_cnns(cfg, facts.obs_shape)  # before --list-keys, as execute() checks it again
    if notes is not None and pcfg.stage != "pretrain":
        notes.append(horizon_line(facts, treatment, horizon or 0, pcfg.absorb_steps))
        if line := schedule_line(cfg):
            notes.append(line)
    prefs = dataclasses.replace(pcfg, horizon=treatment)
    return dataclasses.replace(cfg, prefs=prefs)


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
    from backflip.runs.archive import home_dir

    if not args.stage:
        print(
            "usage: backflip prefs {train,gather,pretrain,fit-teacher,check-reward} ... (see --help)",
            file=sys.stderr,
        )
        return 2
    home = home_dir(args.home, create=True)
    notes: list[str] = []
    cfg = build(args, home, notes)
    pcfg = cfg.prefs
    if args.list_keys:
        for line in notes:
            print(f"# {line}")
        return list_keys(cfg)
    ask_task(pcfg, sys.stdin.isatty() and not args.json)
    from backflip.prefs.presets import PAPER

    if cfg.env_id in PAPER:
        other = {"cpu": "the paper's GPU-scale settings: --preset paper", "paper": "--preset cpu"}
        notes.insert(
            0, f"preset {pcfg.preset} for {cfg.env_id} ({other[pcfg.preset]}; docs/preferences.md)"
        )
    for line in notes:
        warn = line.startswith("horizon: variable")
        print(f"warning: {line}" if warn else line, file=sys.stderr, flush=True)
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
        notes=notes,
        on_created=where_to_label,
        backend="inline" if args.inline else "local",
    )
