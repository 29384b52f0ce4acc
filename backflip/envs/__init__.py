"""The environment factory: validated ids, option wrappers, vectorized copies.

Every algorithm gets its environments from here, so every run sees the same wrappers, the same
autoreset semantics (Gymnasium's default NEXT_STEP: the step after `terminated or truncated`
returns the reset observation, and that step's action is ignored) and the same seeding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import numbers
import os
import pickle
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path

import gymnasium as gym
import numpy as np

from backflip.config import EnvOptions
from backflip.envs import atari, wrappers
from backflip.errors import UserError, did_you_mean


class AtariProtocolWarning(UserWarning):
    """An Atari id whose settings differ from the papers' (see `backflip.envs.atari`)."""


@contextlib.contextmanager
def probing():
    """Envs made only to be looked at (their spaces, a few steps, before the run exists) raise
    no `AtariProtocolWarning`: the launch says it once, in one line (`commands.train.execute`),
    where each look before it printed its own copy with a file name and a line of source."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AtariProtocolWarning)
        yield


_registered = False


def register_envs() -> None:
    """Register backflip's own environments (probes, moving dot) with Gymnasium, once."""
    global _registered
    if _registered:
        return
    _registered = True
    for name in ("backflip.envs.probes", "backflip.envs.moving_dot", "backflip.envs.fixed_horizon"):
        try:
            __import__(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise


def _maybe_register_ale(env_id: str) -> None:
    """Register the Atari ids (ale-py, the `atari` extra) when an id is not known yet."""
    if env_id in gym.registry:
        return
    try:
        import ale_py  # the `atari` extra, and slow to import: only for an unknown id

        gym.register_envs(ale_py)
    except ImportError:
        if env_id.startswith("ALE/") or "NoFrameskip" in env_id or "Deterministic" in env_id:
            raise UserError(
                f"{env_id} needs the Atari extra: pip install 'backflip[atari]'"
            ) from None


# folders this process put on sys.path to import an env module (`import_env_module`): a run
# records them and its seed processes put them on theirs (`launch.seed`)
_module_paths: list[str] = []


def import_env_module(module: str, env_id: str, search: Iterable[str | Path | None] = ()) -> None:
    """Import the module of `module:EnvId-v0`: from the Python path, else from the current
    directory, else from the first folder of `search` that holds it (a rerun: the folder its run
    was launched from). The `backflip` command, unlike `python -m`, does not put the current
    directory on the path, so `--env myenvs:Corridor-v0` with myenvs.py beside you would
    otherwise fail. A folder it is found in is added to the end of sys.path (the installed
    packages keep precedence) and to `module_paths()`."""
    try:
        importlib.import_module(module)
        return
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) and (
            e.name == module or module.startswith(f"{e.name}.")
        )
        if not missing:  # the module is there but fails to import: its own error
            raise UserError(f"cannot import {module!r} for env {env_id!r}: {e}") from None
    top = module.split(".")[0]
    folders = list(dict.fromkeys(str(Path(d).resolve()) for d in [os.getcwd(), *search] if d))
    for folder in folders:
        here = Path(folder)
        if not ((here / f"{top}.py").is_file() or (here / top).is_dir()):
            continue
        if folder not in sys.path:
            sys.path.append(folder)
            _module_paths.append(folder)
        importlib.invalidate_caches()
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UserError(f"cannot import {module!r} for env {env_id!r}: {e}") from None
        return
    raise UserError(
        f"cannot import {module!r} for env {env_id!r}: no module {top!r} on the Python path or "
        f"in {' or '.join(folders)}; run from the folder that holds {top}.py or add that folder "
        "to PYTHONPATH"
    )


def module_paths() -> list[str]:
    """The folders `import_env_module` added to sys.path in this process."""
    return list(_module_paths)


def check_env_id(
    env_id: str, search: Iterable[str | Path | None] = ()
) -> gym.envs.registration.EnvSpec:
    """The registered spec for `env_id`, or a UserError naming the closest ids.

    `module:EnvId-v0` first imports `module` (which registers the env), as `gymnasium.make` does,
    from the Python path, else from the current directory, else from the folders in `search`
    (`import_env_module`).
    """
    register_envs()
    module, _, env_id = env_id.rpartition(":")
    if module:
        import_env_module(module, env_id, search)
    _maybe_register_ale(env_id)
    try:
        return gym.spec(env_id)
    except (gym.error.Error, ModuleNotFoundError, AttributeError, ValueError):
        hint = did_you_mean(env_id, gym.registry.keys())
        raise UserError(f"unknown environment {env_id!r}{hint}") from None


def episode_limit(env_id: str, opts: EnvOptions | None = None) -> int | None:
    """The longest an episode of `env_id` can be (`env.max_episode_steps`, else the env's own
    time limit), or None when it has none."""
    if opts is not None and opts.max_episode_steps:
        return opts.max_episode_steps
    return check_env_id(env_id).max_episode_steps


SPACE_KINDS = {"discrete": "Discrete", "box": "Box", "multidiscrete": "MultiDiscrete"}
"""the action-space kinds an algorithm may handle (its settings' ACTION_SPACES), as named"""


def space_kind(space: gym.Space) -> str:
    """The kind of an action space as the policies act in it (after `adapt_actions`)."""
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box):
        return "box"
    if isinstance(space, gym.spaces.MultiDiscrete):
        return "multidiscrete"
    return type(space).__name__


_ACTION_KINDS: dict[str, str] = {}


def action_kind(env_id: str) -> str | None:
    """ "discrete", "box" (or the space's class name) for the actions of `env_id`, "atari" for
    an Atari game's (an ALE id: frames under the standard preprocessing), which
    `config.resolve` reads (`action`) for the settings an env without a preset gets from its
    action space (the `env.*` options change observations, rewards and time limits, never the
    actions); None when the env cannot be made here (the launch then says why). Made once per
    env in a process."""
    if env_id not in _ACTION_KINDS:
        try:
            with probing():
                env = make_env(env_id, EnvOptions())
        except Exception:  # noqa: BLE001 — check_supported says why in one line, at launch
            return None
        try:
            kind = space_kind(env.action_space)
            if kind == "discrete" and atari.is_ale(check_env_id(env_id)):
                kind = "atari"  # a game's frames and joystick, under the standard preprocessing
            _ACTION_KINDS[env_id] = kind
        finally:
            env.close()
    return _ACTION_KINDS[env_id]


def chain(env: gym.Env):
    """The env and every wrapper under it, outermost first."""
    while True:
        yield env
        if not isinstance(env, gym.Wrapper):
            return
        env = env.env


ALE_HZ = 60.0  # the Atari 2600's frame rate (ale-py's metadata says 30 frames a second)


def steps_per_second(env: gym.Env) -> float:
    """The real speed of `env` as made, in agent steps per second: its frame rate (ALE: the
    console's 60 Hz; otherwise `render_fps`, which MuJoCo sets from its time step: Hopper 125,
    HalfCheetah 20; 30 where the env gives none) over the frames each agent step plays (the
    emulator's own frame skip times the wrappers': Pong under the papers' preprocessing 15)."""
    base = env.unwrapped
    skip = getattr(base, "_frameskip", None)
    if skip is not None:  # ale-py's AtariEnv: an int, or a (low, high) range drawn each step
        rate, frames = ALE_HZ, float(np.mean(skip))
    else:
        rate, frames = float((getattr(base, "metadata", None) or {}).get("render_fps") or 30), 1.0
    for layer in chain(env):  # wrappers only: MuJoCo's own frame_skip is in its render_fps
        skip = getattr(layer, "frame_skip", None) or getattr(layer, "_skip", None)
        if isinstance(layer, gym.Wrapper) and isinstance(skip, numbers.Integral) and skip > 1:
            frames *= int(skip)
    return rate / frames


def check_supported(algo, env_id: str, opts: EnvOptions) -> tuple[int, ...]:
    """Raise a UserError if the algorithm `algo` (an `algos.AlgoSpec`: its name, the action-space
    kinds it handles, whether it squashes Box actions into their bounds) can't act in `env_id`
    (e.g. DQN on a Box action space, SAC on infinite bounds); the shape of the observations the
    networks will read."""
    algo, kinds, bounded = algo.name, algo.action_spaces, algo.bounded_actions
    try:
        env = make_env(env_id, opts)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 — the env's own constructor failed: say so in one line
        raise UserError(f"could not create {env_id}: {type(e).__name__}: {e}") from None
    try:
        act, obs = env.action_space, env.observation_space
        # the env's own space, where a small MultiDiscrete/MultiBinary one is read as a Discrete
        own = own_actions(env)
        check_api(env, env_id)
    finally:
        env.close()
    if space_kind(act) not in kinds:
        need = " or ".join(SPACE_KINDS[k] for k in kinds)
        many = ""
        if space_kind(act) == "multidiscrete":
            many = (
                f" ({wrappers.joint_actions(own):,} combinations, more than the "
                f"{wrappers.MAX_JOINT_ACTIONS} read as one Discrete; ppo, a2c and vpg act in it "
                "with one categorical per part)"
            )
        raise UserError(f"{algo} needs a {need} action space; {env_id} has {own}{many}")
    if not isinstance(obs, gym.spaces.Box):  # adapt_observations refuses first, in one line
        raise UserError(f"{env_id} has observation space {obs}, which backflip can't encode yet")
    if isinstance(act, gym.spaces.Box) and bounded and not act.is_bounded("both"):
        raise UserError(
            f"{algo} squashes its actions into the action space's bounds, and {env_id}'s are "
            f"not finite ({act}): give its action space finite bounds, or use ppo, a2c or vpg "
            "(a Gaussian policy needs none)"
        )
    if isinstance(act, gym.spaces.Box) and not np.issubdtype(act.dtype, np.floating):
        raise UserError(
            f"{env_id} has a Box action space of dtype {act.dtype} ({act}); backflip's "
            "continuous policies emit floats: use a float Box, or Discrete/MultiDiscrete "
            f"(up to {wrappers.MAX_JOINT_ACTIONS} combinations) for whole-number actions"
        )
    return tuple(obs.shape)


def own_actions(env: gym.Env) -> gym.Space:
    """The env's own action space, where a small MultiDiscrete/MultiBinary one is read as a
    Discrete (`wrappers.JointDiscreteAction`): what a refusal names."""
    return next((w.joint_of for w in chain(env) if hasattr(w, "joint_of")), env.action_space)


def check_api(env: gym.Env, env_id: str) -> None:
    """A UserError naming what the env's own `reset` and `step` (under every wrapper) return
    against Gymnasium's API, on one reset and one step of a sampled action: an env written for
    the old Gym API (a 4-tuple with `done`), or a reward that is not a number (a shape-(1,)
    array), failed its seed with "not enough values to unpack" or "setting an array element
    with a sequence"; observations of another shape than the space's ("Output array has
    wrong dimensionality"); and an env with a single action, where nothing can be learned."""
    with warnings.catch_warnings():  # Gymnasium's checker on the same probe: said below
        warnings.simplefilter("ignore")
        _check_api(env, env_id)


def _check_api(env: gym.Env, env_id: str) -> None:
    inner = env.unwrapped
    if isinstance(env.action_space, gym.spaces.Discrete) and env.action_space.n < 2:
        # its entropy's maximum, log 1, is 0: the normalized entropy was NaN and the seed stopped
        own = own_actions(env)
        raise UserError(
            f"{env_id} has one action ({own}): there is no choice for a policy to learn"
        )
    try:
        out = env.reset(seed=0)
    except Exception:  # noqa: BLE001 — the env's own error: the seed reports it where it occurs
        return
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise UserError(
            f"{env_id}'s reset() returned {_shape_of(out)}; Gymnasium's API returns "
            "(observation, info)"
        )
    own = inner.observation_space
    if isinstance(own, gym.spaces.Box) and np.shape(out[0]) != env.observation_space.shape:
        raise UserError(
            f"{env_id}'s reset() returned an observation of shape {np.shape(out[0])}; its "
            f"observation space is {own}"
        )
    action = env.action_space.sample()
    for w in list(chain(env))[:-1]:  # the action as the env itself receives it, outside in
        if isinstance(w, gym.ActionWrapper):
            action = w.action(action)
    try:
        out = inner.step(action)
    except Exception:  # noqa: BLE001 — the env's own error: the seed reports it where it occurs
        return
    if not (isinstance(out, tuple) and len(out) == 5):
        old = " (the old Gym API's (obs, reward, done, info))" if len(out) == 4 else ""
        raise UserError(
            f"{env_id}'s step() returned {_shape_of(out)}{old}; Gymnasium's API returns "
            "(observation, reward, terminated, truncated, info)"
        )
    if isinstance(own, gym.spaces.Box) and np.shape(out[0]) != own.shape:
        raise UserError(
            f"{env_id}'s step() returned an observation of shape {np.shape(out[0])}; its "
            f"observation space is {own}"
        )
    reward = out[1]
    number = isinstance(reward, numbers.Real) or (
        isinstance(reward, np.ndarray) and reward.ndim == 0 and reward.dtype.kind in "biuf"
    )
    if not number:
        shape = np.shape(reward) if isinstance(reward, np.ndarray | list | tuple) else None
        what = type(reward).__name__ + (f" of shape {shape}" if shape else f" ({reward!r:.40})")
        raise UserError(
            f"{env_id}'s step() returned a reward of type {what}; Gymnasium's API wants a "
            "number (e.g. return float(reward))"
        )


def _shape_of(out) -> str:
    if isinstance(out, tuple):
        return f"a tuple of {len(out)} ({', '.join(type(x).__name__ for x in out)})"
    return f"a {type(out).__name__}"


def make_env(
    env_id: str,
    opts: EnvOptions | None = None,
    render_mode: str | None = None,
    evaluation: bool = False,
    wrap=None,
    **kwargs,
) -> gym.Env:
    """One environment copy with the `env.*` option wrappers applied.

    Observations are adapted for backflip's networks (`adapt_observations`: one-hot, flattened,
    frames as (C, H, W) bytes), and small MultiDiscrete/MultiBinary actions as one Discrete
    (`adapt_actions`). `wrap(env)`, if given, goes on the env before them (a
    preference run's fixed horizon, `envs.horizon`: training envs only).

    ALE ids get the standard Atari preprocessing (`backflip.envs.atari`) unless `env.atari` is
    off; with `evaluation`, whole games and raw scores (no episodic life, no reward clipping).
    Ids whose settings differ from the papers' (sticky actions, emulator frame skip) raise an
    `AtariProtocolWarning` (a UserWarning) once.
    """
    opts = opts or EnvOptions()
    spec = check_env_id(env_id)
    env_id = spec.id
    if opts.max_episode_steps:
        kwargs["max_episode_steps"] = opts.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
        # pygame (classic-control rendering) must not look for a display or a sound card
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            # MuJoCo without a display: Gymnasium tries GLFW first, which opens but cannot
            # draw there (a person's clips fell back to the observation vector); EGL renders
            # off-screen (read when the env's first renderer is made)
            os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise UserError(f"{env_id} needs an extra dependency: {e}") from None
    except ImportError as e:  # its entry point's module, or a package that module needs
        what = f"the module {e.name!r}, which is not installed" if e.name else str(e)
        raise UserError(f"{env_id} cannot be made: it needs {what}") from None
    if atari.is_ale(spec) and opts.atari:
        for message in atari.protocol_warnings(spec):
            warnings.warn(message, AtariProtocolWarning, stacklevel=2)
        try:
            env = atari.wrap(
                env,
                opts.frame_stack,
                opts.episodic_life and not evaluation,
                opts.clip_reward and not evaluation,
            )
        except gym.error.DependencyNotInstalled:
            raise UserError(
                f"{env_id} preprocessing needs OpenCV: pip install 'backflip[atari]'"
            ) from None
    if wrap is not None:  # a preference run's fixed horizon (`envs.horizon`), on training envs
        env = wrap(env)
    env = adapt_observations(env, opts.obs_layout, env_id)
    env = adapt_actions(env, env_id)
    if opts.frame_diff:
        env = wrappers.FrameDifference(env)
    if opts.obs_scale != 1.0 or opts.obs_shift != 0.0:
        env = wrappers.AffineObservation(env, opts.obs_scale, opts.obs_shift)
    if opts.reward_scale != 1.0:
        env = wrappers.ScaleReward(env, opts.reward_scale)
    if opts.nan_reward_at >= 0:
        env = wrappers.NaNRewardAfter(env, opts.nan_reward_at)
    if opts.slowdown > 0:
        env = wrappers.GrowingWork(env, opts.slowdown)
    return env


def adapt_actions(env: gym.Env, env_id: str = "") -> gym.Env:
    """The env with actions backflip's policies emit: a scalar Box, or one of several axes, as a
    flat vector (each action reshaped back: Gymnasium's `TransformAction`); a MultiDiscrete or
    MultiBinary space of
    at most `wrappers.MAX_JOINT_ACTIONS` combinations as one Discrete over them, a Discrete
    that starts elsewhere than 0 shifted to 0 (`wrappers.JointDiscreteAction`, exact); a larger
    one is a UserError naming its size."""
    space = env.action_space
    if isinstance(space, gym.spaces.Box) and len(space.shape) != 1:
        # a scalar, or a Box of several axes, as the flat vector the policies emit
        flat = gym.spaces.Box(space.low.ravel(), space.high.ravel(), dtype=space.dtype)
        return gym.wrappers.TransformAction(
            env, lambda a, shape=space.shape: np.asarray(a).reshape(shape), flat
        )
    n = wrappers.joint_actions(space)
    if n is None:
        return env
    if n > wrappers.MAX_JOINT_ACTIONS and not isinstance(env.action_space, gym.spaces.Discrete):
        # too many combinations for one Discrete: a flat MultiDiscrete from 0, for the
        # factorized policy head (one categorical per part: PPO, A2C, VPG)
        return wrappers.FlatMultiDiscreteAction(env)
    return wrappers.JointDiscreteAction(env)


def adapt_observations(env: gym.Env, layout: str = "auto", env_id: str = "") -> gym.Env:
    """The env with observations backflip's networks read (`wrappers.observation_layout`):
    Discrete one-hot; Tuple, Dict, MultiDiscrete, MultiBinary and small or many-axis Boxes
    flattened (Gymnasium's `FlattenObservation`, discrete parts one-hot); frames of any layout,
    size and dtype as (C, H, W) uint8 (`ImageObservation`); vectors as float32. A space none of
    these serve (Text, a Dict holding a frame, ...) is a UserError naming it."""
    space = env.observation_space
    try:
        kind = wrappers.observation_layout(space, layout)
    except ValueError as e:
        raise UserError(
            f"{env_id or 'this env'} has observation space {space}, which backflip can't encode: "
            f"{e}"
        ) from None
    if kind == "one_hot":
        return wrappers.OneHotObservation(env)
    if kind == "flatten":
        env = gym.wrappers.FlattenObservation(env)
    elif kind in ("channels_first", "channels_last"):
        if kind == "channels_first" and space.dtype == np.uint8 and len(space.shape) == 3:
            return env  # already what the CNNs read (Atari's stacked frames, MovingDot84)
        return wrappers.ImageObservation(env, channels_last=kind == "channels_last")
    if env.observation_space.dtype != np.float32:
        env = wrappers.FloatObservation(env)
    return env


def make_vec(
    env_id: str,
    num_envs: int,
    opts: EnvOptions | None = None,
    evaluation: bool = False,
    wrap=None,
    render_mode: str | None = None,
) -> gym.vector.VectorEnv:
    """`num_envs` copies stepping in lockstep (NEXT_STEP autoreset); `evaluation`, `wrap` and
    `render_mode` as `make_env` (with `wrap` or `render_mode`, always Gymnasium's SyncVectorEnv
    of wrapped copies).

    Uses the env's own vectorized implementation when it has one, no option wrapper is active
    and there are several copies (Gymnasium's CartPoleVectorEnv is faster than SyncVectorEnv for
    8 copies, but slower for one); for Atari training envs,
    ale-py's vector env (`atari.vector_env`; `env.atari_vector=false` turns it off); else
    SyncVectorEnv.
    """
    opts = opts or EnvOptions()
    spec = check_env_id(env_id)
    if (
        spec.vector_entry_point is not None
        and opts == EnvOptions()
        and num_envs > 1
        and wrap is None
        and render_mode is None
    ):
        env = gym.make_vec(spec.id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        if read_as_is(env.single_observation_space, env.single_action_space):
            return env
        env.close()  # its spaces need adapting (one-hot, flattening, joint actions): below
    if (
        not evaluation
        and wrap is None
        and render_mode is None
        and atari.vector_env_fits(spec, opts)
    ):
        return atari.vector_env(spec, num_envs, opts)
    return gym.vector.SyncVectorEnv(
        # a partial, not a lambda: the envs pickle into checkpoints (exact resume)
        [
            functools.partial(make_env, env_id, opts, render_mode, evaluation=evaluation, wrap=wrap)
            for _ in range(num_envs)
        ],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


def read_as_is(obs: gym.Space, act: gym.Space) -> bool:
    """Whether the networks read these spaces without `adapt_observations`/`adapt_actions`: a
    one-axis float32 Box of observations, and Discrete actions from 0 or a one-axis Box."""
    vector = isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1 and obs.dtype == np.float32
    if isinstance(act, gym.spaces.Discrete):
        return vector and int(act.start) == 0
    return vector and isinstance(act, gym.spaces.Box) and len(act.shape) == 1


def snapshot_envs(envs: gym.vector.VectorEnv) -> bytes | None:
    """The complete state of vectorized envs (mid-episode, with their RNGs) as bytes, so that
    `backflip resume` continues exactly where a checkpoint was taken. None when it can't be
    captured (`why_no_snapshot` says why); a resume then starts them from a fresh reset."""
    return _snapshot(envs)[0]


def why_no_snapshot(env_id: str, opts: EnvOptions | None = None) -> str | None:
    """Why `snapshot_envs` cannot capture the training envs of `env_id` (None: it can), found
    by trying it on one fresh copy: `backflip resume` says so before it starts."""
    envs = make_vec(env_id, 1, opts)
    try:
        return _snapshot(envs)[1]
    finally:
        envs.close()


def _snapshot(envs: gym.vector.VectorEnv) -> tuple[bytes | None, str | None]:
    """(the pickled envs, None), or (None, the reason they cannot be pickled as they are)."""
    base = envs.unwrapped  # under vector wrappers (FiniteObservations, LearnedReward)
    copies = getattr(base, "envs", None) or [base]
    if any(isinstance(e.unwrapped, gym.utils.EzPickle) for e in copies):
        return None, (
            "it pickles as its constructor arguments (Gymnasium's EzPickle, as MuJoCo envs do), "
            "which re-creates a fresh env instead of saving the running one"
        )
    try:
        return pickle.dumps(envs), None
    except (pickle.PicklingError, TypeError, AttributeError, ValueError) as e:
        return None, f"it cannot be pickled ({type(e).__name__}: {e})"


def restore_envs(blob: bytes) -> gym.vector.VectorEnv:
    """Vectorized envs from `snapshot_envs` (a checkpoint this machine wrote: trusted input)."""
    register_envs()
    return pickle.loads(blob)


def env_options_active(opts: EnvOptions) -> dict:
    """The `env.*` options that differ from their defaults (for summaries)."""
    default = EnvOptions()
    return {
        f.name: getattr(opts, f.name)
        for f in dataclasses.fields(opts)
        if getattr(opts, f.name) != getattr(default, f.name)
    }
