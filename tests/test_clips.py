"""What a person is shown of an env: clips and videos at its real speed, a frame every k-th step.

Hopper steps 125 times a simulated second: its 25-step clips lasted 0.2 s of play and the page
showed them at 60 frames a second (0.48x), while every step of a person-labeled run paid a 50 ms
software render. A person's clips now last 1.5 s (the paper's continuous-control clips) and are
rendered every k-th step, played at the env's speed (`video.playback`).
"""

from __future__ import annotations

import io
import json
import time

import gymnasium as gym
import numpy as np
import pytest

from backflip.envs import make_env, steps_per_second
from backflip.envs.horizon import FixedHorizon
from backflip.envs.wrappers import RenderFrames, rendered
from backflip.prefs.derive import EnvFacts, derived_settings
from backflip.prefs.segments import SegmentRecorder, clip_frames
from backflip.video import PLAYBACK_FPS, playback
from tests.conftest import stop_command
from tests.test_prefs import start_cli


def real_speed(env_id: str) -> float:
    env = make_env(env_id)
    try:
        return steps_per_second(env)
    finally:
        env.close()


def test_an_env_plays_at_its_own_speed_and_fast_ones_are_shown_every_kth_step():
    pytest.importorskip("mujoco")
    pytest.importorskip("ale_py")
    speeds = {
        "Hopper-v5": 125.0,  # MuJoCo: 1 / (time step x frame skip)
        "HalfCheetah-v5": 20.0,
        "CartPole-v1": 50.0,
        "PongNoFrameskip-v4": 15.0,  # 60 Hz, 4 emulator frames per agent step (preprocessing)
        "ALE/Pong-v5": 15.0,  # the emulator's own frame skip of 4 (its metadata says 30)
    }
    with pytest.warns():  # ALE/Pong-v5's protocol warning
        assert {e: real_speed(e) for e in speeds} == speeds
    assert playback(125.0) == (5, 25.0)
    assert playback(50.0) == (2, 25.0)
    assert playback(30.0) == (1, 30.0) and playback(15.0) == (1, 15.0)
    assert playback(4.0) == (1, 4.0)  # FrozenLake: slow envs are not sped up
    assert playback(125.0, stride=1) == (1, 125.0)  # prefs.render_stride chosen by the user
    for speed in (7.0, 31.0, 60.0, 61.0, 125.0, 500.0):
        stride, fps = playback(speed)
        assert fps <= PLAYBACK_FPS and (stride == 1 or speed / (stride - 1) > PLAYBACK_FPS)


class CountRenders(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.renders = 0

    def render(self):
        self.renders += 1
        return self.env.render()


def test_frames_are_rendered_every_kth_step_of_each_clip_and_held_in_the_absorbing_state():
    env = CountRenders(gym.make("CartPole-v1", render_mode="rgb_array"))
    env = RenderFrames(FixedHorizon(env, horizon=60), stride=3, length=7)
    _, info = env.reset(seed=0)
    assert "frame" in info and env.env.env.renders == 1
    steps_with = []
    absorbing_renders = []
    for t in range(1, 60):
        renders = env.env.env.renders
        _, _, term, trunc, info = env.step(0)  # always left: CartPole falls within ~10 steps
        assert term is False  # the fixed horizon goes on after the env's end
        if "frame" in info:
            steps_with.append(t)
            frame = info["frame"]
            assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
            if info.get("absorbing"):
                absorbing_renders.append(env.env.env.renders - renders)
        if trunc:
            break
    # positions 0, 3, 6 of each 7-step clip, counted from the reset
    assert steps_with == [t for t in range(1, 60) if t % 7 % 3 == 0]
    # after the first absorbing frame, the held observation is not rendered again
    assert len(absorbing_renders) > 5 and sum(absorbing_renders[1:]) == 0


def test_a_clip_keeps_the_frames_of_every_kth_step_and_fills_a_missing_one():
    a, b, c = (np.full((2, 2, 3), v, np.uint8) for v in (1, 2, 3))
    assert clip_frames([a, None, None, b, None, None, c], 3) == [a, b, c]
    # a clip that starts out of step with the renders shows the nearest earlier frame
    shown = clip_frames([None, a, None, None, b, None, None], 3)
    assert [int(f[0, 0, 0]) for f in shown] == [1, 1, 2]
    assert clip_frames([None] * 7, 3) == []
    # the recorder makes one PNG of them: 3 frames for a 7-step segment at stride 3
    from PIL import Image

    rec = SegmentRecorder(1, 7, stride=3)
    frames = [a, None, None, b, None, None, c]
    segs = []
    for t in range(7):
        segs += rec.add(
            np.zeros((1, 4)), np.zeros(1, int), np.ones(1), np.ones(1, bool), np.zeros(1, bool),
            t, frames=[frames[t]],
        )  # fmt: skip
    (seg,) = segs
    assert Image.open(io.BytesIO(seg.clip)).size == (2, 6)
    # a vector env's info: the copies that rendered, copied out of the batch
    info = {"frame": np.stack([a, b]), "_frame": np.array([True, False])}
    got = rendered(info, 2)
    assert got[1] is None and np.array_equal(got[0], a) and got[0].base is None
    assert rendered({}, 2) == [None, None]


def facts(steps_per_s: float) -> EnvFacts:
    return EnvFacts((11,), False, "Box(-1.0, 1.0, (3,), float32)", 1000, 20, 20, 22.0, steps_per_s)


def test_a_persons_clips_last_a_second_and_a_half_where_synthetic_ones_keep_25_steps():
    person = derived_settings(facts(125.0), 100_000, person=True)
    assert person["prefs.segment_length"][0] == 188 and "1.5 s" in person["prefs.segment_length"][1]
    assert person["prefs.random_envs"][0] == 8  # each copy renders (a MuJoCo renderer: ~100 MB)
    assert derived_settings(facts(20.0), 100_000, person=True)["prefs.segment_length"][0] == 30
    synthetic = derived_settings(facts(125.0), 100_000)
    assert synthetic["prefs.segment_length"][0] == 25 and synthetic["prefs.random_envs"][0] == 64
    # never more than a quarter of the horizon
    short = EnvFacts((4,), True, "Discrete(2)", 100, 20, 20, 22.0, 125.0)
    assert derived_settings(short, 100_000, person=True)["prefs.segment_length"][0] == 25


def test_a_person_labeling_cartpole_is_shown_1_5_s_clips_of_every_other_step(home):
    """The launch says what a person will see, and the clips in the database are that: CartPole
    (50 steps a second) without a preset, labeled by a person: 75-step segments, rendered every
    2nd step, 38 frames of 600x400 played at 25 a second."""
    pytest.importorskip("pygame")
    from PIL import Image

    from backflip.prefs.db import PreferenceDB

    args = [
        "prefs", "train", "ppo", "--env", "CartPole-v1", "--labeler", "human", "--labels", "10",
        "--steps", "2048", "--set", "prefs.task=keep the pole up", "--no-progress",
    ]  # fmt: skip
    proc = start_cli(home, args)
    try:
        deadline = time.monotonic() + 180
        status = {}
        while time.monotonic() < deadline and status.get("status") != "waiting":
            found = list(home.glob("*/seeds/0/status.json"))
            status = json.loads(found[0].read_text()) if found else {}
            time.sleep(0.2)
        assert status.get("status") == "waiting", status
        db = PreferenceDB(found[0].parent / "prefs.sqlite")
        meta = db.meta()
        assert (meta["segment_length"], meta["clip_stride"], float(meta["fps"])) == (
            "75",
            "2",
            25.0,
        )
        _, left, right = db.pending(1)[0]
        for seg in (left, right):
            sheet = Image.open(io.BytesIO(db.clip(seg)))
            assert sheet.size == (600, 400 * 38)
            top = np.asarray(sheet)[:400]
            assert top.std() > 10  # CartPole's own frame, not a blank
        db.close()
    finally:
        _, err = stop_command(proc)  # the seed waits for its person
    assert (
        "clips: 75 steps (prefs.segment_length), 1.5 s at CartPole-v1's real speed of 50 steps a "
        "second; every 2nd step rendered (prefs.render_stride): 38 frames played at 25 a second"
    ) in err, err
