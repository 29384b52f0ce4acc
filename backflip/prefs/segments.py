"""Segments and queries: cutting rollouts into clips, keeping recent ones, choosing pairs, pacing.

- `SegmentRecorder` cuts each env copy's stream of (obs, action, true reward) into consecutive,
  non-overlapping clips of `length` steps that never cross an episode boundary.
- `SegmentStore` keeps the most recent `capacity` clips (a ring buffer): queries are drawn from
  recent experience, as the policy sees it now.
- `select_pairs` draws candidate pairs at random and, once the reward model is trained, keeps
  the most informative: `disagreement` (the paper's active queries: the predicted preference
  varies most across the ensemble; it reports they sometimes hurt, so random selection remains
  an option), and B-Pref's `entropy` (the ensemble's mean predicted preference is closest to a
  coin flip) and `k-center` (pairs spread out over observation space, away from those already
  labeled).
- `LabelSchedule` paces the labels: a share up front from a random policy, then a rate decaying
  like 1/(T + τ) (the paper's 2·10⁶/(T + 2·10⁶) for 10⁷-step runs), all given by a fraction of
  the budget so that the last labels still shape the policy.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from backflip.prefs.db import Segment


class SegmentRecorder:
    """Per-env-copy buffers that turn vector-env steps into `length`-step segments."""

    def __init__(self, num_envs: int, length: int, stride: int = 1):
        self.length, self.stride = length, stride
        self.buf: list[list[tuple]] = [[] for _ in range(num_envs)]

    def add(
        self,
        obs,
        actions,
        rewards,
        valid,
        done,
        step: int,
        predicted=None,
        absorbing=None,
        frames=None,
    ) -> list[Segment]:
        """Record one vector step: the observation each action was taken in, the action, the true
        reward, whether the step was taken in the absorbing state of a fixed horizon, the env's
        rendered frame of the observation (for people, None where it rendered none: the
        completed segment keeps those of every `stride`-th step as one PNG, `clip_frames`) and,
        if given, the learned reward the policy was paid. `valid` is False on
        autoreset steps (not transitions); `done` ends an episode, which drops any partial
        segment. Returns the segments completed by this step."""
        out = []
        paid = np.full(len(self.buf), np.nan) if predicted is None else predicted
        absorbing = np.zeros(len(self.buf), bool) if absorbing is None else absorbing
        for i, buf in enumerate(self.buf):
            if not valid[i]:
                buf.clear()
                continue
            frame = None if frames is None else frames[i]
            buf.append((obs[i], actions[i], rewards[i], paid[i], absorbing[i], frame))
            if len(buf) == self.length:
                o, a, r, p, ab, f = zip(*buf, strict=True)
                ab = np.asarray(ab, bool)
                seg = Segment(np.stack(o), np.stack(a), np.asarray(r, np.float64), step)
                seg.absorbing = ab if ab.any() else None
                if frames is not None and (shown := clip_frames(f, self.stride)):
                    from backflip.prefs.frames import png  # PIL: only for people's clips

                    seg.clip = png(np.stack(shown))
                if predicted is not None:
                    seg.predicted = float(np.sum(p))
                out.append(seg)
                buf.clear()
            elif done[i]:
                buf.clear()
        return out


def clip_frames(frames, stride: int) -> list[np.ndarray]:
    """The frames a person is shown of a segment: those of steps 0, stride, 2·stride, ... (a
    step that rendered none shows the nearest earlier frame, else the next one); none when the
    segment rendered no frame at all."""
    have = [i for i, f in enumerate(frames) if f is not None]
    if not have:
        return []
    out = []
    for t in range(0, len(frames), stride):
        earlier = [i for i in have if i <= t]
        out.append(frames[earlier[-1] if earlier else have[0]])
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

    def frozen(self) -> SegmentStore:
        """A copy holding the same segments, which later `add`s to this store leave as it is
        (what a background training round reads: `prefs.mode=pipelined`)."""
        copy = SegmentStore.__new__(SegmentStore)
        copy.items, copy.added = deque(self.items, maxlen=self.items.maxlen), self.added
        return copy

    def sample_steps(self, n: int, rng: np.random.Generator):
        """`n` random single steps (obs, actions, absorbing) from the stored segments
        (calibration); `absorbing`: the step was in the absorbing state of a fixed horizon."""
        items = list(self.items)
        seg = rng.integers(0, len(items), n)
        t = rng.integers(0, items[0].actions.shape[0], n)
        obs = np.stack([items[s].obs[i] for s, i in zip(seg, t, strict=True)])
        act = np.stack([items[s].actions[i] for s, i in zip(seg, t, strict=True)])
        absorbing = np.array([items[s].absorbed()[i] for s, i in zip(seg, t, strict=True)])
        return obs, act, absorbing

    def sample_transitions(self, n: int, rng: np.random.Generator):
        """`n` random pairs of consecutive observations (o_t, o_{t+1}) within stored segments
        (the scale of `prefs.reward_input=progress`); None when segments are one step long."""
        items = list(self.items)
        length = items[0].obs.shape[0]
        if length < 2:
            return None
        seg = rng.integers(0, len(items), n)
        t = rng.integers(0, length - 1, n)
        obs = np.stack([items[s].obs[i] for s, i in zip(seg, t, strict=True)])
        nxt = np.stack([items[s].obs[i + 1] for s, i in zip(seg, t, strict=True)])
        return obs, nxt


def select_pairs(
    store: SegmentStore,
    n: int,
    rng: np.random.Generator,
    method: str = "random",
    model=None,
    oversample: int = 10,
    labeled: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[tuple[Segment, Segment]]:
    """`n` pairs of distinct segments from `store`.

    `random`: `n` pairs drawn uniformly. The other methods draw `n · oversample` random candidate
    pairs and keep `n` of them, using the reward model `model` (without one, before the first
    training round, they fall back to random pairs, as B-Pref asks its first queries at random):

    - `disagreement`: the highest variance of P̂[left ≻ right] across the ensemble's members;
    - `entropy` (B-Pref): the highest entropy of the members' mean P̂ — the pairs the model as a
      whole is least sure about (B-Pref's code averages the members' own entropies instead,
      which ignores their disagreement; the mean's entropy counts it);
    - `k-center` (B-Pref, after Sener & Savarese 2018): greedy k-center over the candidates'
      features, each time taking the candidate farthest from every pair already labeled
      (`labeled`: their (left obs, right obs)) and already taken. A pair's features, as in
      B-Pref, are the observations of its two segments (no actions), normalized like the reward
      model's input, flattened and concatenated (left, then right); image frames are first
      average-pooled to 8×8 so that the distances stay cheap.

    `entropy` and `k-center` never return the same pair twice (duplicate candidates are
    dropped); `random` and `disagreement` keep their original draws.
    """
    items = list(store.items)
    if len(items) < 2 or n <= 0:
        return []
    informed = method != "random" and model is not None
    n_cand = n * oversample if informed else n
    left = rng.integers(0, len(items), n_cand)
    right = (left + rng.integers(1, len(items), n_cand)) % len(items)  # never the same segment
    if n_cand > n:
        if method != "disagreement":  # the new methods: each candidate pair once
            _, first = np.unique(left * len(items) + right, return_index=True)
            first.sort()
            left, right = left[first], right[first]
        if method == "k-center":
            cand = pair_features(model, [items[i].obs for i in left], [items[i].obs for i in right])
            done = None
            if labeled:
                done = pair_features(model, [lo for lo, _ in labeled], [ro for _, ro in labeled])
            keep = k_center(cand, done, n)
        else:
            probs = model.preference_probs(
                (
                    np.stack([items[i].obs for i in left]),
                    np.stack([items[i].actions for i in left]),
                    np.stack([items[i].absorbed() for i in left]),
                ),
                (
                    np.stack([items[i].obs for i in right]),
                    np.stack([items[i].actions for i in right]),
                    np.stack([items[i].absorbed() for i in right]),
                ),
            )
            if method == "disagreement":
                score = np.var(probs, 0)
            elif method == "entropy":
                score = binary_entropy(probs.mean(0))
            else:
                raise ValueError(f"unknown query selection {method!r}")
            keep = np.argsort(-score, kind="stable")[:n]
        left, right = left[keep], right[keep]
    return [(items[i], items[j]) for i, j in zip(left, right, strict=True)]


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) of a Bernoulli(p): ln 2 at p = 0.5, 0 at p = 0 or 1."""
    p = np.clip(np.asarray(p, np.float64), 1e-12, 1 - 1e-12)
    return -(p * np.log(p) + (1 - p) * np.log1p(-p))


def pair_features(model, left_obs: list[np.ndarray], right_obs: list[np.ndarray]) -> np.ndarray:
    """(pairs, D) features of pairs for k-center: both segments' observations (each (L, ...)),
    normalized like the reward model's input, image frames pooled to at most 8×8, flattened."""

    def segment(obs_list):
        obs = model.normalize_obs(np.stack(obs_list))  # (P, L, *obs_shape)
        if obs.ndim == 5:  # (P, L, C, H, W) images
            pooled = torch.nn.functional.adaptive_avg_pool2d(
                torch.as_tensor(obs.reshape(-1, *obs.shape[2:])), 8
            )
            obs = pooled.numpy().reshape(*obs.shape[:3], -1)
        return obs.reshape(len(obs_list), -1)

    return np.concatenate([segment(left_obs), segment(right_obs)], 1)


def k_center(cand: np.ndarray, done: np.ndarray | None, n: int) -> np.ndarray:
    """Greedy k-center: indices of `n` rows of `cand` (distinct while any are left), each the
    farthest (Euclidean) from the rows of `done` and those taken before it. Without `done`, the
    first row comes first (the candidates are in random order)."""
    m = len(cand)
    nearest = np.full(m, np.inf)
    if done is not None and len(done):
        for start in range(0, len(done), 1024):
            nearest = np.minimum(nearest, _distances(cand, done[start : start + 1024]).min(1))
    taken = np.zeros(m, bool)
    out = []
    for _ in range(min(n, m)):
        i = int(np.argmax(np.where(taken, -1.0, nearest)))
        out.append(i)
        taken[i] = True
        nearest = np.minimum(nearest, _distances(cand, cand[i : i + 1])[:, 0])
    return np.asarray(out, np.int64)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) Euclidean distances."""
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.maximum(sq, 0.0))


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
