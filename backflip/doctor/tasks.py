"""What the doctor knows about a task from its env id: the return that counts as solved, the
return of policies that do nothing, and the frame rate.

Rules ask these to read a return against the task: a run whose return reached the env's
`reward_threshold` is solved (a deterministic policy is then no collapse), and a run whose return
sits at the level of a constant action on a task where that is not the optimum has converged to a
trivial behaviour. Every answer is None (or empty) when the env id is unknown or can't be made:
the rules then say nothing that depends on it.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

TRIVIAL_EPISODES = 3
TRIVIAL_MAX_STEPS = 6_000  # per constant action, summed over its episodes
TRIVIAL_MAX_ACTIONS = 18


def _spec(env_id: str | None):
    if not env_id:
        return None
    try:
        from backflip.envs import check_env_id

        return check_env_id(env_id)
    except Exception:  # noqa: BLE001 — an env that no longer exists (or a typo): unknown
        return None


@functools.lru_cache(maxsize=64)
def reward_threshold(env_id: str | None) -> float | None:
    """The env's `reward_threshold` (Gymnasium's spec): a return at which the task is solved."""
    spec = _spec(env_id)
    return None if spec is None or spec.reward_threshold is None else float(spec.reward_threshold)


@functools.lru_cache(maxsize=64)
def steps_per_second(env_id: str | None) -> float | None:
    """The env's real speed in agent steps a second, as backflip makes it (`envs.steps_per_second`:
    Atari 15, the papers' 4 frames a step; Hopper 125): what a horizon in steps lasts."""
    spec = _spec(env_id)
    if spec is None:
        return None
    try:
        from backflip.envs import make_env
        from backflip.envs import steps_per_second as speed

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = make_env(spec.id)
        try:
            return speed(env)
        finally:
            env.close()
    except Exception:  # noqa: BLE001 — the speed is decoration; any failure means unknown
        return None


@functools.lru_cache(maxsize=64)
def trivial_returns(env_id: str | None) -> dict:
    """{'what': 'the zero action' | 'constant action k' | 'uniformly random actions', ...} ->
    (mean return, std) over a few seeded episodes of the raw env (`gym.make`, its own time
    limit): the levels of a policy that does nothing, and of a random one for scale. Empty for
    unknown ids, image observations, Atari (each episode is minutes of emulation) and action
    spaces that are neither Discrete nor Box."""
    spec = _spec(env_id)
    if spec is None or "ale_py" in str(spec.entry_point):
        return {}
    try:
        import gymnasium as gym

        env = gym.make(spec.id)
    except Exception:  # noqa: BLE001 — the env can't be made here: no levels
        return {}
    try:
        space = env.action_space
        if len(getattr(env.observation_space, "shape", ()) or ()) >= 2:
            return {}
        policies: dict = {}
        if isinstance(space, gym.spaces.Discrete):
            if space.n > TRIVIAL_MAX_ACTIONS:
                return {}
            for k in range(space.n):
                policies[f"constant action {int(space.start) + k}"] = lambda k=k: (
                    int(space.start) + k
                )
        elif isinstance(space, gym.spaces.Box):
            zero = np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)
            policies["the zero action"] = lambda: zero
        else:
            return {}
        space.seed(0)
        policies["uniformly random actions"] = space.sample
        out = {}
        for what, act in policies.items():
            returns, steps = [], 0
            for seed in range(TRIVIAL_EPISODES):
                env.reset(seed=seed)
                total, done = 0.0, False
                while not done and steps < TRIVIAL_MAX_STEPS:
                    _, r, term, trunc, _ = env.step(act())
                    total, done, steps = total + float(r), term or trunc, steps + 1
                if not done:
                    break  # no time limit within the cap: no level
                returns.append(total)
            if len(returns) == TRIVIAL_EPISODES:
                out[what] = (float(np.mean(returns)), float(np.std(returns)))
        return out
    except Exception:  # noqa: BLE001 — an env that fails under constant actions: no levels
        return {}
    finally:
        env.close()
