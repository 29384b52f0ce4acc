"""Bad input gets one clear line on stderr and exit status 2 — never a traceback."""

import json
import os

import pytest


def assert_clean_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    # one error line, after any `note:` lines of repairs the archive made on its own
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


def test_unknown_algorithm(cli):
    assert_clean_error(
        cli("train", "ppoo", "--env", "CartPole-v1", check=False),
        "unknown algorithm 'ppoo'",
        "did you mean ppo",
    )


def test_unknown_env(cli):
    assert_clean_error(
        cli("train", "ppo", "--env", "CartPol-v1", check=False),
        "unknown environment 'CartPol-v1'",
        "CartPole-v1",
    )


def test_action_space_the_algorithm_cannot_handle(cli):
    # too many combinations for one Discrete: PPO, A2C and VPG act in it with one categorical
    # per part (tests/test_user_env_spaces.py); DQN is told so in one line
    proc = cli("train", "dqn", "--env", "tests.fault_envs:MultiDiscreteActions-v0", check=False)
    assert_clean_error(
        proc,
        "dqn needs a Discrete action space",
        "MultiDiscreteActions-v0 has MultiDiscrete([16 16 16]) (4,096 combinations, more than "
        "the 256 read as one Discrete; ppo, a2c and vpg act in it with one categorical per part)",
    )
    # a small one is read as one Discrete, but SAC needs a Box: said of the env's own space
    proc = cli("train", "sac", "--env", "tests.user_envs:Switches-v0", check=False)
    assert_clean_error(
        proc, "sac needs a Box action space", "Switches-v0 has MultiDiscrete([3 2], start=[1 0])"
    )
    # from preferences: refused before the env's settings are derived (one line, not a dozen
    # lines of derived settings and then the error)
    proc = cli("prefs", "train", "ddpg", "--env", "Acrobot-v1", "--steps", "2000", check=False)
    assert_clean_error(proc, "ddpg needs a Box action space; Acrobot-v1 has Discrete(3)")


@pytest.mark.parametrize("command", [("train", "ppo"), ("prefs", "train", "ppo"), ("preflight",)])
def test_an_env_that_needs_a_package_not_installed(cli, command):
    """Gymnasium's `tabular/Blackjack-v0` without jax printed ModuleNotFoundError's traceback."""
    env = "tests.fault_envs:NeedsMissingPackage-v0"
    args = (*command, env) if command == ("preflight",) else (*command, "--env", env)
    assert_clean_error(
        cli(*args, check=False),
        "NeedsMissingPackage-v0 cannot be made: it needs the module 'backflip_no_such_package'",
    )


@pytest.mark.parametrize("command", [("train", "ppo"), ("prefs", "train", "ppo")])
@pytest.mark.parametrize(
    ("env", "said"),
    [
        ("ArrayReward-v0", "'s step() returned a reward of type ndarray of shape (1,)"),
        ("OldGymApi-v0", "'s step() returned a tuple of 4 (ndarray, float, bool, dict) (the old"),
        (
            "WrongShapeObservation-v0",
            "'s reset() returned an observation of shape (1, 1); its "
            "observation space is Box(-1.0, 1.0, (1,), float32)",
        ),
        ("OneAction-v0", " has one action (Discrete(1)): there is no choice for a policy"),
    ],
)
def test_an_env_off_gymnasiums_api_is_named_at_launch(cli, home, command, env, said):
    """A reward array, the old Gym API's 4-tuple or observations of another shape than the
    space's failed the seed with NumPy's "setting an array element with a sequence", "not enough
    values to unpack" or "Output array has wrong dimensionality" (a traceback from `prefs`); a
    single action, with the normalized entropy's NaN."""
    proc = cli(*command, "--env", f"tests.fault_envs:{env}", "--steps", "500", check=False)
    assert_clean_error(proc, f"tests.fault_envs:{env}{said}")
    assert not list(home.glob("2*")), "refused before a run was created"


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "cem"])
def test_actions_squashed_into_infinite_bounds_are_refused(cli, algo):
    """Squashed into Box(-inf, inf) every action was NaN, and the seed failed blaming a
    'non-finite reward from the environment'."""
    env = "tests.fault_envs:InfiniteBoxActions-v0"
    assert_clean_error(
        cli("train", algo, "--env", env, check=False),
        f"{algo} squashes its actions into the action space's bounds",
        "are not finite (Box(-inf, inf, (2,), float32))",
    )


def test_bad_set_key_lists_valid_keys(cli):
    proc = cli("train", "ppo", "--env", "CartPole-v1", "--set", "learning_rate=1", check=False)
    assert_clean_error(proc, "unknown key 'learning_rate'", "valid keys:", "gae_lambda")


def test_bad_set_value(cli):
    assert_clean_error(
        cli("train", "ppo", "--env", "CartPole-v1", "--set", "epochs=many", check=False),
        "bad value for epochs",
        "not an integer",
    )


def test_unknown_run_id(cli):
    assert_clean_error(cli("show", "nope", check=False), "no run 'nope'")


def test_unwritable_archive_root(cli, tmp_path):
    ro = tmp_path / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores permissions: use a path under a regular file
        target = tmp_path / "a-file"
        target.write_text("")
        home = target / "archive"
    else:
        home = ro / "archive"
    assert_clean_error(
        cli("train", "ppo", "--env", "CartPole-v1", "--home", home, check=False), "is not writable"
    )


def test_corrupt_run_json(cli, home):
    run = home / "20260101-000000-dead"
    run.mkdir()
    (run / "run.json").write_text('{"id": "20260101-000000-dead", "config": {')
    proc = cli("show", "20260101-000000-dead", check=False)
    assert_clean_error(proc, "is damaged", "run.json is truncated", "no good copy")
    # and the corrupt file is left as it was: nothing is lost
    assert (run / "run.json").read_text().endswith("{")


@pytest.mark.parametrize("args", [["--steps", "0"], ["--steps", "abc"], ["--seeds", "0"]])
def test_bad_budget_arguments(cli, args):
    proc = cli("train", "ppo", "--env", "CartPole-v1", *args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_bad_config_file(cli, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("- a list, not a mapping\n")
    assert_clean_error(
        cli("train", "ppo", "--env", "CartPole-v1", "--config", f, check=False),
        "must hold a mapping",
    )


def test_runs_json_on_empty_archive(cli):
    assert json.loads(cli("runs", "--json").stdout) == []


@pytest.mark.parametrize(
    "args",
    [
        ["train", "ppo", "--env", "CartPole-v1", "--seeds", "abc"],
        ["train", "ppo", "--env", "CartPole-v1", "--workers", "x"],
        ["prefs", "train", "ppo", "--env", "MovingDotLowDim-v0", "--labels", "q"],
        ["trian"],
        ["runs", "--bogus"],
    ],
)
def test_arguments_argparse_refuses_are_one_line_too(cli, args):
    assert_clean_error(cli(*args, check=False), "--help")


@pytest.mark.parametrize("command", [("train", "ppo"), ("prefs", "train", "ppo")])
def test_an_atari_protocol_warning_is_said_once_in_one_line(cli, command):
    """Gymnasium's ALE ids differ from the papers' protocol: the launch says so once, as one
    `warning:` line; the looks at the env before it (the action kind the settings read, the
    settings derived for a preference run) say nothing. (They printed Python's warning with a
    file name and a line of source, up to three times.) The run is then refused for a device
    this machine lacks, so no training runs."""
    proc = cli(*command, "--env", "ALE/Pong-v5", "--steps", "1024", "--seeds", "1",
               "--set", "device=cuda:7", check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "sticky actions" in line]
    assert len(said) == 1 and said[0].startswith("warning: ALE/Pong-v5 uses sticky"), said
    assert "AtariProtocolWarning" not in proc.stderr
