"""Input is checked before anything is created (issue 26 part 4).

Property: every `--set` key of every algorithm, `--steps`, `--seed-list`, `--tag` and the
contents of a `--config` file are either accepted or refused with one `error:` line and exit
status 2, and a refused input creates no run folder. The properties call the CLI in-process
with the launch replaced by a stub (an accepted input stops there); a small sample of accepted
settings really trains a few hundred steps on CartPole-v1 (in a subprocess, `cli` fixture).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from backflip import cli as backflip_cli
from backflip.algos import ALGOS, get_algo
from backflip.config import SECTIONS, RunOptions, TrainConfig, valid_keys

ENVS = {a: "CartPole-v1" for a in ALGOS} | {a: "Pendulum-v1" for a in ("ddpg", "td3", "sac")}
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Accepted(Exception):
    def __init__(self, cfg):
        self.cfg = cfg


@pytest.fixture
def stub_launch(monkeypatch):
    """`backflip train` stops where it would create the run, with the resolved config."""

    def launch_run(cfg, *args, **kwargs):
        raise Accepted(cfg)

    monkeypatch.setattr("backflip.launch.launch_run", launch_run)


def run_cli(args: list[str], home: Path):
    """(outcome, config or None, stderr): outcome is 'accepted' or the exit status."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = backflip_cli.main([*args, "--home", str(home), "--no-ask", "--no-progress"])
        except Accepted as a:
            return "accepted", a.cfg, err.getvalue()
    return code, None, err.getvalue()


def run_folders(home: Path) -> list[Path]:
    return [p for p in home.iterdir() if p.is_dir()] if home.exists() else []


def check(args: list[str]):
    """The property: accepted (a config that round-trips), or one error line and status 2;
    never a run folder."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "archive"
        outcome, cfg, stderr = run_cli(args, home)
        assert "Traceback" not in stderr, stderr
        if outcome == "accepted":
            assert TrainConfig.from_dict(cfg.to_dict()) == cfg
            assert math.isfinite(cfg.steps) and cfg.steps >= 1
        else:
            lines = [line for line in stderr.splitlines() if not line.startswith("warning: ")]
            assert outcome == 2, (args, stderr)
            assert len(lines) == 1 and lines[0].startswith("error: "), (args, stderr)
        assert not run_folders(home), args
        return outcome, cfg


# --- strategies -----------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2, 0.5, 1e-8, 1e19, 2**63, "1e5", "inf", "-inf", "nan", "1e400"]),
)
WORDS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "tanh", "relu", "adam", "rmsprop", "true", "no", "none", "cpu", "tpu"]),
)
SIZES = st.one_of(
    st.lists(st.integers(-5, 5000), max_size=10).map(lambda xs: ",".join(map(str, xs))),
    st.lists(st.integers(0, 300), max_size=4).map(lambda xs: str(tuple(xs))),
    st.lists(st.integers(0, 300), max_size=4).map(str),
    st.sampled_from(["()", "[]", "64,,64", "(64,)", "0", "-64,64", "1e3", "x"]),
)
VALUES = st.one_of(NUMBERS.map(str), WORDS, SIZES)


@pytest.mark.parametrize("algo", list(ALGOS))
@PROPERTY
@given(data=st.data())
def test_every_set_key_is_accepted_or_refused_in_one_line(stub_launch, algo, data):
    key = data.draw(st.sampled_from(valid_keys(get_algo(algo).config)), label="key")
    value = data.draw(VALUES, label="value")
    assume("\n" not in value and "\r" not in value)
    check(["train", algo, "--env", ENVS[algo], "--seeds", "1", "--set", f"{key}={value}"])


STEPS = st.one_of(
    NUMBERS.map(str), st.text(max_size=8), st.sampled_from(["1e19", "1e12", "0", "-5", "2.5"])
)


@PROPERTY
@given(steps=STEPS)
def test_steps(stub_launch, steps):
    assume(not steps.startswith("-") or steps[1:2].isdigit())  # argparse: -x is an option
    outcome, cfg = check(
        ["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", f"--steps={steps}"]
    )
    if outcome == "accepted":
        assert 1 <= cfg.steps <= 10**12


SEED_LISTS = st.one_of(
    st.lists(st.integers(-3, 2**40), min_size=0, max_size=5).map(lambda xs: ",".join(map(str, xs))),
    st.text(alphabet="0123456789,-+ .e", max_size=10),
    st.sampled_from(["-1", "1,,2", "1,1", "0", " 3 ", "1e3", "2147483648"]),
)


@PROPERTY
@given(seeds=SEED_LISTS)
def test_seed_list(stub_launch, seeds):
    outcome, cfg = check(["train", "ppo", "--env", "CartPole-v1", f"--seed-list={seeds}"])
    if outcome == "accepted":
        assert cfg.seeds and all(0 <= s < 2**31 for s in cfg.seeds)
        assert len(set(cfg.seeds)) == len(cfg.seeds)


@PROPERTY
@given(tag=st.one_of(st.text(max_size=80), st.sampled_from(["a,b", "50%", "a_b", "", " x"])))
def test_tag(stub_launch, tag):
    assume(not tag.startswith("-"))  # argparse: an option
    outcome, _ = check(["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", f"--tag={tag}"])
    if outcome == "accepted":
        assert "," not in tag and tag.strip() == tag and tag


def _yaml_like(d: dict) -> str:
    return "".join(f"{k}: {v}\n" for k, v in d.items())


CONFIG_KEYS = st.sampled_from(
    [f.name for f in dataclasses.fields(get_algo("ppo").config)]
    + [f.name for f in dataclasses.fields(RunOptions)]
    + [f"{s}.{f.name}" for s, c in SECTIONS.items() for f in dataclasses.fields(c)]
    + ["steps", "nope", "env", "1"]
)
CONFIG_FILES = st.one_of(
    st.tuples(st.just(".yaml"), st.dictionaries(CONFIG_KEYS, VALUES, max_size=3).map(_yaml_like)),
    st.tuples(
        st.just(".json"),
        st.dictionaries(CONFIG_KEYS, st.one_of(NUMBERS, WORDS), max_size=3).map(
            lambda d: json.dumps(d, default=str)
        ),
    ),
    st.tuples(st.sampled_from([".yaml", ".toml", ".json", ".txt"]), st.text(max_size=60)),
    st.tuples(st.sampled_from([".yaml", ".toml"]), st.binary(max_size=60)),
)


@PROPERTY
@given(config=CONFIG_FILES)
def test_config_file(stub_launch, config):
    suffix, contents = config
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"c{suffix}"
        path.write_bytes(contents if isinstance(contents, bytes) else contents.encode())
        check(["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--config", str(path)])


# --- a few accepted inputs really train -------------------------------------------------------

# modest values (small networks and rollouts): what an accepted setting does, not how long
GENTLE = {
    int: st.integers(1, 48),
    float: st.one_of(st.floats(0, 1), st.sampled_from([1e-4, 3e-3, 0.99])),
    bool: st.booleans(),
    str: st.sampled_from(["tanh", "relu", "adam", "rmsprop"]),
}


def gentle_sets(algo: str):
    cls = get_algo(algo).config
    hints = typing.get_type_hints(cls)
    keys = [f.name for f in dataclasses.fields(cls)]

    def value(key):
        tp = hints[key]
        if typing.get_origin(tp) is tuple:
            return st.lists(st.integers(1, 32), min_size=0, max_size=2).map(
                lambda xs: ",".join(map(str, xs)) or "()"
            )
        return GENTLE[tp].map(lambda v: str(v).lower() if isinstance(v, bool) else str(v))

    return st.lists(
        st.sampled_from(keys).flatmap(lambda k: value(k).map(lambda v: f"{k}={v}")),
        min_size=1,
        max_size=3,
    )


@pytest.mark.slow
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_sample_of_accepted_settings_trains(stub_launch, cli, home, data):
    algo = data.draw(st.sampled_from(["ppo", "a2c", "vpg", "cem", "dqn"]), label="algo")
    sets = data.draw(gentle_sets(algo), label="sets")
    args = ["train", algo, "--env", "CartPole-v1", "--seeds", "1", "--steps", "400"]
    args += [a for s in sets for a in ("--set", s)]
    outcome, _ = check([*args, "--set", "eval_episodes=2"])
    assume(outcome == "accepted")
    before = set(run_folders(home))
    proc = cli(*args, "--set", "eval_episodes=2", "--no-progress", "--no-ask", check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    (run,) = set(run_folders(home)) - before
    record = json.loads((run / "run.json").read_text())
    assert record["status"] in ("finished", "failed"), record["status"]
    for seed in run.glob("seeds/*/status.json"):
        status = json.loads(seed.read_text())
        # an accepted setting may still blow up (non-finite values), but says so
        assert status["status"] == "finished" or "non-finite" in status["error"], status


# --- the examples of issue 26, one by one ---------------------------------------------------------


def refused(args: list[str], *words: str) -> str:
    """Run in-process (launch stubbed): refused with one line naming `words`, no run folder."""
    outcome, _ = check(args)
    assert outcome == 2, args
    with tempfile.TemporaryDirectory() as tmp:
        stderr = run_cli(args, Path(tmp) / "archive")[2]
    for w in words:
        assert w in stderr, stderr
    return stderr


def accepted(args: list[str]):
    outcome, cfg = check(args)
    assert outcome == "accepted", args
    return cfg


PPO = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "1"]


def assert_one_line_refusal(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


def test_huge_steps_are_refused_before_a_run_folder_exists(cli, home):
    proc = cli(*PPO, "--steps", "1e19", "--no-ask", check=False)
    assert_one_line_refusal(proc, "--steps", "1e19")
    assert not run_folders(home)


def test_a_binary_config_file_is_not_text(cli, home, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_bytes(bytes(range(256)))
    proc = cli(*PPO, "--config", f, "--no-ask", check=False)
    assert_one_line_refusal(proc, "is not text")
    assert not run_folders(home)


@pytest.mark.parametrize(
    ("seed_list", "words"),
    [("-1", "--seed-list"), ("1,,2", "--seed-list"), ("1,1", "seed 1 is listed twice"),
     ("2147483648", "seeds must be whole numbers in [0, 2147483647]")],
)  # fmt: skip
def test_bad_seed_lists(stub_launch, seed_list, words):
    refused(["train", "ppo", "--env", "CartPole-v1", f"--seed-list={seed_list}"], words)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("vf_coef=-1", "vf_coef must be >= 0, got -1"),
        ("hidden=0", "hidden sizes must be in [1, 4,096], got 0"),
        ("hidden=-64,64", "hidden sizes must be in"),
        ("lr=inf", "lr must be a finite number >= 1e-10, got inf"),
        ("lr=1e-300", "lr must be >= 1e-10, got 1e-300"),  # no float32 weight would move
        ("clip=0", "clip must be > 0, got 0"),  # every ratio clipped: no policy update
        ("ent_coef=nan", "ent_coef must be a finite number, got nan"),
        ("clip=inf", "clip must be a finite number > 0"),
        ("minibatch_size=100000", "minibatch_size (100,000) is larger than the rollout"),
        ("hidden=64,,64", "empty item"),
        ("env.nan_reward_at=-2", "env.nan_reward_at must be -1 or >= 0"),
        ("gamma=1.5", "gamma must be in (0, 1]"),
    ],
)
def test_values_that_parse_but_make_no_sense_are_refused_by_name(stub_launch, setting, words):
    refused([*PPO, "--set", setting], words)


def test_an_unusual_value_is_accepted_with_a_warning(stub_launch):
    with tempfile.TemporaryDirectory() as tmp:
        outcome, cfg, stderr = run_cli([*PPO, "--set", "lr=5"], Path(tmp) / "a")
    assert outcome == "accepted" and cfg.hp.lr == 5
    assert "warning: lr=5 is unusually large" in stderr


def test_an_integer_box_action_space_is_refused(stub_launch):
    refused(
        ["train", "sac", "--env", "tests.fault_envs:IntegerBoxActions-v0", "--seeds", "1"],
        "Box action space of dtype int64",
    )


def test_tags_with_a_comma_are_refused_and_percent_or_underscore_filter_exactly(stub_launch):
    refused([*PPO, "--tag", "a,b"], "must not contain ','")
    refused([*PPO, "--tag", ""], "must not be empty")
    assert accepted([*PPO, "--tag", "50%"])
    from backflip.config import resolve
    from backflip.runs import index
    from backflip.runs.records import create_run

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = resolve("ppo", "CartPole-v1", [0], None).to_dict()
        name = {}  # real run folders (the index is checked against them), named r0..r3 here
        for i, tags in enumerate([["50%"], ["x50%y"], ["a_b"], ["axb", "other"]]):
            run_dir, _ = create_run(home, config, ["train"], tags=tags)
            name[run_dir.name] = f"r{i}"
        ids = {
            t: [name[r["id"]] for r in index.query(home, tag=t)] for t in ("50%", "a_b", "other")
        }
        assert ids == {"50%": ["r0"], "a_b": ["r2"], "other": ["r3"]}
        assert sorted(name[r["id"]] for r in index.query(home, grep="50%")) == ["r0", "r1"]


@pytest.mark.parametrize("algo", list(ALGOS))
def test_list_keys_prints_what_set_accepts(algo, capsys):
    """Every line of --list-keys, given back as --set, resolves to the same config."""
    env = ENVS[algo]
    assert backflip_cli.main(["train", algo, "--env", env, "--list-keys"]) == 0
    lines = [line.split()[0] for line in capsys.readouterr().out.splitlines() if "=" in line]
    assert any(line.startswith("hidden=") for line in lines)
    from backflip.config import parse_sets, resolve

    base = resolve(algo, env, [0], None)
    again = resolve(algo, env, [0], None, set_values=parse_sets(lines))
    assert again == base


def test_list_keys_syntax_and_the_python_syntax_both_parse(stub_launch):
    for text in ("(32,32)", "(32, 32)", "[32, 32]", "32,32", "(32,32,)"):
        assert accepted([*PPO, "--set", f"hidden={text}"]).hp.hidden == (32, 32), text
    assert accepted(["train", "cem", "--env", "CartPole-v1", "--set", "hidden=()"]).hp.hidden == ()


@pytest.mark.slow
def test_a_nan_observation_stops_the_seed_naming_it(cli, home):
    proc = cli(
        "train", "ppo", "--env", "tests.fault_envs:NaNObservationAfter-v0", "--seeds", "1",
        "--steps", "2048", "--no-progress", "--no-ask", check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (run,) = run_folders(home)
    status = json.loads((run / "seeds" / "0" / "status.json").read_text())
    assert status["status"] == "failed"
    assert status["error"].startswith("non-finite observation from the environment after env step")
    assert "observation[1] = nan" in status["error"] and "probability tensor" not in status["error"]
    findings = json.loads((run / "findings.json").read_text())["findings"]
    assert any(f["rule"] == "nonfinite" and "observation" in f["message"] for f in findings)


# --- data safety (issue 23 part 5) -----------------------------------------------------------

WORKER_COMMANDS = [
    PPO,
    ["rerun", "last"],
    ["resume", "last"],
    ["sweep", "ppo", "--env", "CartPole-v1", "--vary", "lr=1e-3,2e-3"],
    ["ablate", "ppo", "--env", "CartPole-v1"],
    ["plan", "run", "plan.yaml"],
    ["bench", "--quick"],
    ["prefs", "train", "ppo", "--env", "MovingDotLowDim-v0"],
]


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
@pytest.mark.parametrize("command", WORKER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_workers_below_one_are_refused_in_one_line(stub_launch, command, workers, tmp_path):
    home = tmp_path / "archive"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = backflip_cli.main([*command, f"--workers={workers}", "--home", str(home)])
        except SystemExit as e:
            code = e.code
        except Accepted:
            code = "accepted"
    lines = err.getvalue().splitlines()
    assert code == 2, (command, workers, err.getvalue())
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--workers" in lines[0], lines
    assert not run_folders(home)


def test_launch_refuses_zero_workers_before_creating_a_run(tmp_path):
    from backflip.config import resolve
    from backflip.errors import UserError
    from backflip.launch import launch_runs

    cfg = resolve("ppo", "CartPole-v1", [0], 256)
    with pytest.raises(UserError, match="workers must be at least 1"):
        launch_runs([cfg], tmp_path, ["train"], workers=0, progress=False)
    assert not run_folders(tmp_path)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--seeds", "3", "--seed-list", "4,5"], "--seed-list names the seeds: drop --seeds"),
        (["--seed-start", "2", "--seed-list", "4,5"], "drop --seed-start"),
        (["--inline", "--backend", "ray"], "--inline runs the seeds here"),
    ],
)
def test_contradictory_arguments_are_refused_before_anything_is_created(stub_launch, args, words):
    refused([*PPO, *args], words)


def test_an_empty_home_is_refused(tmp_path):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = backflip_cli.main([*PPO, "--home", "", "--no-progress"])
    assert code == 2 and "--home is empty" in err.getvalue()


@pytest.mark.parametrize(
    ("field", "value"),
    [("steps", "many"), ("seeds", "0,1"), ("hp", {"lr": "fast"}), ("env", [1]), ("algo", 3)],
)
def test_a_run_json_with_a_wrong_typed_field_leaves_the_others_listed(cli, home, field, value):
    """One record that does not parse is named as damaged, with the reason, in one line; the
    other runs list and show as usual (before: `runs` listed 0 of 3 with a traceback)."""
    import json as json_

    ids = []
    for _ in range(2):
        out = cli("train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "512",
                  "--no-progress", "--json").stdout  # fmt: skip
        ids.append(json_.loads(out)["id"])
    bad = home / ids[0]
    record = json_.loads((bad / "run.json").read_text())
    record["config"][field] = value
    (bad / "run.json").write_text(json_.dumps(record))
    # run.json.bak holds the good record: restored from it, said in one line
    restored = cli("runs")
    assert "restored it from run.json.bak" in restored.stderr and ids[0] in restored.stdout
    # with no good copy left (run.json.bak, the index): named as damaged, the other listed
    (bad / "run.json").write_text(json_.dumps(record))
    (bad / "run.json.bak").unlink()
    (home / "index.sqlite").unlink()
    listed = cli("runs", "--reindex")
    assert ids[1] in listed.stdout and "Traceback" not in listed.stderr + listed.stdout
    assert f"not indexed: {ids[0]}" in listed.stdout
    assert "does not parse" in listed.stdout or "is not a run record" in listed.stdout
    again = cli("runs")
    assert ids[1] in again.stdout and f"damaged: {ids[0]}" in again.stderr
    shown = cli("show", ids[0], check=False)
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1, shown.stderr
    assert cli("show", ids[1]).returncode == 0
    as_json = cli("runs", "--reindex", "--json").stdout  # JSON only on stdout
    assert [r["id"] for r in json_.loads(as_json)] == [ids[1]]


def test_a_private_seed_server_leaves_nothing_in_the_temp_folder(home, tmp_path):
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT, cli_env

    sockets = tmp_path / "sockets"
    env = {**cli_env(home), "BACKFLIP_WARM": "0", "BACKFLIP_WARM_DIR": str(sockets)}
    subprocess.run(
        [sys.executable, "-m", "backflip", *PPO, "--steps", "512", "--seeds", "1"],
        env=env, cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while sockets.exists() and list(sockets.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)  # the private server ends just after its command
    assert not sockets.exists() or not list(sockets.iterdir()), list(sockets.iterdir())
