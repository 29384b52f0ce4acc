"""`LearnedReward`: the vector-env wrapper through which any algorithm trains on r̂.

The preference pipeline puts it on the seed's training envs (`SeedRun.training_envs`), so every
training vector env the algorithm makes (with `run.make_vec`) sees the learned reward, while
evaluation envs keep the true one. The algorithm needs no change: every algorithm makes its envs
with `run.make_vec`.

On each step it
1. replaces the env's reward with the pipeline's current reward model, r̂(o_t, a_t) (or r̂(o_{t+1})
   with `prefs.reward_input=next-obs`, r̂(o_{t+1}) − r̂(o_t) with `progress`), computed for all env
   copies in one batched forward pass (0 on Gymnasium's autoreset steps, which are not
   transitions);
2. hands the true transition to the pipeline (segments for queries, true returns for metrics,
   and which copies the env itself terminated: `terminated`, or under a fixed horizon the
   `terminated_early` the horizon wrapper reports, `envs/horizon.py`, and which steps were taken
   in its absorbing state, which the reward model values as one learned number);
3. lets the pipeline run its synchronous tick, or publish the async worker's metrics.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from backflip.envs.wrappers import rendered


class LearnedReward(gym.vector.VectorWrapper):
    """Replace the reward of a vector env (NEXT_STEP autoreset) by the pipeline's learned one."""

    def __init__(self, env: gym.vector.VectorEnv, pipeline):
        super().__init__(env)
        self.pipeline = pipeline
        self.obs = None
        self.frames = None  # each copy's rendered frame of its observation, or None (people)
        self.renders = False
        self.prev_done = np.zeros(env.num_envs, bool)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.obs = obs
        self.renders = "frame" in info  # the envs render for a person (RenderFrames, on reset)
        self.frames = rendered(info, self.num_envs) if self.renders else None
        self.prev_done = np.zeros(self.num_envs, bool)
        self.pipeline.episode_reset()
        return obs, info

    def step(self, actions):
        obs_before, frames_before, valid = self.obs, self.frames, ~self.prev_done
        obs, true_reward, term, trunc, info = self.env.step(actions)
        actions = np.asarray(actions)
        absorbing, ended = env_ends(term, info, self.num_envs)
        reward = self.pipeline.reward(obs_before, actions, obs, absorbing, absorbing | ended)
        # prefs.horizon=terminal: the episode's last absorbing step is worth the absorbing
        # state's reward for ever, r̂_abs/(1 − γ) (envs/horizon.py)
        last = flags(info, "absorbing_end", self.num_envs)
        if last.any():
            reward = np.where(last, reward / (1.0 - self.pipeline.gamma), reward)
        reward = np.where(valid, reward, 0.0)
        done = term | trunc
        self.pipeline.on_step(
            obs_before,
            actions,
            np.asarray(true_reward, np.float64),
            reward,
            valid,
            done,
            ended,
            absorbing,
            frames_before,
        )
        self.obs, self.prev_done = obs, done
        self.frames = rendered(info, self.num_envs) if self.renders else None
        return obs, reward, term, trunc, info


def env_ends(term, info: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per copy of a vector env's step: whether it was taken in the absorbing state of a fixed
    horizon, and whether the env itself ended the episode there: its termination, or under a
    fixed horizon the `terminated_early` the horizon reports (`prefs.horizon=terminal`'s last
    absorbing step terminates the learner's episode, not the env's: counted there it made every
    end two, one with a true return of 0, and halved the true return the doctor reads)."""
    absorbing = flags(info, "absorbing", n)
    ended = (np.asarray(term, bool) & ~absorbing) | flags(info, "terminated_early", n)
    return absorbing, ended


def flags(info: dict, key: str, n: int) -> np.ndarray:
    """A vector env's boolean info `key` per copy (False where a copy did not set it)."""
    if key not in info:
        return np.zeros(n, bool)
    return np.asarray(info[f"_{key}"], bool) & np.asarray(info[key]).astype(bool)
