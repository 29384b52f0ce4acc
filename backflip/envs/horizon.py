"""A fixed horizon for any env: what a preference run does with episodes that end early.

When an episode can end before its time limit, its length tells the policy something the reward
model never said. A learned reward standardized to mean 0 (docs/preferences.md) is positive on
about half the states: an env that ends at *failure* (a MuJoCo walker falls, CartPole's pole
drops) then pays the agent for staying alive whatever r̂ judges — survival bias — and an env
that ends at *success* (Acrobot swings up, MountainCar reaches the flag) pays it to never finish,
the mirror (Kostrikov et al. 2019, "Discriminator-Actor-Critic", name both for learned rewards).
Christiano et al. (2017) removed termination from their MuJoCo tasks; `imitation` refuses
variable horizons; seals makes classic envs fixed-horizon.

`FixedHorizon` keeps every episode exactly as long as `prefs.horizon_steps`, or the env's time
limit (its spec's `max_episode_steps`, which `env.*` options may override): a preference run
gives an env that has none a horizon of its own, for its training envs only. When the env terminates, the episode goes on in an **absorbing state**: the last
observation held, reward 0, actions ignored (seals' `AbsorbAfterDoneWrapper`), each such step
marked `info["absorbing"] = True`; the reward model pays one learned value for it, whatever the
observation held and the action (`prefs/reward_model.py`), so the labels decide whether ending
is good or bad, and the policy cannot choose where to end to be paid by the model's
extrapolation. Then, with `restart_after` = k, after k absorbing steps the env restarts from a
fresh reset inside the episode (`prefs.horizon=restart`, the default, with k a clip's length:
like a lost life in Atari or `CartPoleFixedHorizon-v1`, each end costs k steps of the absorbing
state's value and the policy gets another try); without it, the absorbing state lasts until the
time limit (`prefs.horizon=absorb`: the episode's return is exactly the env's, but a policy that
ends early spends most of its experience absorbed: PPO on CartPole's true reward under it
reached a greedy 41 in 6e4 steps, against 496 with restarts after 5 absorbing steps).

With `end` (`prefs.horizon=terminal`) the k-th absorbing step ends the episode instead
(`terminated`, `info["absorbing_end"] = True`): the learner is paid for it the absorbing
state's value for ever, r̂_abs/(1 − γ) (`prefs/wrapper.py`), Kostrikov et al.'s absorbing state
in closed form. An end then costs what the labels say it is worth rather than k steps of it
(a restart makes a failure cheap: PPO on the *true* reward inside the restart horizon stays
far below the env's own episodes, docs/preferences.md, "What the fixed horizon costs"), and
no experience is spent absorbed; on the true reward (r_abs = 0) it is the env's own end.

A step that terminated the env is marked `info["terminated_early"] = True`, so the pipeline
counts the env's own episodes (their true return is what it reports). Evaluation envs never get
this wrapper: the true return of the final evaluation is the env's own.
"""

from __future__ import annotations

import functools

import gymnasium as gym


class FixedHorizon(gym.Wrapper):
    """Episodes of exactly the env's time limit; after a termination the absorbing state, for
    `restart_after` steps and then a fresh start (None: until the time limit), or with `end`
    the episode's end."""

    def __init__(
        self, env: gym.Env, restart_after: int | None = None, end: bool = False, horizon: int = 0
    ):
        super().__init__(env)
        self.end = end  # after restart_after absorbing steps the episode ends (terminal)
        spec = env.spec
        limit = horizon or (spec.max_episode_steps if spec is not None else None)
        if not limit:
            raise ValueError(
                "a fixed horizon needs a time limit (the env's spec has none): set "
                "prefs.horizon_steps"
            )
        self.horizon = int(limit)
        self.restart_after = restart_after
        self.t = 0
        self.absorbing = 0  # steps since the termination, in the absorbing state
        self.last_obs = None

    def reset(self, **kwargs):
        self.t, self.absorbing, self.last_obs = 0, 0, None
        return self.env.reset(**kwargs)

    def step(self, action):
        self.t += 1
        end = self.t >= self.horizon
        if self.absorbing:
            if self.end and self.absorbing >= self.restart_after:
                # terminal: the last absorbing step ends the episode; the learner values what
                # follows as the absorbing state's reward for ever (`prefs/wrapper.py`)
                return self.last_obs, 0.0, True, False, {"absorbing": True, "absorbing_end": True}
            if self.restart_after is not None and self.absorbing >= self.restart_after:
                # the last absorbing step leads to a fresh start (the env's own generator)
                self.absorbing, self.last_obs = 0, None
                obs, _ = self.env.reset()
                return obs, 0.0, False, end, {"absorbing": True}
            self.absorbing += 1
            return self.last_obs, 0.0, False, end, {"absorbing": True}
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated:
            info = {**info, "terminated_early": True}
            if self.restart_after == 0:  # no absorbing step: the next step is a fresh start
                obs, _ = self.env.reset()
            else:
                self.absorbing, self.last_obs = 1, obs
        return obs, reward, False, truncated or end, info


def horizon_treatment(pcfg, values_ends: bool = False) -> str:
    """`prefs.horizon` as a seed applies it: auto is terminal for a learner that can be paid an
    end as it happens (`values_ends`: PPO, A2C, VPG; `algos.values_ends`), restart for the
    others (replay learners, whose relabeled rewards would drop it; CEM). A launch records the
    concrete treatment."""
    if pcfg.horizon != "auto":
        return pcfg.horizon
    return "terminal" if values_ends else "restart"


def horizon_wrapper(pcfg, values_ends: bool = False):
    """The per-copy wrapper of `prefs.horizon` (a picklable callable: checkpoints keep the
    envs), or None for `variable`."""
    treatment = horizon_treatment(pcfg, values_ends)
    if treatment == "variable":
        return None
    restart_after = pcfg.absorb_steps if treatment in ("restart", "terminal") else None
    return functools.partial(
        FixedHorizon,
        restart_after=restart_after,
        end=treatment == "terminal",
        horizon=pcfg.horizon_steps,
    )
