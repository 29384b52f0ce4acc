"""Segments and queries: cutting rollouts into clips, keeping recent ones, choosing pairs, pacing.

- `SegmentRecorder` cuts each env copy's stream of (obs, action, true reward) into consecutive,
  non-overlapping clips of `length` steps that never cross an episode boundary.
- `SegmentStore` keeps the most recent `capacity` clips (a ring buffer): queries are drawn from
  recent experience, as the policy sees it now.
- `select_pairs` draws candidate pairs at random and, with `disagreement`, keeps those whose
  predicted preference varies most across the reward model's ensemble (the paper's active
  queries; it reports they sometimes hurt, so random selection remains the other option).
- `LabelSchedule` paces the labels: a share up front from a random policy, then a rate decaying
  like 1/(T + τ) (the paper's 2·10⁶/(T + 2·10⁶) for 10⁷-step runs), all given by a fraction of
  the budget so that the last labels still shape the policy.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from backflip.prefs.db import Segment


class SegmentRecorder:
    """Per-env-copy buffers that turn vector-env steps into `length`-step segments."""

    def __init__(self, num_envs: int, length: int):
        self.length = length
        self.buf: list[list[tuple]] = [[] for _ in range(num_envs)]

    def add(self, obs, actions, rewards, valid, done, step: int) -> list[Segment]:
        """Record one vector step: the observation each action was taken in, the action, the true
        reward. `valid` is False on autoreset steps (not transitions); `done` ends an episode,
        which drops any partial segment. Returns the segments completed by this step."""
        out = []
        for i, buf in enumerate(self.buf):
            if not valid[i]:
                buf.clear()
                continue
            buf.append((obs[i], actions[i], rewards[i]))
            if len(buf) == self.length:
                o, a, r = zip(*buf, strict=True)
                out.append(Segment(np.stack(o), np.stack(a), np.asarray(r, np.float64), step))
                buf.clear()
            elif done[i]:
                buf.clear()
        return out


class SegmentStore:
    """The `capacity` most recent segments."""

    def __init__(self, capacity: int):
        self.items: deque[Segment] = deque(maxlen=capacity)
        self.added = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, segments: list[Segment]) -> None:
        self.items.extend(segments)
        self.added += len(segments)

    def sample_steps(self, n: int, rng: np.random.Generator):
        """`n` random single steps (obs, actions) from the stored segments (calibration)."""
        items = list(self.items)
        seg = rng.integers(0, len(items), n)
        t = rng.integers(0, items[0].actions.shape[0], n)
        obs = np.stack([items[s].obs[i] for s, i in zip(seg, t, strict=True)])
        act = np.stack([items[s].actions[i] for s, i in zip(seg, t, strict=True)])
        return obs, act


def select_pairs(
    store: SegmentStore,
    n: int,
    rng: np.random.Generator,
    method: str = "random",
    model=None,
    oversample: int = 10,
) -> list[tuple[Segment, Segment]]:
    """`n` pairs of distinct segments from `store`, chosen at random or by ensemble disagreement."""
    items = list(store.items)
    if len(items) < 2 or n <= 0:
        return []
    n_cand = n * oversample if method == "disagreement" and model is not None else n
    left = rng.integers(0, len(items), n_cand)
    right = (left + rng.integers(1, len(items), n_cand)) % len(items)  # never the same segment
    if n_cand > n:
        var = model.preference_variance(
            (np.stack([items[i].obs for i in left]), np.stack([items[i].actions for i in left])),
            (np.stack([items[i].obs for i in right]), np.stack([items[i].actions for i in right])),
        )
        keep = np.argsort(-var, kind="stable")[:n]
        left, right = left[keep], right[keep]
    return [(items[i], items[j]) for i, j in zip(left, right, strict=True)]


class LabelSchedule:
    """How many labels should have been asked for by agent step T.

    `initial` labels come from a random policy before training. The remaining `total - initial`
    arrive with a rate ∝ 1/(T + τ), τ = `decay` · `until`, so that all of them are due by step
    `until`: due(T) = initial + (total − initial) · log(1 + T/τ) / log(1 + until/τ).
    """

    def __init__(self, total: int, initial: int, until: int, decay: float = 0.25):
        self.total, self.initial, self.until = total, min(initial, total), max(1, until)
        self.tau = max(1.0, decay * self.until)

    def due(self, step: int) -> int:
        if step >= self.until:
            return self.total
        frac = math.log1p(step / self.tau) / math.log1p(self.until / self.tau)
        return self.initial + int((self.total - self.initial) * frac)
