"""Fixed-horizon CartPole: termination replaced by a penalty, as Christiano et al. (2017) do.

When episodes can end early, their length itself tells the agent something about the reward
(an episode that ends at step 20 was bad), so a preference-learning run would partly learn from
the episode length instead of from the labels. The paper removes termination and gives a penalty
instead; `imitation` refuses variable horizons altogether (seals' CartPole gives reward 0 after
the fall). Here:

- `CartPoleFixedHorizon-v1`: CartPole-v1's dynamics, always 500 steps. Each step in bounds gives
  +1, as in CartPole-v1. A step that would have terminated the episode (pole past 12 degrees or
  cart past 2.4) gives `-penalty` (default 10) instead, and the pole restarts from a fresh random
  state, like a lost life in Atari. A perfect policy scores 500, a random one about 250.
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CartPoleFixedHorizon(gym.Wrapper):
    """CartPole that never terminates: a fall costs `penalty` and restarts the pole."""

    def __init__(self, penalty: float = 10.0, max_steps: int = 500, render_mode=None):
        super().__init__(CartPoleEnv(render_mode=render_mode))
        self.penalty, self.max_steps = penalty, max_steps
        self.t = 0
        self.falls = 0

    def reset(self, *, seed=None, options=None):
        self.t, self.falls = 0, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, _, info = self.env.step(action)
        self.t += 1
        if terminated:
            self.falls += 1
            reward = -self.penalty
            # a fresh random state from the env's own generator, without reseeding it
            obs, _ = self.env.reset()
        info = {**info, "falls": self.falls}
        return obs, float(reward), False, self.t >= self.max_steps, info


gym.register("CartPoleFixedHorizon-v1", entry_point=CartPoleFixedHorizon, max_episode_steps=500)
