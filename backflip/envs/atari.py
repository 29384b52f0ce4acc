"""Atari preprocessing as in the DQN (Mnih et al. 2015), A2C and PPO papers, for ALE ids.

Needs the `atari` extra (`pip install 'backflip[atari]'`: ale-py and OpenCV). `make_env` applies
`wrap` to every ALE id unless `env.atari=false`:

- Gymnasium's `AtariPreprocessing`: up to 30 no-op actions at reset, 4 emulator frames per agent
  step with the last two max-pooled (sprites flicker), 84x84 grayscale (INTER_AREA);
- `EpisodicLife` (below): losing a life ends the agent's episode (`terminated`) but not the game;
- `FireReset` (below): press FIRE after each reset in games that need it to start;
- reward clipping to its sign (Gymnasium's `TransformReward`);
- Gymnasium's `FrameStackObservation`: the last 4 frames, channels first, uint8 (4, 84, 84).

Evaluation envs keep whole games and raw scores (no episodic life, no clipping), so `eval/return`
is the game score while `rollout/ep_return` is the clipped return of one life.

Ids whose emulator already skips frames or repeats actions (`-v0`, `Pong-v4`, `ALE/Pong-v5`)
differ from what the papers used; `protocol_warnings` says how, and preprocessing then skips no
further frames.
"""

from __future__ import annotations

import os
from dataclasses import replace

import gymnasium as gym
import numpy as np

PAPER_ID = "{game}NoFrameskip-v4"


def is_ale(spec: gym.envs.registration.EnvSpec) -> bool:
    return str(spec.entry_point).startswith("ale_py")


def protocol_warnings(spec: gym.envs.registration.EnvSpec) -> list[str]:
    """Why results on this ALE id won't match the papers' (empty for NoFrameskip-v4 ids)."""
    kw = spec.kwargs
    sticky, frameskip = kw.get("repeat_action_probability", 0.0), kw.get("frameskip", 1)
    issues = []
    if sticky:
        issues.append(f"sticky actions (the previous action repeats with probability {sticky})")
    if frameskip != 1:
        how = "2-4 (random)" if isinstance(frameskip, tuple) else str(frameskip)
        issues.append(f"each action repeated for {how} emulator frames without max-pooling")
    if not issues:
        return []
    game = "".join(w.capitalize() for w in str(kw.get("game", "pong")).split("_"))
    return [
        f"{spec.id} uses {' and '.join(issues)}; the DQN/A2C/PPO papers used "
        f"{PAPER_ID.format(game=game)} (no sticky actions, frame skip 4 with max-pooling), so "
        f"scores are not comparable to theirs"
    ]


class EpisodicLife(gym.Wrapper):
    """A lost life ends the agent's episode (`terminated`) without resetting the game: the next
    `reset` continues the game with one no-op step. Any other reset really resets: after game
    over, when no life was lost (a reset mid-episode, or FireReset's own steps after a reset),
    and whenever a seed is given (`reset(seed=s)` twice must give the same game).
    Value targets then stop at a lost life (Mnih et al. 2015)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.life_lost = 0, False

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        self.life_lost = not (terminated or truncated) and 0 < lives < self.lives
        terminated = terminated or self.life_lost
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if not self.life_lost or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives, self.life_lost = self.env.unwrapped.ale.lives(), False
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then another action, as the baselines wrapper does) after every reset, for
    games that wait for it (Breakout, Pong's serve); otherwise an agent can stall forever."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def wrap(
    env: gym.Env, frame_stack: int = 4, episodic_life: bool = True, clip_reward: bool = True
) -> gym.Env:
    """The standard preprocessing stack (module docstring) around a raw ALE env."""
    skip = 4 if getattr(env.unwrapped, "_frameskip", 1) == 1 else 1  # never skip twice
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=skip, screen_size=84)
    if episodic_life:
        env = EpisodicLife(env)
    meanings = env.unwrapped.get_action_meanings()
    if len(meanings) >= 3 and meanings[1] == "FIRE":
        env = FireReset(env)
    if clip_reward:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def vector_env(spec: gym.envs.registration.EnvSpec, num_envs: int, opts) -> gym.vector.VectorEnv:
    """`num_envs` training copies of a NoFrameskip id in ale-py's own vector env (C++, stepped on
    up to two threads), with the preprocessing of `wrap`: 4 frames per step with the last two
    max-pooled, 84x84 grayscale (INTER_AREA), up to 30 no-ops and FIRE after reset, a lost life
    `terminated` without ending the game (`life_loss_info`, as `EpisodicLife`), rewards clipped
    to their sign, the last `frame_stack` frames, NEXT_STEP autoreset.

    It differs from `wrap` in SyncVectorEnv in details that change a seed's episodes but not the
    task (docs/environments.md): 0-29 no-ops instead of 1-30, FIRE alone instead of FIRE then
    RIGHT, the first stack of an episode padded with black frames instead of copies of the first,
    the step after a lost life is a real step (Gymnasium's wrapper takes a no-op there, and the
    algorithms mask that step out either way), and its own random streams.
    """
    from ale_py.vector_env import AtariVectorEnv  # the `atari` extra: only for Atari envs

    kw = spec.kwargs
    threads = min(num_envs, len(os.sched_getaffinity(0)), 2)
    return AtariVectorEnv(
        kw["game"],
        num_envs,
        num_threads=threads,
        max_num_frames_per_episode=int(kw.get("max_num_frames_per_episode", 108_000)),
        repeat_action_probability=0.0,
        full_action_space=bool(kw.get("full_action_space", False)),
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        img_height=84,
        img_width=84,
        grayscale=True,
        stack_num=opts.frame_stack,
        frameskip=4,
        maxpool=True,
        noop_max=30,
        episodic_life=False,
        life_loss_info=opts.episodic_life,
        reward_clipping=opts.clip_reward,
        use_fire_reset=True,
    )


def vector_env_fits(spec: gym.envs.registration.EnvSpec, opts) -> bool:
    """Can `vector_env` stand in for `wrap` in SyncVectorEnv: an ALE id without sticky actions
    or emulator frame skip, with no `env.*` option but the Atari ones, and ale-py's vector env
    installed?"""
    kw = spec.kwargs
    if not (is_ale(spec) and opts.atari and opts.atari_vector and "game" in kw):
        return False
    if kw.get("frameskip", 1) != 1 or kw.get("repeat_action_probability", 0.0):
        return False
    atari_keys = {"frame_stack", "episodic_life", "clip_reward", "atari_vector"}
    plain = replace(opts, **{k: getattr(type(opts)(), k) for k in atari_keys})
    if plain != type(opts)():
        return False
    try:
        import ale_py.vector_env  # noqa: F401 — the `atari` extra may be missing
    except ImportError:
        return False
    return True
