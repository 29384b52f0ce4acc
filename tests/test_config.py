import pytest

from backflip.config import TrainConfig, describe, load_config_file, parse_sets, resolve
from backflip.errors import UserError


def test_set_values_are_type_checked_and_applied():
    cfg = resolve(
        "ppo",
        "CartPole-v1",
        [0],
        None,
        set_values=parse_sets(
            [
                "lr=3e-4",
                "epochs=1e1",
                "norm_obs=yes",
                "hidden=32,32",
                "env.reward_scale=10",
                "doctor.stop_on_nan=false",
                "eval_episodes=3",
            ]
        ),
    )
    assert cfg.hp.lr == 3e-4 and cfg.hp.epochs == 10 and cfg.hp.norm_obs is True
    assert cfg.hp.hidden == (32, 32)
    assert cfg.env.reward_scale == 10.0 and cfg.doctor.stop_on_nan is False
    assert cfg.run.eval_episodes == 3


def test_unknown_key_lists_valid_keys_and_suggests():
    with pytest.raises(UserError) as e:
        resolve("ppo", "CartPole-v1", [0], None, set_values={"lrr": "1"})
    msg = str(e.value)
    assert "did you mean lr" in msg and "gae_lambda" in msg and "env.reward_scale" in msg


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("lr", "fast", "not a number"),
        ("epochs", "2.5", "not an integer"),
        ("norm_obs", "maybe", "boolean"),
        ("lr", "-1", "lr must be >= 1e-10"),
        ("gamma", "1.5", "gamma must be in (0, 1]"),
        ("eval_episodes", "0", "eval_episodes must be in [1, 10000]"),
        ("device", "tpu", "device must be cpu or cuda"),
    ],
)
def test_bad_values_say_what_is_wrong(key, value, words):
    with pytest.raises(UserError, match=None) as e:
        resolve("ppo", "CartPole-v1", [0], None, set_values={key: value})
    assert words in str(e.value)


def test_precedence_defaults_preset_file_set(tmp_path):
    # the Pendulum preset changes gamma; a file overrides the preset; --set overrides the file
    assert resolve("ppo", "Pendulum-v1", [0], None).hp.gamma == 0.95
    f = tmp_path / "c.yaml"
    f.write_text("gamma: 0.97\nlr: 0.01\nenv:\n  reward_scale: 2\n")
    cfg = resolve("ppo", "Pendulum-v1", [0], None, load_config_file(f), {"lr": "0.02"})
    assert cfg.hp.gamma == 0.97 and cfg.hp.lr == 0.02 and cfg.env.reward_scale == 2.0
    assert cfg.steps == 300_000 and cfg.preset == "Pendulum-v1"


def test_toml_config_and_bad_files(tmp_path):
    t = tmp_path / "c.toml"
    t.write_text("epochs = 4\n[env]\nobs_scale = 3.0\n")
    cfg = resolve("ppo", "CartPole-v1", [0], None, load_config_file(t))
    assert cfg.hp.epochs == 4 and cfg.env.obs_scale == 3.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [unclosed\n")
    with pytest.raises(UserError, match="cannot parse"):
        load_config_file(bad)
    with pytest.raises(UserError, match="not found"):
        load_config_file(tmp_path / "missing.yaml")


def test_round_trip_through_dict():
    cfg = resolve("ppo", "CartPole-v1", [3, 4], 5000, set_values={"hidden": "16"})
    again = TrainConfig.from_dict(cfg.to_dict())
    assert again == cfg


def test_every_config_field_is_documented():
    from backflip.algos import ALGOS, get_algo
    from backflip.config import SECTIONS, RunOptions

    classes = [get_algo(a).config for a in ALGOS] + [RunOptions, *SECTIONS.values()]
    for cls in classes:
        for name, _tp, _default, doc in describe(cls):
            assert doc, f"{cls.__module__}.{cls.__name__}.{name} has no docstring"


def test_bare_keys_do_not_collide_between_algorithm_and_run_options():
    import dataclasses

    from backflip.algos import ALGOS, get_algo
    from backflip.config import RunOptions

    run_keys = {f.name for f in dataclasses.fields(RunOptions)}
    for a in ALGOS:
        assert not run_keys & {f.name for f in dataclasses.fields(get_algo(a).config)}, a


def test_every_setting_has_a_domain():
    """config.DOMAINS holds one for every number, word and size list of every algorithm and
    section (booleans need none; device is checked by RunOptions)."""
    import dataclasses
    import typing

    from backflip.algos import ALGOS, get_algo
    from backflip.config import SECTIONS, UNBOUNDED, RunOptions, domain_of

    for algo in ALGOS:
        classes = [("", get_algo(algo).config), ("", RunOptions)]
        classes += [(f"{name}.", cls) for name, cls in SECTIONS.items()]
        for prefix, cls in classes:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                key = prefix + f.name
                if hints[f.name] is bool or key in UNBOUNDED:
                    continue
                assert domain_of(key, algo) is not None, f"{algo}: {key} has no domain"


def test_every_preset_and_ablation_is_inside_the_domains():
    from backflip.algos import ALGOS, get_algo

    for algo in ALGOS:
        spec = get_algo(algo)
        for env in spec.presets:
            resolve(algo, env, [0], None)
        for off in getattr(spec.settings, "ABLATIONS", {}).values():
            resolve(algo, "CartPole-v1", [0], None, set_values=dict(off))


def test_an_env_without_a_preset_gets_settings_from_its_action_space():
    """PPO's defaults are rl-zoo's CartPole entry; on an env it has no preset for whose actions
    are a Box it takes the continuous-control settings instead, from the env's action space and
    not from its id (`ACTION_DEFAULTS`); presets, --set and discrete actions are untouched."""
    from backflip.algos.settings.ppo import CONTINUOUS, Config
    from backflip.runconfig import action_line, resolve_on_env

    box = resolve_on_env("ppo", "MountainCarContinuous-v0", [0], 10_000)
    assert {k: getattr(box.hp, k) for k in CONTINUOUS} == CONTINUOUS
    assert box.hp.num_steps != Config().num_steps  # the test would pass on the defaults otherwise
    assert resolve_on_env("ppo", "Acrobot-v1", [0], 10_000).hp == Config()  # Discrete
    assert (
        resolve_on_env("ppo", "Acrobot-v1", [0], 10_000).hp
        == resolve("ppo", "Acrobot-v1", [0], 10_000).hp
    )
    preset = resolve_on_env("ppo", "Pendulum-v1", [0], None)
    assert preset.hp == resolve("ppo", "Pendulum-v1", [0], None).hp and preset.hp.num_steps == 128
    # the probes keep the defaults: their budgets of a few thousand steps fit short rollouts
    probe = resolve_on_env("ppo", "backflip/Probe4Box-v0", [0], 12_000)
    assert probe.hp.num_steps == Config().num_steps
    # yours win, and the launch line says which are yours
    mine = resolve_on_env(
        "ppo", "MountainCarContinuous-v0", [0], 10_000, set_values={"lr": "1e-4", "num_envs": "4"}
    )
    assert (mine.hp.lr, mine.hp.num_envs, mine.hp.num_steps) == (1e-4, 4, 2048)
    line = action_line(mine)
    assert "no ppo preset" in line and "Box actions" in line
    assert "lr=0.0001 (yours; 0.0003)" in line and "num_steps=2048," in line
    assert action_line(preset) is None and action_line(resolve("ppo", "Acrobot-v1", [0], 1)) is None


@pytest.mark.parametrize("env_id", ["ALE/Breakout-v5", "MsPacmanNoFrameskip-v4"])
def test_an_atari_game_without_a_preset_takes_the_ppo_papers_atari_settings(env_id):
    """`ALE/Breakout-v5` (Gymnasium's recommended id) and the games beyond the seven presets
    got PPO's CartPole defaults: 20 epochs of the CNN per 8 x 32 steps."""
    pytest.importorskip("ale_py")
    from backflip.algos.settings.ppo import ATARI
    from backflip.runconfig import action_line, resolve_on_env

    cfg = resolve_on_env("ppo", env_id, [0], 10_000)
    for key, value in ATARI.items():
        if key != "steps":
            assert getattr(cfg.hp, key) == value, key
    assert cfg.steps == 10_000  # the budget stays the run's
    line = action_line(cfg)
    assert f"{env_id} has no ppo preset: the settings for Atari games" in line
    assert "num_steps=128" in line and "epochs=3" in line


def test_a_run_on_an_env_without_a_preset_says_its_derived_settings_and_reproduces_them(
    tmp_path, capsys
):
    """What the user sees: `--list-keys` names where the settings come from, and `show`'s
    reproduce line, run through the same parser and resolver, gives the same config."""
    import shlex

    from backflip.cli import build_parser, main
    from backflip.commands.train import seeds_from
    from backflip.runconfig import resolve_on_env
    from backflip.summary import reproduce_command

    argv = ["train", "ppo", "--env", "MountainCarContinuous-v0", "--steps", "4096"]
    argv += ["--set", "gamma=0.995", "--home", str(tmp_path)]
    assert main([*argv, "--list-keys"]) == 0
    out = capsys.readouterr().out
    assert "# MountainCarContinuous-v0 has no ppo preset: the settings for its Box actions" in out
    assert "  num_steps=2048  (" in out and "  gamma=0.995  (" in out
    cfg = resolve_on_env(
        "ppo", "MountainCarContinuous-v0", [0, 1], 4096, set_values={"gamma": "0.995"}
    )
    line = reproduce_command({"config": cfg.to_dict(), "argv": ["x"], "message": ""})
    assert "num_steps" not in line and "--set gamma=0.995" in line, line  # derived again
    args = build_parser().parse_args(shlex.split(line)[1:])
    again = resolve_on_env(
        args.algo, args.env, seeds_from(args), args.steps, {}, parse_sets(args.sets)
    )
    assert again.to_dict() == cfg.to_dict(), line
