"""Running statistics for observation normalization and reward scaling.

Schulman's rules: normalize observations with running statistics over *all* data seen so far (not
per batch); scale rewards but never shift them (shifting changes the problem, e.g. a constant
offset rewards or punishes staying alive). Both normalizers keep their statistics in
`state_dict()` so that checkpoints carry them; evaluation uses them without updating.
"""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Mean and variance of a stream of batches, merged with Chan et al.'s parallel update.

    For two sets A and B with counts n_a, n_b, means m_a, m_b and sums of squared deviations
    M_a, M_b: delta = m_b - m_a, n = n_a + n_b, m = m_a + delta * n_b / n and
    M = M_a + M_b + delta^2 * n_a * n_b / n. Exact for any batch sizes, numerically stable.
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon  # a tiny prior so the first update is well defined

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64)
        if batch.shape[0] == 0:
            return
        self.update_from_moments(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def update_from_moments(self, mean, var, count: int) -> None:
        delta = mean - self.mean
        total = self.count + count
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def state_dict(self) -> dict:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var = np.array(state["mean"]), np.array(state["var"])
        self.count = float(state["count"])


class ObsNormalizer:
    """(obs - mean) / std, clipped to +-clip. Call with `update=False` to evaluate (frozen)."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        self.rms, self.clip, self.eps = RunningMeanStd(shape), clip, eps

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if update:
            self.rms.update(obs)
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.eps)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict:
        return self.rms.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state)


class RewardScaler:
    """Divide rewards by the running std of the discounted return; never subtract a mean.

    The discounted-return accumulator restarts at every episode end, terminated *or* truncated
    (Gymnasium's NormalizeReward only restarts on termination, leaking returns across a time limit).
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.rms, self.gamma, self.clip, self.eps = RunningMeanStd(()), gamma, clip, eps
        self.ret = np.zeros(num_envs, np.float64)

    def __call__(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray | None = None):
        """Scaled rewards; `done` (terminated | truncated) restarts each env's accumulator.

        `valid` marks real transitions: Gymnasium's NEXT_STEP autoreset inserts one reset step
        after each episode end, which must not count as a zero-reward sample.
        """
        self.ret = self.ret * self.gamma + reward
        self.rms.update(self.ret if valid is None else self.ret[valid])
        self.ret[done] = 0.0
        return np.clip(reward / np.sqrt(self.rms.var + self.eps), -self.clip, self.clip)

    @property
    def scale(self) -> float:
        """The divisor currently applied to rewards."""
        return float(np.sqrt(self.rms.var + self.eps))

    def state_dict(self) -> dict:
        return {"rms": self.rms.state_dict(), "ret": self.ret.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state["rms"])
        self.ret = np.array(state["ret"])
