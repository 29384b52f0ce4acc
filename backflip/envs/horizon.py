"""A fixed horizon for any env: what a preference run does with episodes that end early.

When an episode can end before its time limit, its length tells the policy something the reward
model never said. A learned reward standardized to mean 0 (docs/preferences.md) is positive on
about half the states: an env that ends at *failure* (a MuJoCo walker falls, CartPole's pole
drops) then pays the agent for staying alive whatever r̂ judges — survival bias — and an env
that ends at *success* (Acrobot swings up, MountainCar reaches the flag) pays it to never finish,
the mirror (Kostrikov et al. 2019, "Discriminator-Actor-Critic", name both for learned rewards).
Christiano et al. (2017) removed termination from their MuJoCo tasks; `imitation` refuses
variable horizons; seals makes classic envs fixed-horizon. Two treatments, per env copy:

- `AbsorbAfterTermination` (`prefs.horizon=absorb`, the default): after the env terminates,
  the episode goes on in an absorbing state until the time limit: the last observation is held,
  the reward is 0, actions do nothing (seals' `AbsorbAfterDoneWrapper`). The episode's return is
  the env's own, and the reward model sees the end: a labeler who prefers the clip that stayed
  up (or the one that reached the goal) teaches it whether ending is bad (or good).
- `RestartAfterTermination` (`prefs.horizon=restart`): the env restarts from a fresh reset inside
  the episode, until the time limit (`CartPoleFixedHorizon-v1`, a lost life in Atari): more of
  the task per episode, but a fixed-horizon episode then holds several of the env's, and its
  return is their sum (evaluation still plays the env's own episodes).

Both truncate at the env's time limit (its spec's `max_episode_steps`, which `env.*` options may
override: a preference run gives one to an env that has none) and mark a step that terminated
the env with `info["terminated_early"] = True`, so the pipeline can count how often the env ended
an episode. Evaluation envs never get these wrappers: the true return reported is the env's own.
"""

from __future__ import annotations

import gymnasium as gym


class _FixedHorizon(gym.Wrapper):
    """Counts steps to the env's time limit; subclasses say what happens at a termination."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        spec = env.spec
        limit = spec.max_episode_steps if spec is not None else None
        if not limit:
            raise ValueError(
                f"{type(self).__name__} needs a time limit (the env's spec has none): set "
                "env.max_episode_steps"
            )
        self.horizon = int(limit)
        self.t = 0

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)


class AbsorbAfterTermination(_FixedHorizon):
    """After termination: the last observation held, reward 0, until the time limit."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.absorbing = False
        self.last_obs = None

    def reset(self, **kwargs):
        self.absorbing, self.last_obs = False, None
        return super().reset(**kwargs)

    def step(self, action):
        self.t += 1
        if self.absorbing:
            return self.last_obs, 0.0, False, self.t >= self.horizon, {}
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated:
            self.absorbing, self.last_obs = True, obs
            info = {**info, "terminated_early": True}
        return obs, reward, False, truncated or self.t >= self.horizon, info


class RestartAfterTermination(_FixedHorizon):
    """After termination: a fresh reset of the env inside the episode, until the time limit."""

    def step(self, action):
        self.t += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated:
            # a fresh start from the env's own generator, without reseeding it
            obs, _ = self.env.reset()
            info = {**info, "terminated_early": True}
        return obs, reward, False, truncated or self.t >= self.horizon, info


TREATMENTS = {"absorb": AbsorbAfterTermination, "restart": RestartAfterTermination}
"""`prefs.horizon` -> the per-copy wrapper (variable: none)."""


def horizon_treatment(pcfg) -> str:
    """`prefs.horizon` as a seed applies it: auto is absorb."""
    return "absorb" if pcfg.horizon == "auto" else pcfg.horizon
