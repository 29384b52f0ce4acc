"""Envs a user brings: observations of any layout, size and dtype get a network that fits them,
or one line before the run is created (never a PyTorch shape error); the reward model reads
what the policy reads (docs/preferences.md, "Your own env")."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from backflip.config import resolve
from backflip.envs import make_env
from backflip.errors import UserError
from tests.user_envs import Frames


@pytest.fixture(autouse=True, scope="module")
def registered():
    ids = {
        "test/Grid10Bool-v0": {"shape": (10, 10, 4), "dtype": "bool"},  # MinAtar's layout
        "test/Grid12Float-v0": {"shape": (12, 12, 3), "dtype": "float32"},
        "test/Frame64First-v0": {"shape": (3, 64, 64), "dtype": "uint8", "last": False},
        "test/Frame210Last-v0": {"shape": (210, 160, 3), "dtype": "uint8", "n": 60},
    }
    for env_id, kwargs in ids.items():
        gym.register(env_id, entry_point=Frames, kwargs=kwargs, max_episode_steps=50)
    yield
    for env_id in ids:
        gym.registry.pop(env_id)


@pytest.mark.parametrize(
    ("env_id", "shape"),
    [
        ("test/Grid10Bool-v0", (4, 10, 10)),
        ("test/Grid12Float-v0", (3, 12, 12)),
        ("test/Frame64First-v0", (3, 64, 64)),
        ("test/Frame210Last-v0", (3, 210, 160)),
    ],
)
def test_frames_of_any_layout_are_read_channels_first_as_bytes(env_id, shape):
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == shape and obs.shape == shape and obs.dtype == np.uint8
    assert obs.max() == 255 and env.observation_space.contains(obs)


@pytest.mark.parametrize(
    ("env_id", "cnn", "reward_cnn"),
    [
        ("test/Grid10Bool-v0", "small", "small"),
        ("test/Frame64First-v0", "nature", "paper"),
        ("test/Frame210Last-v0", "nature", "paper"),
    ],
)
def test_the_policy_and_the_reward_model_get_networks_that_fit(env_id, cnn, reward_cnn):
    import torch

    from backflip.nets import ActorCritic, image_encoder
    from backflip.prefs.reward_model import RewardModel
    from backflip.prefs.reward_model import reward_cnn as pick

    env = make_env(env_id)
    shape = env.observation_space.shape
    assert image_encoder(shape) == cnn and pick(shape) == reward_cnn
    obs = np.stack([env.reset(seed=s)[0] for s in range(3)])
    ac = ActorCritic(shape, env.action_space)
    logits, value = ac(torch.as_tensor(obs))
    assert logits.shape == (3, 2) and value.shape == (3,)
    model = RewardModel(env.observation_space, env.action_space, members=2)
    model.observe(obs)
    assert model.reward(obs, np.array([0, 1, 0])).shape == (3,)


@pytest.mark.parametrize(
    ("env_id", "budget"), [("test/Grid10Bool-v0", False), ("test/Frame210Last-v0", True)]
)
def test_large_frames_get_the_reward_cnn_a_cpu_can_train(env_id, budget):
    """A 3,000-step look at ALE/Breakout-v5 (no preset) had ~40 minutes of pretraining ahead
    on the vector defaults: frames the keypoints CNN reads get the CPU Atari preset's
    budget (every 4th frame, 150 pretraining updates, 1 per 1,000 steps), each with why."""
    from backflip.prefs.derive import FRAME_BUDGET, derived_settings, look
    from backflip.prefs.presets import CPU_ATARI

    derived = derived_settings(look(env_id, None), 100_000)
    for key, (value, _) in FRAME_BUDGET.items():
        assert CPU_ATARI["prefs"][key.removeprefix("prefs.")] == value  # one budget, the preset's
        if budget:
            assert derived[key][0] == value and "210x160 frames" in derived[key][1]
        else:  # 3x3 convolutions on a 10x10 grid cost little: the defaults
            assert key not in derived


def test_a_cnn_too_large_for_the_frames_is_refused_in_one_line(cli, home):
    for head, setting, says in (
        (("train", "ppo"), "cnn=nature", "cnn=nature needs frames of at least 36x36"),
        (("prefs", "train", "ppo"), "prefs.cnn=paper", "prefs.cnn=paper needs frames"),
    ):
        proc = cli(*head, "--env", "tests.user_envs:Grid10-v0", "--set", setting,
                   "--steps", "512", check=False)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not [p for p in home.iterdir() if p.is_dir() and p.name[0].isdigit()]


def test_training_on_small_channels_last_booleans_runs_end_to_end(cli, home):
    """The report of the issue: a 10x10x4 boolean env failed 1.7 s into `backflip train ppo`
    with PyTorch's 'Kernel size can't be greater than actual input size'. Now it trains, and a
    preference run on it too (the small reward CNN, one output per action)."""
    import json

    proc = cli("train", "ppo", "--env", "tests.user_envs:Grid10-v0", "--seeds", "1",
               "--steps", "2048", "--json", "--no-progress")  # fmt: skip
    assert json.loads(proc.stdout)["status"] == "finished"
    proc = cli("prefs", "train", "ppo", "--env", "tests.user_envs:Grid10-v0", "--seeds", "1",
               "--steps", "2048", "--labels", "20", "--set", "prefs.pretrain_updates=10",
               "--json", "--no-progress")  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["status"] == "finished", proc.stderr
    assert record["config"]["prefs"]["cnn"] == "small"
    assert record["config"]["prefs"]["action_input"] == "heads"
    assert "prefs.cnn=small: 10x10 frames" in proc.stderr


def test_structured_observations_are_flattened_or_refused_naming_the_space():
    # Blackjack's Tuple(Discrete(32), Discrete(11), Discrete(2)): one-hot parts, flattened
    env = make_env("Blackjack-v1")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (45,) and obs.dtype == np.float32 and obs.sum() == 3

    class Texty(gym.Env):
        observation_space = gym.spaces.Dict(
            {"pos": gym.spaces.Box(-1, 1, (2,)), "mission": gym.spaces.Text(20)}
        )
        action_space = gym.spaces.Discrete(2)

    class FrameAndMore(gym.Env):
        observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
                "direction": gym.spaces.Discrete(4),
            }
        )
        action_space = gym.spaces.Discrete(2)

    for cls, says in (
        (Texty, "Text observations are not numbers"),
        (FrameAndMore, "holds a frame"),
    ):
        gym.register("test/Structured-v0", entry_point=cls)
        try:
            with pytest.raises(UserError) as e:
                make_env("test/Structured-v0")
            assert says in str(e.value) and "Dict(" in str(e.value)
        finally:
            gym.registry.pop("test/Structured-v0")


@pytest.mark.parametrize(
    ("shape", "dtype", "layout"),
    [
        ((3, 4), np.float32, "flatten"),  # a small matrix of features, not a picture
        ((4, 4, 3), np.uint8, "flatten"),  # 4x4 pixels: below the small CNN's 5x5
        ((5, 5), np.uint8, "channels_last"),
        ((3, 5, 5), np.uint8, "channels_first"),
    ],
)
def test_boxes_too_small_for_any_cnn_are_vectors(shape, dtype, layout):
    """A (3, 4) float Box was read as a frame and the seed failed in PyTorch: "Kernel size
    can't be greater than actual input size"."""
    from backflip.cnns import SMALLEST_FRAME
    from backflip.envs.wrappers import observation_layout

    assert SMALLEST_FRAME == 5
    assert observation_layout(gym.spaces.Box(0, 1, shape, dtype)) == layout


def test_a_small_matrix_observation_trains_end_to_end(cli):
    for command in (("train", "ppo"), ("prefs", "train", "ppo"), ("train", "dqn")):
        extra = ("--labels", "10") if command[0] == "prefs" else ()
        cli(*command, "--env", "tests.fault_envs:SmallMatrix-v0", "--steps", "600",
            "--seeds", "1", "--no-progress", *extra)  # fmt: skip


def test_the_layout_guess_can_be_overridden():
    cfg = resolve("ppo", "test/Grid10Bool-v0", [0], 1000, set_values={"env.obs_layout": "vector"})
    env = make_env("test/Grid10Bool-v0", cfg.env)
    assert env.observation_space.shape == (400,)
    with pytest.raises(UserError, match=r"env\.obs_layout must be one of"):
        resolve("ppo", "CartPole-v1", [0], 1000, set_values={"env.obs_layout": "sideways"})


def test_a_derived_setting_the_user_replaced_is_said_as_replaced(cli):
    """The launch lines list what was derived from the env; one the user set is said with the
    value the run uses, not the derived one it does not (the listing said `absorb_steps=25`
    beside a horizon line of 100)."""
    out = cli("prefs", "train", "ppo", "--env", "InvertedPendulum-v5", "--steps", "4000",
              "--set", "prefs.absorb_steps=100", "--list-keys").stdout  # fmt: skip
    assert "#   prefs.absorb_steps=100: yours (derived: 25," in out
    assert "prefs.absorb_steps=25" not in out
    assert (
        "absorbing state (the last observation, reward 0, one learned value) for 100 steps" in out
    )
    assert "#   prefs.segment_length=25: clips of 25 steps" in out  # kept: said as derived


def test_small_multidiscrete_and_multibinary_actions_are_one_discrete():
    """Every combination of a MultiDiscrete (with its `start`) or MultiBinary action space is one
    Discrete action, row-major, and back exactly; a space too large to read so is refused in one
    line naming its size. A Discrete that starts elsewhere than 0 is shifted to 0."""
    from backflip.envs.wrappers import JointDiscreteAction

    class Acts(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)

        def __init__(self, space=None):
            self.action_space = space

    cases = [
        (gym.spaces.MultiDiscrete([3, 2], start=[1, 0]), 6),
        (gym.spaces.MultiDiscrete([[2, 2], [3, 1]]), 12),
        (gym.spaces.MultiBinary(4), 16),
        (gym.spaces.MultiBinary([2, 2]), 16),
    ]
    for space, n in cases:
        env = JointDiscreteAction(Acts(space))
        assert env.action_space == gym.spaces.Discrete(n)
        seen = {tuple(np.ravel(env.action(i))) for i in range(n)}
        assert len(seen) == n  # every combination, once
        assert all(space.contains(env.action(i)) for i in range(n))
    shifted = JointDiscreteAction(Acts(gym.spaces.Discrete(3, start=-1)))
    assert shifted.action_space == gym.spaces.Discrete(3)
    assert [shifted.action(i) for i in range(3)] == [-1, 0, 1]
    from backflip.envs.wrappers import OneHotObservation

    class Seen(gym.Env):  # observations -1, 0, 1
        observation_space = gym.spaces.Discrete(3, start=-1)
        action_space = gym.spaces.Discrete(2)

    one_hot = OneHotObservation(Seen())
    assert [one_hot.observation(o).tolist() for o in (-1, 1)] == [[1, 0, 0], [0, 0, 1]]
    gym.register("test/Wide-v0", entry_point=Acts, kwargs={"space": gym.spaces.Discrete(999, 5)})
    try:  # a Discrete is never too large: it is only shifted
        assert make_env("test/Wide-v0").action_space == gym.spaces.Discrete(999)
    finally:
        gym.registry.pop("test/Wide-v0")
    assert make_env("CartPole-v1").action_space == gym.spaces.Discrete(2)  # unwrapped
    first = JointDiscreteAction(Acts(gym.spaces.MultiDiscrete([3, 2], start=[1, 0])))
    assert [first.action(i).tolist() for i in range(3)] == [[1, 0], [1, 1], [2, 0]]
    # more combinations than one Discrete holds: a flat MultiDiscrete from 0 (the factorized
    # head's), each action sent back as the env's, exactly
    from backflip.envs.wrappers import FlatMultiDiscreteAction

    gym.register("test/Huge-v0", entry_point=Acts, kwargs={"space": gym.spaces.MultiBinary(9)})
    try:
        huge = make_env("test/Huge-v0")
        assert huge.action_space == gym.spaces.MultiDiscrete([2] * 9)
    finally:
        gym.registry.pop("test/Huge-v0")
    grid = gym.spaces.MultiDiscrete([[9, 9], [9, 2]], start=[[1, 0], [-4, 0]])
    flat = FlatMultiDiscreteAction(Acts(grid))
    assert flat.action_space == gym.spaces.MultiDiscrete([9, 9, 9, 2])
    for a in ([0, 0, 0, 0], [8, 8, 8, 1], [3, 1, 4, 1]):
        sent = flat.action(np.array(a))
        assert grid.contains(sent) and (sent - grid.start).ravel().tolist() == a


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_an_env_of_multibinary_observations_and_multidiscrete_actions_learns(cli, algo):
    """A user's env of switches (tests/user_envs.py: best return ~149, random ~75) trains with
    the discrete algorithms; seed 0, a fixed budget, a return threshold."""
    import json

    proc = cli("train", algo, "--env", "tests.user_envs:Switches-v0", "--seeds", "1",
               "--steps", "20000", "--json", "--no-progress")  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["status"] == "finished", proc.stderr
    assert record["seeds"][0]["final_eval_return"] >= 140


@pytest.mark.parametrize("algo", ["ppo", "a2c", "vpg"])
def test_a_multidiscrete_space_too_large_for_one_discrete_learns_with_one_head_per_part(cli, algo):
    """MultiDiscrete([6, 6, 6, 6]) (1,296 combinations, tests/user_envs.py: Dials-v0) was
    refused; the on-policy algorithms now act in it with one categorical per part (the
    factorized head, as SB3's MultiCategorical). Seed 0, a fixed budget, a return threshold:
    random ~8 of 48, the best 48."""
    import json

    steps = {"ppo": 30000, "a2c": 80000, "vpg": 30000}[algo]  # A2C's 5-step rollouts: slower
    proc = cli("train", algo, "--env", "tests.user_envs:Dials-v0", "--seeds", "1",
               "--steps", str(steps), "--json", "--no-progress")  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["status"] == "finished", proc.stderr
    assert record["seeds"][0]["final_eval_return"] >= 40, record["seeds"][0]
    if algo == "ppo":  # an algorithm without the head: one line naming the space and who can
        bad = cli("train", "dqn", "--env", "tests.user_envs:Dials-v0", check=False)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert "1,296 combinations, more than the 256" in bad.stderr


def test_a_preference_run_on_multidiscrete_actions_learns(cli):
    """The reward model reads the joint action one-hot, the oracle's clips show the switches."""
    import json

    proc = cli("prefs", "train", "ppo", "--env", "tests.user_envs:Switches-v0", "--seeds", "1",
               "--steps", "20000", "--json", "--no-progress")  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["status"] == "finished", proc.stderr
    assert record["seeds"][0]["final_eval_return"] >= 140


@pytest.mark.parametrize(
    ("algo", "env", "bar"),
    [("sac", "Reach2x2-v0", -2), ("ppo", "Reach2x2-v0", None), ("sac", "Aim-v0", -0.5),
     ("ppo", "Aim-v0", None)],
)  # fmt: skip
def test_box_actions_of_several_axes_or_none_are_emitted_flat_and_reshaped(cli, algo, env, bar):
    """A (2, 2) Box of actions crashed every algorithm ('could not broadcast (1,4) into
    (1,2,2)'), a scalar one reached the env as shape (1,); the policies now emit flat vectors,
    reshaped for the env. SAC learns both (seed 0: best 0; random ~-27 and ~-13)."""
    import json

    proc = cli("train", algo, "--env", f"tests.user_envs:{env}", "--seeds", "1",
               "--steps", "6000", "--json", "--no-progress")  # fmt: skip
    record = json.loads(proc.stdout)
    assert record["status"] == "finished", proc.stderr
    if bar is not None:
        assert record["seeds"][0]["final_eval_return"] >= bar


def test_an_envs_own_vector_env_is_used_only_when_its_spaces_need_no_adapting():
    """A vector entry point hands over raw spaces: one whose observations need one-hot (or whose
    actions need joining) is replaced by copies of the adapted env."""
    from backflip.envs import make_vec

    class Walk(gym.Env):
        observation_space = gym.spaces.Discrete(5)
        action_space = gym.spaces.MultiDiscrete([2, 2])

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return 0, {}

        def step(self, action):
            return int(action[0]), 0.0, False, False, {}

    def vector(num_envs, **kwargs):
        return gym.vector.SyncVectorEnv([Walk for _ in range(num_envs)])

    gym.register("test/VecWalk-v0", entry_point=Walk, vector_entry_point=vector)
    try:
        envs = make_vec("test/VecWalk-v0", 4)
        assert envs.single_observation_space == gym.spaces.Box(0.0, 1.0, (5,), np.float32)
        assert envs.single_action_space == gym.spaces.Discrete(4)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (4, 5) and (obs.sum(1) == 1).all()
        obs, *_ = envs.step(np.array([3, 2, 1, 0]))  # joint 3 = [1, 1]: walks to 1
        assert obs.argmax(1).tolist() == [1, 1, 0, 0]
    finally:
        gym.registry.pop("test/VecWalk-v0")


def test_a_scalar_observation_is_a_vector_of_one_number(cli):
    """Box(-1, 1, ()) crashed every network ('mat1 and mat2 shapes cannot be multiplied');
    flattened to (1,) it trains: PPO seed 0 reaches the best return, 20."""
    import json

    from tests.user_envs import Sign  # noqa: F401 — registers Sign-v0

    env = make_env("Sign-v0")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (1,) and obs.shape == (1,)
    proc = cli("train", "ppo", "--env", "tests.user_envs:Sign-v0", "--seeds", "1",
               "--steps", "5000", "--json", "--no-progress")  # fmt: skip
    assert json.loads(proc.stdout)["seeds"][0]["final_eval_return"] >= 19


def test_an_env_whose_episodes_never_end_is_evaluated_up_to_a_cut(cli, home):
    """An env without a time limit whose episodes never end (a continuing task) held its seed
    in the final greedy evaluation for ever, training long finished."""
    import json

    from backflip.seedrun import EVAL_MAX_STEPS
    from backflip.telemetry import read_metrics

    proc = cli("train", "ppo", "--env", "tests.fault_envs:NeverEnds-v0", "--steps", "512",
               "--seeds", "1", "--set", "eval_episodes=2", "--json", "--no-progress",
               timeout=180)  # fmt: skip
    record = json.loads(proc.stdout)
    seed = record["seeds"][0]
    assert seed["status"] == "finished"
    assert seed["final_eval_returns"] == [float(EVAL_MAX_STEPS)] * 2  # reward 1 a step, cut
    folder = home / record["id"] / "seeds" / "0"
    said = f"2 of 2 greedy evaluation episodes cut at {EVAL_MAX_STEPS:,} steps"
    assert said in (folder / "stderr.log").read_text()
    metrics = read_metrics(folder / "metrics.csv")
    assert metrics["eval/cut"][1][-1] == 2
    assert metrics["eval/len_mean"][1][-1] == EVAL_MAX_STEPS
