"""Andy Jones's probe environments ("Debugging RL, Without the Agonizing Pain", 2021).

Each is so small that a correct agent solves it in seconds, and each isolates one part of an
agent, so a failure points at the broken part:

| id | actions | observation | length | reward | a failure means |
|---|---|---|---|---|---|
| `backflip/Probe1-v0` | 1 | constant 0 | 1 | +1 | value loss or optimizer broken |
| `backflip/Probe2-v0` | 1 | random ±1 | 1 | the observation | the value net can't use its input |
| `backflip/Probe3-v0` | 1 | 0, then 1 | 2 | +1 at the end only | discounting / bootstrapping broken |
| `backflip/Probe4-v0` | 2 | constant 0 | 1 | +1 for action 0, −1 for action 1 | policy loss / advantage broken |
| `backflip/Probe5-v0` | 2 | random ±1 | 1 | +1 if the action matches the observation's sign | policy–value interplay, batching |

`backflip/Probe<k>Box-v0` are the continuous-action analogues for DDPG/TD3/SAC and Gaussian
policies: the action is a Box(−2, 2, (1,)); probes 1–3 ignore it, probe 4 pays −(a − 0.5)²
and probe 5 pays −(a − 0.5·obs)² (best action: 0.5 and ±0.5). Observations are Box(−1, 1, (1,)).
The bounds are ±2, not ±1, because a Gaussian policy's actions are clipped to the bounds before
the env sees them: with bounds ±1 and σ = 0.6 the clipped reward is maximized by a mean of 0.94,
not 0.5, so a correct PPO would "fail"; with ±2 the optimum is within 0.01 of 0.5 for σ ≤ 0.6.

All episodes end by termination (nothing to bootstrap), so the true values are exact:
V = 1 (probe 1), V(±1) = ±1 (2), V(0) = γ and V(1) = 1 (3), V = 1 under the best policy (4, 5),
and 0 for the Box versions of probes 4 and 5. `backflip probe ALGO` trains on each and checks.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
BOX_ACTIONS = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
BOX_TARGET = 0.5  # the best action of the Box probes 4 and 5 (times the observation in 5)


class _Probe(gym.Env):
    """Common plumbing: one-dimensional observations, discrete or Box actions."""

    observation_space = OBS_SPACE

    def __init__(self, box: bool = False, actions: int = 1):
        self.box = box
        self.action_space = BOX_ACTIONS if box else gym.spaces.Discrete(actions)
        self.obs = np.zeros(1, np.float32)
        self.t = 0

    def _random_sign(self) -> np.ndarray:
        return np.array([1.0 if self.np_random.random() < 0.5 else -1.0], np.float32)

    def _action(self, action) -> float:
        return float(np.asarray(action, np.float64).reshape(-1)[0])


class Probe1(_Probe):
    """Constant observation 0, one step, reward +1: V(0) = 1."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = np.zeros(1, np.float32)
        return self.obs.copy(), {}

    def step(self, action):
        return self.obs.copy(), 1.0, True, False, {}


class Probe2(_Probe):
    """Observation ±1 at random, one step, reward = the observation: V(±1) = ±1."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = self._random_sign()
        return self.obs.copy(), {}

    def step(self, action):
        return self.obs.copy(), float(self.obs[0]), True, False, {}


class Probe3(_Probe):
    """Observation 0 then 1, two steps, reward +1 at the end only: V(0) = γ, V(1) = 1."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == 1:
            return np.ones(1, np.float32), 0.0, False, False, {}
        return np.ones(1, np.float32), 1.0, True, False, {}


class Probe4(_Probe):
    """Constant observation 0, one step. Discrete: +1 for action 0, −1 for action 1.
    Box: −(a − 0.5)²."""

    def __init__(self, box: bool = False):
        super().__init__(box, actions=2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        a = self._action(action)
        reward = -((a - BOX_TARGET) ** 2) if self.box else (1.0 if int(a) == 0 else -1.0)
        return np.zeros(1, np.float32), reward, True, False, {}


class Probe5(_Probe):
    """Observation ±1 at random, one step. Discrete: +1 if the action is 1 when the observation
    is +1 and 0 when it is −1, else −1. Box: −(a − 0.5·obs)²."""

    def __init__(self, box: bool = False):
        super().__init__(box, actions=2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = self._random_sign()
        return self.obs.copy(), {}

    def step(self, action):
        a, o = self._action(action), float(self.obs[0])
        if self.box:
            reward = -((a - BOX_TARGET * o) ** 2)
        else:
            reward = 1.0 if int(a) == int(o > 0) else -1.0
        return self.obs.copy(), reward, True, False, {}


PROBES = {1: Probe1, 2: Probe2, 3: Probe3, 4: Probe4, 5: Probe5}
LENGTHS = {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}


def probe_id(k: int, box: bool = False) -> str:
    return f"backflip/Probe{k}{'Box' if box else ''}-v0"


for _k, _cls in PROBES.items():
    for _box in (False, True):
        if probe_id(_k, _box) not in gym.registry:
            gym.register(
                probe_id(_k, _box),
                entry_point=_cls,
                kwargs={"box": _box},
                max_episode_steps=LENGTHS[_k] + 1,  # never reached: every probe terminates
            )
