"""`backflip preflight ENV_ID`: checks an environment before training, on real Gymnasium envs."""

import json

import pytest
from PIL import Image


def preflight(cli, *args, check=True):
    proc = cli("preflight", *args, "--json", check=check)
    return json.loads(proc.stdout) if check else proc


def rules(out) -> dict:
    return {f["rule"]: f for f in out["findings"]}


def test_cartpole_report_and_its_findings(cli):
    out = preflight(cli, "CartPole-v1")
    assert out["target"] == "CartPole-v1"
    rep = out["report"]
    rnd = rep["random_policy"]
    assert rnd["episodes"] == 20 and rnd["terminated"] == 20 and rnd["truncated"] == 0
    assert 9 <= rnd["length_min"] <= rnd["length_median"] <= rnd["length_max"] < 200
    assert 10 < rnd["return_mean"] < 50 and rnd["return_std"] > 0
    assert rep["rewards"]["min"] == rep["rewards"]["max"] == 1.0
    dims = rep["observations"]["dims"]
    assert len(dims) == 4 and dims[1]["high_bound"] == "inf"
    assert rep["determinism"] == {"reset_same_seed": True, "rollout_diverged_at": None}
    assert rep["env_checker"]["passed"] is True
    found = rules(out)
    assert found["preflight-obs-unbounded"]["severity"] == "info"
    # infinite bounds are said once, as that info: not also as two of the checker's warnings
    assert not [f for f in out["findings"] if f["severity"] != "info"], out["findings"]
    assert len(rep["env_checker"]["warnings"]) == 2  # what the checker said is still recorded
    assert "preflight-obs-scale" not in found and "preflight-no-signal" not in found
    text = cli("preflight", "CartPole-v1").stdout
    assert (
        "random policy, 20 episodes" in text and "reset with the same seed: deterministic" in text
    )
    assert "WARNING" not in text and "passed (2 note(s) on infinite bounds" in text


def test_an_atari_id_resets_deterministically_through_backflips_wrappers(cli, tmp_path):
    """EpisodicLife took FireReset's own steps after a reset for game progress: a second
    reset(seed=s) continued the game instead of restarting it ("NOT deterministic")."""
    pytest.importorskip("ale_py")
    out = preflight(cli, "BreakoutNoFrameskip-v4", "--episodes", "1", "--max-steps", "300",
                    "--sheet", tmp_path / "s.png")  # fmt: skip
    assert out["report"]["determinism"]["reset_same_seed"] is True, out["report"]["determinism"]
    assert "preflight-reset-nondeterministic" not in rules(out)


def test_scaled_observations_and_rewards_are_flagged(cli):
    out = preflight(
        cli, "Pendulum-v1", "--set", "env.obs_scale=1000", "--set", "env.obs_shift=500",
        "--set", "env.reward_scale=1000", "--episodes", "3",
    )  # fmt: skip
    found = rules(out)
    assert found["preflight-obs-scale"]["severity"] == "warning"
    assert found["preflight-obs-scale"]["evidence"]["dims"] == [0, 1, 2]
    assert found["preflight-reward-scale"]["severity"] == "warning"
    assert out["report"]["random_policy"]["truncated"] == 3  # Pendulum only ends at its limit


@pytest.mark.parametrize(("env_id", "slots"), [("Taxi-v4", 500), ("Blackjack-v1", 32 + 11 + 2)])
def test_one_hot_slots_a_random_look_never_lit_are_unseen_values_not_dead_dimensions(
    cli, env_id, slots
):
    """Taxi's 500 states one-hot: a warning that 280 'dimensions carry no information'."""
    found = rules(preflight(cli, env_id))
    assert "preflight-obs-constant" not in found
    unseen = found["preflight-obs-values-unseen"]
    assert unseen["severity"] == "info" and f"of the {slots} one-hot slots" in unseen["message"]
    assert 0 < len(unseen["evidence"]["dims"]) < slots


def test_a_random_policy_that_never_sees_a_different_reward(cli):
    found = rules(preflight(cli, "MountainCar-v0", "--episodes", "3"))
    assert found["preflight-no-signal"]["severity"] == "warning"
    assert "RL likely won't" in found["preflight-no-signal"]["message"]


def test_unseeded_env_is_reported_nondeterministic(cli):
    found = rules(preflight(cli, "tests.fault_envs:Unseeded-v0", "--episodes", "3"))
    assert found["preflight-reset-nondeterministic"]["severity"] == "warning"
    assert found["preflight-step-nondeterministic"]["severity"] == "warning"
    assert found["preflight-env-checker"]["severity"] == "error"  # Gymnasium's checker agrees


def test_image_observations_get_a_contact_sheet(cli, tmp_path):
    sheet = tmp_path / "sheet.png"
    out = preflight(cli, "tests.fault_envs:MovingSquare-v0", "--episodes", "2", "--sheet", sheet)
    assert out["report"]["contact_sheet"] == str(sheet)
    img = Image.open(sheet)
    assert img.size[0] > 4 * 64 and img.mode == "RGB"  # four 64-px tiles (32 px, upscaled 2×)
    assert rules(out)["preflight-image-observations"]["severity"] == "info"


def test_atari_style_frameskip_and_sticky_actions_warn(cli, tmp_path):
    out = preflight(cli, "tests.fault_envs:SkippyPong-v0", "--episodes", "1", "--sheet",
                    tmp_path / "s.png")  # fmt: skip
    f = rules(out)["preflight-atari-settings"]
    assert f["severity"] == "warning" and "sticky actions" in f["message"]
    assert out["report"]["atari"] == {"frameskip": [2, 5], "repeat_action_probability": 0.25}


def test_bad_input_is_one_line(cli):
    for args, words in (
        (["NoSuchEnv-v0"], "unknown environment"),
        (["CartPole-v1", "--set", "lr=3"], "env.* options only"),
        (["CartPole-v1", "--set", "env.nope=1"], "unknown key env.nope"),
    ):
        proc = cli("preflight", *args, check=False)
        assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1
