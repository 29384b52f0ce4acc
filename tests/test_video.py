"""Videos: `video_every` records greedy episodes during training; `backflip watch` from checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from backflip.telemetry import read_metrics

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
pytest.importorskip("pygame")

TINY = ["--env", "CartPole-v1", "--seed-start", "3", "--seeds", "1", "--steps", "2048"]
TINY += ["--set", "epochs=1"]


def frames_of(path) -> tuple[int, tuple[int, int]]:
    """(number of frames, (width, height)) decoded back from an MP4 with ffmpeg."""
    n, size, _ = video_of(path)
    return n, size


def video_of(path) -> tuple[int, tuple[int, int], float]:
    """(number of frames, (width, height), frames a second) of an MP4, decoded with ffmpeg."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = reader.__next__()
    n = sum(1 for _ in reader)
    return n, tuple(meta["size"]), float(meta["fps"])


def test_video_every_records_greedy_episodes_without_changing_training(cli, home):
    plain = cli("train", "ppo", *TINY, "--no-progress").stdout.splitlines()[0].split()[1][:-1]
    filmed = cli("train", "ppo", *TINY, "--set", "video_every=1024", "--no-progress")
    filmed = filmed.stdout.splitlines()[0].split()[1][:-1]
    videos = sorted((home / filmed / "seeds" / "3" / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["step_000001024.mp4", "step_000002048.mp4"]
    for v in videos:
        n, size = frames_of(v)
        # CartPole renders 600x400; an episode lasts > 8 steps, shown every 2nd step
        assert n >= 5 and size == (600, 400)
    assert not (home / plain / "seeds" / "3" / "videos").exists()
    # the training itself is untouched: every metric outside eval/, time/ and sys/ is identical
    a, b = (read_metrics(home / r / "seeds" / "3" / "metrics.csv") for r in (plain, filmed))
    same = [k for k in a if not k.startswith(("eval/", "time/", "sys/"))]
    assert len(same) > 20
    for k in same:
        assert np.array_equal(a[k][0], b[k][0]) and np.array_equal(a[k][1], b[k][1]), k
    # the video's evaluation shows up as an evaluation row at that step
    assert 1024 in b["eval/return_mean"][0].tolist()


def test_watch_renders_a_checkpoint_to_mp4_and_prints_its_path(cli, home):
    cli("train", "ppo", *TINY, "--no-progress")
    path = cli("watch", "last").stdout.strip()
    assert path.endswith(".mp4") and "/seeds/3/videos/watch_final_" in path
    info = json.loads(cli("watch", "last", "--checkpoint", "512", "--json").stdout)
    assert info["step"] == 512 and info["checkpoint"].endswith("step_000000512.pt")
    # at CartPole's real speed: its 50 steps a second shown every 2nd step, 25 frames a second
    # (the reset's frame, every 2nd step's, and the last step's)
    n, _, fps = video_of(info["path"])
    assert n == 1 + -(-info["length"] // 2) and fps == 25.0
    # rendering does not change the episode: the same agent and seed without rendering agree
    from backflip.algos import get_algo
    from backflip.envs import make_env

    ckpt = torch.load(info["checkpoint"], weights_only=False)
    env = make_env("CartPole-v1")
    agent = get_algo("ppo").load(ckpt, env.observation_space, env.action_space)
    obs, _ = env.reset(seed=3 * 1000 + 500)
    ret, done = 0.0, False
    while not done:
        obs, r, term, trunc, _ = env.step(agent.act(obs[None])[0])
        ret, done = ret + r, term or trunc
    assert ret == info["return"]
    out = home / "elsewhere" / "clip.mp4"
    assert cli("watch", "last", "--out", out).stdout.strip() == str(out) and out.stat().st_size > 0

    # bad input: one line each, no traceback
    for args, message in (
        (["--checkpoint", "777"], "no checkpoint at step 777"),
        (["--checkpoint", "nope.pt"], "no checkpoint 'nope.pt'"),
        (["--seed", "9"], "has seeds [3], not 9"),
    ):
        proc = cli("watch", "last", *args, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_evaluation_that_reaches_target_return_is_filmed(cli, home):
    # any policy returns >= 5 on CartPole: the first evaluation (step 512) reaches the target
    args = ["--set", "eval_every=512", "--set", "target_return=5", "--set", "video_every=1000000"]
    out = cli("train", "ppo", *TINY, *args, "--no-progress").stdout
    run_id = out.splitlines()[0].split()[1][:-1]
    videos = sorted((home / run_id / "seeds" / "3" / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["step_000000512.mp4"]


def test_an_env_whose_render_fails_trains_on_and_watch_says_why_in_one_line(cli, home):
    """The user's render() raising (here an OverflowError in their own code) used to fail the
    seed at its first video and give `backflip watch` a traceback."""
    env = ["--env", "tests.fault_envs:RenderBreaks-v0", "--seeds", "1", "--steps", "2048"]
    proc = cli("train", "ppo", *env, "--set", "video_every=1024", "--json", "--no-progress")
    record = json.loads(proc.stdout)
    assert record["status"] == "finished" and record["seeds"][0]["status"] == "finished"
    log = (home / record["id"] / "seeds" / "0" / "stderr.log").read_text().splitlines()
    said = [line for line in log if "not recorded" in line]  # once, not at every evaluation
    assert len(said) == 1 and "video at step 1,024 not recorded, and no more" in said[0]
    assert "RenderBreaks-v0's render() failed: OverflowError" in said[0]
    watch = cli("watch", "last", check=False)
    assert watch.returncode == 2 and "Traceback" not in watch.stderr, watch.stderr
    assert watch.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "render() failed: OverflowError" in watch.stderr


def test_mujoco_draws_its_frames_on_a_machine_without_a_display():
    """Without a display Gymnasium tried GLFW, which opened but could not draw: a person
    labeling Hopper got frames drawn from its observation vector, and videos failed. EGL
    renders off-screen (`envs.make_env` chooses it where no display is set)."""
    import ctypes.util
    import os
    import subprocess
    import sys

    pytest.importorskip("mujoco")
    if ctypes.util.find_library("EGL") is None:
        pytest.skip("no EGL library on this machine (Debian: libegl1)")
    code = (
        "from backflip.envs import make_env\n"
        "env = make_env('Hopper-v5', render_mode='rgb_array'); env.reset(seed=0)\n"
        "frame = env.render(); print(frame.shape, frame.dtype, frame.std() > 10)"
    )
    bare = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    bare.pop("MUJOCO_GL", None)
    proc = subprocess.run([sys.executable, "-c", code], env=bare, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[0] == "(480, 480, 3) uint8 True", proc.stdout
