"""Exploration before the first labels (`prefs.explore_steps`): the policy's first steps are paid
for reaching observations unlike those it has seen (PEBBLE's unsupervised pre-training, Lee et al.
2021; the particle estimate of state entropy of Liu & Abbeel's APT, 2021), so that the clips the
first labels are asked on hold more than a random policy's (docs/preferences.md, "Exploration
before the labels").

Why: a random policy's clips can miss what the task is about. On CliffWalking 0–1 of ~680 labeled
clips held the goal (a random walk reaches it once in ~6,000 steps); a model that never saw the
goal cannot pay for going there, and the doctor's `labels-ends-unseen` says so. An agent paid for
novelty walks the grid's far corners within a few thousand steps.

The bonus of reaching observation s' is log(1 + d_k(s')), d_k the distance from s' to its k-th
nearest neighbour among the most recent observations (vectors normalized as the reward model
sees them; frames as pixels in [0, 1], at most `MAX_FEATURES` of them, evenly spaced),
then centred and scaled by running moments of the bonus itself: an episode's length carries no
reward (a fixed horizon's absorbing steps are paid the mean, 0), and the scale is the one the
policy will see from the learned reward (`prefs.reward_std`).
"""

from __future__ import annotations

import numpy as np
import torch

from backflip.normalize import RunningMeanStd

NEIGHBOURS = 5  # k of the k-th nearest neighbour (APT and PEBBLE: 5 to 12)
MEMORY = 2048  # recent observations the distances are measured to
MAX_FEATURES = 512  # an image is subsampled to at most this many pixels before distances


class NoveltyBonus:
    """Pays each reached observation by how far it lies from the recent ones (module docstring).
    `normalize` maps raw observations to the reward model's normalized features."""

    def __init__(self, normalize, scale: float = 1.0, memory: int = MEMORY, image: bool = False):
        self.normalize, self.scale, self.memory, self.image = normalize, scale, memory, image
        # (memory, features), a ring, and each row's squared length; torch for the distances
        # (its threads are the seed's: NumPy's BLAS took every core's, 4x slower on two)
        self.bank: torch.Tensor | None = None
        self.norms = torch.zeros(memory)
        self.filled = self.at = 0
        self.moments = RunningMeanStd(shape=())
        self.pick: np.ndarray | None = None  # the features kept of a large observation

    def features(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        if self.pick is None:
            size = int(np.prod(obs.shape[1:]))
            self.pick = np.arange(0, size, max(1, -(-size // MAX_FEATURES)))
        if self.image:  # frames: the picked pixels, scaled (a frame's pixels share one scale)
            return obs.reshape(len(obs), -1)[:, self.pick].astype(np.float32) / 255.0
        x = np.asarray(self.normalize(obs), np.float32).reshape(len(obs), -1)
        return x[:, self.pick]

    def __call__(self, next_obs: np.ndarray, absorbing_next=None) -> np.ndarray:
        """The bonus of reaching each of `next_obs` (one per env copy); 0 (the mean) where the
        copy reaches the absorbing state of a fixed horizon."""
        x = torch.from_numpy(self.features(next_obs))
        if self.bank is None:
            self.bank = torch.zeros(self.memory, x.shape[1])
        if self.filled:
            n = self.filled
            d2 = torch.addmm(self.norms[:n], x, self.bank[:n].T, alpha=-2.0)
            d2 += (x * x).sum(1, keepdim=True)
            k = min(NEIGHBOURS, n) - 1  # NumPy's partition: 2x torch's kthvalue here
            kth = np.partition(d2.numpy(), k, axis=1)[:, k].astype(np.float64).clip(0.0)
            raw = np.log1p(np.sqrt(kth))
        else:
            raw = np.zeros(len(x))
        live = np.ones(len(x), bool) if absorbing_next is None else ~np.asarray(absorbing_next)
        if live.any():
            self.moments.update(raw[live])
        bonus = (raw - self.moments.mean) / np.sqrt(self.moments.var + 1e-8) * self.scale
        bonus = np.where(live, bonus, 0.0)
        new = x[torch.from_numpy(live)]  # into the ring (a held absorbing observation: not new)
        rows = torch.from_numpy((self.at + np.arange(len(new))) % self.memory)
        self.bank[rows], self.norms[rows] = new, (new * new).sum(1)
        self.at = (self.at + len(new)) % self.memory
        self.filled = min(self.filled + len(new), self.memory)
        return bonus.astype(np.float32)
