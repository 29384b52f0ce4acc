"""The reward model: an ensemble of networks r̂(o, a) fit to preferences (Christiano et al. 2017).

A label says which of two segments σ¹, σ² is better. Under the Bradley–Terry model

    P̂[σ¹ ≻ σ²] = exp Σ r̂(σ¹) / (exp Σ r̂(σ¹) + exp Σ r̂(σ²)) = sigmoid(Σ r̂(σ¹) − Σ r̂(σ²))

and, assuming the labeler answers at random 10% of the time, P = 0.9·P̂ + 0.05. The loss is the
cross-entropy between P and the label μ (1 left, 0 right, 0.5 equal): `preference_loss`.

Details that matter (each cost someone weeks; see docs/preferences.md):

- **One forward pass for both segments of a pair.** The pair is a tensor (B, 2, L, ...); the
  network's linear layers act on the last axis, so both "towers" are literally the same weights,
  `PairDropout` draws one mask of shape (B, 1, L, H) and broadcasts it over the pair axis, and
  batchnorm (CNN) sees both segments in one batch and so normalizes them with the same statistics.
  Rahtz's bug — different dropout masks for the two towers — broke training while the accuracy
  looked fine; `tests/test_prefs.py` checks the masks are shared.
- **Observations are normalized on the model's input** with running statistics over every segment
  the pipeline has seen (Rahtz was stuck for weeks without this).
- **Ensemble of `members` networks**, each trained on its own bootstrap resample of the labels
  (a Poisson(1) weight per pair and member, drawn when the pair arrives: the online bootstrap).
- **Held-out validation** (a fixed 1/e of the pairs) and **adaptive L2**: after each round, each
  member's weight decay is raised when validation loss exceeds 1.5× training loss and lowered
  below 1.1×.
- **Reward for the policy**: each member's output is normalized separately to zero mean and unit
  std over recent experience, the members are averaged, and the result is multiplied by
  `reward_std`: r = reward_std · mean_k((r̂_k − μ_k) / σ_k). Offsets μ_k and scales σ_k are
  recomputed after every training round (not a running average over all history, which Rahtz's
  issue #5 found never forgets an early, wrong model). σ_k is at least `min_std`, 1 / segment
  length (the pipeline's): a member whose outputs vary by less per step cannot tell one clip
  from another by a logit (its sums over a segment differ by less than 1), and dividing by its
  spread would hand the policy its noise at full scale (Acrobot, before any label showed the
  goal: 494 of 500 labels "equal", σ ≈ 0.002, a reward of pure noise with std 1).
- **The absorbing state** (a fixed horizon, `prefs.horizon=restart|absorb`: `envs/horizon.py`): every
  step taken after the env ended the episode is worth one learned value per member, `absorb`,
  whatever the observation held and the action (Kostrikov et al. 2019's absorbing state). The
  labels decide whether ending is better or worse than going on; the policy cannot pick where
  to fall to be paid by the network's extrapolation to states no label showed.
- **Progress** (`prefs.reward_input=progress`, a model of states alone): the policy's reward is
  the change of the learned state reward, r = reward_std · mean_k((r̂_k(o') − r̂_k(o)) / d_k),
  where d_k is the root mean square of member k's one-step differences r̂_k(o_{t+1}) − r̂_k(o_t)
  over recent experience (recomputed with μ_k, σ_k). The offsets cancel in a difference and are
  not subtracted, so the reward stays a pure difference of a potential (docs/preferences.md,
  "What the model judges").
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import torch
from torch import nn

from backflip.cnns import REWARD_CNN_MIN, pick_cnn
from backflip.nets import SpatialSoftmax, categorical_parts
from backflip.normalize import RunningMeanStd

VAL_FRACTION = 1 / math.e
# Adaptive L2: multiplied or divided by L2_STEP per round, within [L2_MIN, L2_MAX]. With few
# labels the ratio stays high whatever L2 does; the cap stops the decay from swamping the loss
# gradient (Adam's weight_decay adds l2 * w to a gradient of order 1e-2).
L2_STEP, L2_MIN, L2_MAX = 1.2, 1e-6, 1e-3


def preference_loss(returns: torch.Tensor, mu: torch.Tensor, noise: float = 0.1) -> torch.Tensor:
    """Cross-entropy of the label `mu` (B,) under Bradley–Terry on summed `returns` (B, 2).

    `noise` is the assumed probability that the labeler answered uniformly at random.
    """
    p_left = torch.sigmoid(returns[:, 0] - returns[:, 1])
    p = (1 - noise) * p_left + noise / 2
    return -(mu * torch.log(p) + (1 - mu) * torch.log1p(-p))


class PairDropout(nn.Module):
    """Dropout whose mask is shared by the two segments of a pair.

    Input (B, 2, ...): one mask of shape (B, 1, ...) is drawn and applied to both [:, 0] and
    [:, 1]. Other shapes (single segments at inference) only pass through in eval mode.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.last_mask: torch.Tensor | None = None  # kept for the shared-mask test

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.dim() < 2 or x.shape[1] != 2:
            raise ValueError("PairDropout in training mode expects (B, 2, ...) pairs")
        if x.dim() == 6 and x.stride(3) == 1 and x.shape[3] > 1:
            # channels-last feature maps (B, 2, L, C, H, W): draw the mask in the same layout
            # and scale it, so the product keeps that layout (no copies around the convolutions)
            b, _, length, c, h, w = x.shape
            u = torch.rand(b, 1, length, h, w, c, dtype=x.dtype, device=x.device)
            keep = u.movedim(-1, 3) >= self.p
            self.last_mask = keep
            return x * keep.to(x.dtype).mul_(1 / (1 - self.p))
        keep = torch.rand_like(x[:, :1]) >= self.p
        self.last_mask = keep
        return x * keep / (1 - self.p)


class PairBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm over (..., C, H, W) with any leading axes: one batch, shared statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        return super().forward(x.reshape(-1, *x.shape[-3:])).reshape(*lead, *x.shape[-3:])


def reward_cnn(obs_shape: tuple[int, ...], cnn: str = "auto") -> str:
    """The reward CNN that reads frames of `obs_shape` for `prefs.cnn` (`auto`: the paper's
    where it fits, else the small one; `backflip.cnns`)."""
    return pick_cnn(cnn, obs_shape, REWARD_CNN_MIN, "paper", "prefs.cnn")


class RewardNet(nn.Module):
    """r̂(o, a) for one ensemble member: an MLP on vectors, a CNN on images.

    MLP: [obs, action] -> 64 -> 64 -> 1, LeakyReLU(0.01), dropout before the output.
    CNN `paper` (Atari): 4 conv layers (kernels 7, 5, 3, 3; strides 3, 2, 1, 1; 16 filters),
    batchnorm and dropout after each, LeakyReLU; then [features, action] -> 64 -> 1.
    CNN `keypoints`: the paper's first layer, two 3x3 layers at its resolution (batchnorm,
    LeakyReLU), then `SpatialSoftmax`: where each of 16 feature detectors fires, as 32
    coordinates; then [coordinates, action] -> 64 -> 64 -> 1 with dropout before the output.
    CNN `small` (frames below the paper's 43x43, such as MinAtar's 10x10 grids): two 3x3 layers
    of 16 filters at full resolution (the second with stride 2 above 16 pixels), batchnorm,
    LeakyReLU and dropout after each, flattened; then [features, action] -> 64 -> 1.
    The paper's flattened features give every position its own weights, so what is learned about
    an object in one place does not carry to the next; coordinates do (docs/preferences.md,
    "From frames").
    With `heads` (discrete actions, `prefs.action_input=heads`) the action is not an input: the
    last layer has one output per action and the one-hot action picks r̂(o, a) among them,
    obs -> ... -> 64 -> |A| (as a DQN's Q-network; docs/preferences.md says why frames need it).
    Inputs are already normalized observations (RewardModel does it) and encoded actions.
    Leading axes are free: (B, 2, L, ...) for pairs, (N, ...) for single steps.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        act_dim: int,
        hidden=(64, 64),
        dropout: float = 0.0,
        channels_last: bool = True,
        heads: bool = False,
        cnn: str = "auto",
    ):
        super().__init__()
        self.image = len(obs_shape) == 3
        cnn = reward_cnn(obs_shape, cnn) if self.image else cnn
        self.channels_last = channels_last
        self.heads = heads
        n_act_in = 0 if heads else act_dim
        act = nn.LeakyReLU(0.01)
        if self.image:
            c = obs_shape[0]
            layers: list[nn.Module] = []
            if cnn == "keypoints":
                for k, s, pad in ((7, 3, 0), (3, 1, 1), (3, 1, 1)):
                    layers += [nn.Conv2d(c, 16, k, s, pad), PairBatchNorm2d(16), act]
                    c = 16
                side = (obs_shape[1] - 7) // 3 + 1, (obs_shape[2] - 7) // 3 + 1
                layers.append(SpatialSoftmax(16, *side))
            else:
                if cnn == "small":
                    kernels = ((3, 1), (3, 2 if min(obs_shape[1:]) > 16 else 1))
                else:  # the paper's
                    kernels = ((7, 3), (5, 2), (3, 1), (3, 1))
                for k, s in kernels:
                    layers += [nn.Conv2d(c, 16, k, s), PairBatchNorm2d(16), act]
                    layers.append(PairDropout(dropout))
                    c = 16
            self.convs = nn.ModuleList(layers)
            if channels_last:
                self.convs.to(memory_format=torch.channels_last)
            with torch.no_grad():
                n_feat = self._conv(torch.zeros(1, 2, 1, *obs_shape)).shape[-1]
            sizes = [n_feat + n_act_in, *(hidden if cnn == "keypoints" else hidden[:1])]
        else:
            sizes = [int(np.prod(obs_shape)) + n_act_in, *hidden]
        body: list[nn.Module] = []
        for n_in, n_out in itertools.pairwise(sizes):
            body += [nn.Linear(n_in, n_out), act]
        body += [PairDropout(dropout), nn.Linear(sizes[-1], act_dim if heads else 1)]
        self.body = nn.Sequential(*body)
        # the reward of a step in the absorbing state of a fixed horizon (module docstring)
        self.absorb = nn.Parameter(torch.zeros(()))

    def _conv(self, obs: torch.Tensor) -> torch.Tensor:
        """Features (*lead, n) of frames (*lead, C, H, W). The layers run on one (N, C, H, W)
        batch (channels-last: oneDNN's fast layout, above all for the first layer's weight
        gradient); dropout sees the pair axis again, to share its mask within a pair."""
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:])
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for layer in self.convs:
            if isinstance(layer, PairDropout):
                if layer.training and layer.p > 0:
                    x = layer(x.reshape(*lead, *x.shape[1:])).reshape(-1, *x.shape[1:])
            else:
                x = layer(x)
        return x.reshape(*lead, -1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        feat = self._conv(obs) if self.image else obs
        if self.heads:  # the one-hot action picks its output
            return (self.body(feat) * act).sum(-1)
        return self.body(torch.cat([feat, act], -1)).squeeze(-1)


class RewardModel:
    """The ensemble, its input normalization, training with adaptive L2, and the policy's reward."""

    def __init__(
        self,
        obs_space,
        act_space,
        members: int = 3,
        hidden=(64, 64),
        dropout: float = 0.0,
        lr: float = 3e-4,
        l2: float = 1e-4,
        batch_size: int = 32,
        noise: float = 0.1,
        reward_std: float = 1.0,
        rng: np.random.Generator | None = None,
        frame_stride: int = 1,
        min_std: float = 1e-6,
        use_actions: bool = True,
        action_heads: bool = False,
        cnn: str = "auto",
    ):
        self.obs_shape = tuple(obs_space.shape)
        self.image = len(self.obs_shape) == 3
        self.frame_stride = frame_stride
        self.discrete = hasattr(act_space, "n")
        # a MultiDiscrete action (too many combinations for one Discrete): its parts one-hot
        self.nvec = categorical_parts(act_space)
        self.act_space = act_space
        # without actions the model is r̂(o): a judgement of states alone (prefs.reward_input)
        self.use_actions = use_actions
        if self.nvec is not None:
            act_dim = sum(self.nvec)
        else:
            act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        self.act_dim = act_dim if use_actions else 0
        # one output per discrete action instead of the action as an input (prefs.action_input)
        self.heads = action_heads and use_actions
        if self.heads and not self.discrete:
            raise ValueError("action heads need a discrete action space")
        self.nets = [
            RewardNet(self.obs_shape, self.act_dim, hidden, dropout, heads=self.heads, cnn=cnn)
            for _ in range(members)
        ]
        self.l2 = [l2] * members
        self.opts = [torch.optim.Adam(n.parameters(), lr=lr, weight_decay=l2) for n in self.nets]
        self.obs_rms = RunningMeanStd(self.obs_shape)
        self.out_mean = np.zeros(members)
        self.out_std = np.ones(members)
        self.min_std = min_std  # the smallest scale the policy's reward is divided by
        self.diff_scale = np.ones(members)  # RMS of one-step differences (progress rewards)
        self.batch_size, self.noise, self.reward_std = batch_size, noise, reward_std
        self.flat: float | None = None  # a snapshot of a model fitted to ties alone pays this
        self.rng = rng or np.random.default_rng(0)
        self.updates = 0
        self._fused: tuple[int, FusedCNN] | None = None  # (updates when built, the fused CNNs)

    # -- inputs --------------------------------------------------------------------------------

    def observe(self, obs: np.ndarray) -> None:
        """Update the input normalizer with a batch of raw observations (N, *obs_shape)."""
        obs = np.asarray(obs)
        if obs.dtype == np.uint8 and len(obs):  # frames: float64 moments without a float64 copy
            obs = obs.reshape(-1, *self.obs_shape)  # (E[x^2] - E[x]^2 is exact enough for bytes)
            mean = obs.mean(0, dtype=np.float64)
            square = np.square(obs, dtype=np.uint16).mean(0, dtype=np.float64)
            self.obs_rms.update_from_moments(mean, np.maximum(square - mean**2, 0.0), len(obs))
            return
        self.obs_rms.update(np.asarray(obs, np.float64).reshape(-1, *self.obs_shape))

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the networks see them: normalized with the running statistics and
        clipped to [-5, 5] (float64; also the features of k-center query selection)."""
        o = (np.asarray(obs, np.float64) - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + 1e-8)
        return np.clip(o, -5, 5)

    def encode(self, obs: np.ndarray, act: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized observations and encoded actions (one-hot, or scaled to [-1, 1]).

        Images are normalized in float32 by torch (a batch of 32 Atari pairs is 45M pixels:
        NumPy's float64 took ~0.5 s of it); vectors keep the float64 path their results were
        recorded with."""
        if self.image:  # channels-last: the frames are permuted once, as uint8 (4x less to move)
            mean, inv_std = self._image_stats()
            raw = torch.as_tensor(np.asarray(obs))
            lead, frame = raw.shape[:-3], raw.shape[-3:]
            o = raw.reshape(-1, *frame).contiguous(memory_format=torch.channels_last)
            o = o.to(torch.float32).sub_(mean).mul_(inv_std).clamp_(-5, 5).view(*lead, *frame)
        else:
            o = torch.as_tensor(self.normalize_obs(obs), dtype=torch.float32)
        if not self.use_actions:  # an empty action encoding: r̂(o)
            return o, o.new_zeros((*o.shape[: o.dim() - len(self.obs_shape)], 0))
        if self.discrete:
            a = torch.nn.functional.one_hot(torch.as_tensor(act, dtype=torch.long), self.act_dim)
            a = a.float()
        elif self.nvec is not None:
            a = torch.as_tensor(parts_one_hot(act, self.nvec))
        else:
            low, high = self.act_space.low, self.act_space.high
            scaled = 2 * (np.clip(act, low, high) - low) / (high - low) - 1
            a = torch.as_tensor(scaled, dtype=torch.float32).reshape(*np.shape(act)[:-1], -1)
        return o, a

    def _image_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The input normalizer's mean and 1/std as float32 tensors, cached while its arrays
        are the same objects (every update and load replaces them)."""
        rms, cached = self.obs_rms, getattr(self, "_stats_cache", None)
        if cached is None or cached[0] is not rms.mean or cached[1] is not rms.var:
            cl = torch.channels_last  # (1, C, H, W) in the layout of the batches they meet
            mean = torch.as_tensor(rms.mean, dtype=torch.float32)[None].contiguous(memory_format=cl)
            inv_std = torch.as_tensor(1 / np.sqrt(rms.var + 1e-8), dtype=torch.float32)[None]
            inv_std = inv_std.contiguous(memory_format=cl)
            self._stats_cache = cached = (rms.mean, rms.var, mean, inv_std)
        return cached[2], cached[3]

    # -- training ------------------------------------------------------------------------------

    def pair_returns(
        self, net: RewardNet, obs: torch.Tensor, act: torch.Tensor, absorbing=None
    ) -> torch.Tensor:
        """(B, 2) summed predicted rewards of the pairs (B, 2, L, ...) in one forward pass; steps
        in the absorbing state (`absorbing`, (B, 2, L) booleans) are worth the member's
        `absorb`."""
        r = net(obs, act)
        if absorbing is not None:
            r = torch.where(absorbing, net.absorb, r)
        return r.sum(-1)

    def train_step(self, pairs: PairSet) -> float:
        """One Adam step per member on a minibatch drawn with its bootstrap weights.

        With `frame_stride` k > 1 each minibatch sums r̂ over every k-th step of its segments,
        from one random offset o, times k: k·Σ_{t ≡ o (mod k)} r̂_t, whose mean over the offsets
        is the segment's return Σ_t r̂_t, so the loss's argument is an unbiased estimate of the
        paper's at 1/k of the frames (a random temporal crop, as SURF's). With Atari's 4 stacked
        frames, k = 4 still shows the network every frame of the segment once. Validation,
        query selection and the policy's reward always use every step.
        """
        losses = []
        k_stride = self.frame_stride
        offset = int(self.rng.integers(k_stride)) if k_stride > 1 else 0
        for k, (net, opt) in enumerate(zip(self.nets, self.opts, strict=True)):
            net.train()
            w = pairs.weights[pairs.train, k]
            if w.sum() == 0:
                continue
            idx = self.rng.choice(pairs.train, size=self.batch_size, p=w / w.sum())
            obs, act, mu, absorbing = pairs.batch(idx, self, offset, k_stride)
            returns = self.pair_returns(net, obs, act, absorbing)
            if k_stride > 1:
                returns = returns * k_stride
            loss = preference_loss(returns, mu, self.noise).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        self.updates += 1
        return float(torch.stack(losses).mean()) if losses else float("nan")

    @torch.no_grad()
    def evaluate(self, pairs: PairSet, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per member: mean loss and accuracy (on non-tied labels) over pairs `idx` (eval mode)."""
        losses, accs = np.zeros(len(self.nets)), np.full(len(self.nets), np.nan)
        if len(idx) == 0:
            return np.full(len(self.nets), np.nan), accs
        step = 16 if self.image else 256  # 16 Atari pairs are 800 frames, 90 MB as floats
        for start in range(0, len(idx), step):
            chunk = idx[start : start + step]
            obs, act, mu, absorbing = pairs.batch(chunk, self)
            clear = mu != 0.5
            rets = self.absorbed(self._all_members(obs, act), absorbing).sum(-1)  # (members, B, 2)
            for k in range(len(self.nets)):
                ret = rets[k]
                losses[k] += float(preference_loss(ret, mu, self.noise).sum())
                right = ((ret[:, 0] > ret[:, 1]).float() == mu)[clear]
                accs[k] = (0 if np.isnan(accs[k]) else accs[k]) + float(right.sum())
        n_clear = max(1, int(np.sum(pairs.mu[idx] != 0.5)))
        return losses / len(idx), accs / n_clear

    def adapt_l2(self, train_loss: np.ndarray, val_loss: np.ndarray) -> None:
        """Keep each member's validation loss within 1.1–1.5× its training loss."""
        for k, opt in enumerate(self.opts):
            ratio = val_loss[k] / max(train_loss[k], 1e-8)
            if not np.isfinite(ratio):
                continue
            if ratio > 1.5:
                self.l2[k] = min(self.l2[k] * L2_STEP, L2_MAX)
            elif ratio < 1.1:
                self.l2[k] = max(self.l2[k] / L2_STEP, L2_MIN)
            for g in opt.param_groups:
                g["weight_decay"] = self.l2[k]

    @torch.no_grad()
    def calibrate(self, obs: np.ndarray, act: np.ndarray, transitions=None, absorbing=None) -> None:
        """Per-member output offset and scale over recent experience (obs, act; `absorbing`:
        which of those steps were in the absorbing state); with `transitions` (o_t, o_{t+1}),
        pairs of consecutive observations, a model of states also gets the scale of its
        one-step differences (the reward of `progress`)."""
        raw = self.absorbed(self.raw_outputs(obs, act), absorbing)
        for k, r in enumerate(raw.numpy()):
            self.out_mean[k], self.out_std[k] = r.mean(), max(r.std(), self.min_std)
        if transitions is not None and not self.use_actions:
            diff = self.raw_rewards(transitions[1], None) - self.raw_rewards(transitions[0], None)
            self.diff_scale = np.maximum(np.sqrt(np.mean(diff**2, axis=1)), self.min_std)

    @torch.no_grad()
    def raw_outputs(self, obs: np.ndarray, act: np.ndarray) -> torch.Tensor:
        """(members, *lead) raw outputs for raw inputs (*lead, ...), encoded in chunks of the
        first axis small enough that images stay ~100 MB as floats."""
        per_item = int(np.prod(np.shape(obs)[1:])) // max(1, int(np.prod(self.obs_shape)))
        step = max(1, 1024 // max(1, per_item)) if self.image else len(obs) or 1
        out = []
        for start in range(0, max(len(obs), 1), step):
            o, a = self.encode(obs[start : start + step], act[start : start + step])
            out.append(self._all_members(o, a))
        return out[0] if len(out) == 1 else torch.cat(out, 1)

    def absorb_values(self) -> torch.Tensor:
        """(members,) each member's reward for a step in the absorbing state."""
        return torch.stack([net.absorb.detach() for net in self.nets])

    def absorbed(self, out: torch.Tensor, absorbing) -> torch.Tensor:
        """Raw outputs (members, *lead) with the steps in the absorbing state (`absorbing`,
        booleans of shape *lead, or None: none) worth each member's `absorb`."""
        if absorbing is None:
            return out
        mask = torch.as_tensor(np.asarray(absorbing, bool))
        if not bool(mask.any()):
            return out
        values = self.absorb_values().reshape(-1, *([1] * mask.dim()))
        return torch.where(mask, values, out)

    def _all_members(self, o: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """(members, *lead) raw outputs in eval mode for encoded inputs (*lead, ...). CNN
        ensembles go through `FusedCNN` (built again after training steps), MLPs member by
        member (the path their recorded results used)."""
        if not self.image:
            out = []
            for net in self.nets:
                net.eval()
                out.append(net(o, a))
            return torch.stack(out)
        if self._fused is None or self._fused[0] != self.updates:
            for net in self.nets:
                net.eval()
            self._fused = (self.updates, FusedCNN(self.nets))
        return self._fused[1](o, a)

    # -- using it ------------------------------------------------------------------------------

    @torch.no_grad()
    def raw_rewards(self, obs: np.ndarray, act: np.ndarray | None, absorbing=None) -> np.ndarray:
        """(members, N) raw outputs r̂_k of N steps (`act` is unused by a model of states);
        steps in the absorbing state (`absorbing`, N booleans) are worth `absorb`."""
        if act is None:
            act = np.zeros(len(obs), np.int64)
        fused = getattr(self, "fused", None)
        if fused is not None:  # a snapshot's MLPs, in NumPy
            return fused(obs, act, absorbing)
        return self.absorbed(self.raw_outputs(obs, act), absorbing).numpy()

    def member_rewards(self, obs: np.ndarray, act: np.ndarray, absorbing=None) -> np.ndarray:
        """(members, N) normalized rewards of N steps."""
        raw = self.raw_rewards(obs, act, absorbing)
        return (raw - self.out_mean[:, None]) / self.out_std[:, None]

    def reward(self, obs: np.ndarray, act: np.ndarray, absorbing=None) -> np.ndarray:
        """The reward the policy sees: reward_std · mean over members of normalized r̂_k (or
        the same for every step: `snapshot`)."""
        if self.flat is not None:
            return np.full(len(obs), self.flat)
        fused = getattr(self, "fused", None)
        if fused is not None:  # a snapshot of MLPs: NumPy, one product (the hot path)
            return fused.reward(obs, act, absorbing)
        return self.reward_std * self.member_rewards(obs, act, absorbing).mean(0)

    def progress(
        self, obs: np.ndarray, next_obs: np.ndarray, absorbing=None, absorbing_next=None
    ) -> np.ndarray:
        """The reward of `prefs.reward_input=progress` (a model of states): the change of the
        learned state reward, reward_std · mean_k((r̂_k(next_obs) − r̂_k(obs)) / d_k); a state
        in the absorbing state (`absorbing`, `absorbing_next`) is worth `absorb`."""
        if self.flat is not None:
            return np.full(len(obs), self.flat)
        both = None
        if absorbing is not None or absorbing_next is not None:
            n = len(obs)
            both = np.concatenate(
                [
                    np.zeros(n, bool) if absorbing is None else absorbing,
                    np.zeros(n, bool) if absorbing_next is None else absorbing_next,
                ]
            )
        raw = self.raw_rewards(np.concatenate([obs, next_obs]), None, both)
        n = len(obs)
        diff = (raw[:, n:] - raw[:, :n]) / self.diff_scale[:, None]
        return self.reward_std * diff.mean(0)

    @torch.no_grad()
    def preference_probs(self, left, right) -> np.ndarray:
        """(members, B): each member's P̂[left ≻ right] for candidate pairs (query selection).

        `left`, `right`: (obs (B, L, ...), actions (B, L, ...)[, absorbing (B, L)]).
        """
        obs = np.stack([left[0], right[0]], 1)
        act = np.stack([left[1], right[1]], 1)
        absorbing = None
        if len(left) > 2:
            absorbing = np.stack([left[2], right[2]], 1)
        ret = self.absorbed(self.raw_outputs(obs, act), absorbing).sum(-1)  # (members, B, 2)
        return torch.sigmoid(ret[..., 0] - ret[..., 1]).numpy()

    def preference_variance(self, left, right) -> np.ndarray:
        """Variance across members of P̂[left ≻ right] for candidate pairs (disagreement)."""
        return np.var(self.preference_probs(left, right), 0)

    def snapshot(self, informed: bool = True) -> RewardModel:
        """A frozen copy for the policy's env wrapper (another thread may go on training).

        Not `informed` (no label so far preferred one clip of its pair: every answer "equally
        good"), the copy pays the same, −reward_std, for every step, absorbed ones and an end
        included (`flat`). A model fitted to ties alone has learned that nothing matters; its
        leftover variation, however small, would be followed at full scale by a learner that
        normalizes its advantages (PPO on Acrobot, 500 of 500 labels "equal": the entropy
        collapsed within 9k steps onto it and the goal was never found). A constant prefers no
        behaviour to another under a fixed horizon (every path pays it for ever), and a negative
        one, like the −1 per step of Gymnasium's goal tasks, keeps a value function that starts
        near 0 optimistic about states it has not seen: the learner explores until some clip
        shows what the labels care about (Acrobot: 8 of 8 seeds reach the goal, 4 of 8 with 0;
        docs/preferences.md)."""
        twin = copy.copy(self)
        twin.flat = None if informed else -float(self.reward_std)
        twin.nets = [copy.deepcopy(n).eval() for n in self.nets]
        twin.opts = []
        twin.obs_rms = copy.deepcopy(self.obs_rms)
        twin.out_mean, twin.out_std = self.out_mean.copy(), self.out_std.copy()
        twin.diff_scale = self.diff_scale.copy()
        twin.fused = None if twin.nets[0].image else NumpyEnsemble(twin)
        twin._fused = (twin.updates, FusedCNN(twin.nets)) if twin.image else None
        twin._stats_cache = None
        return twin

    def state_dict(self) -> dict:
        return {
            "nets": [n.state_dict() for n in self.nets],
            "l2": list(self.l2),
            "obs_rms": self.obs_rms.state_dict(),
            "out_mean": self.out_mean.tolist(),
            "out_std": self.out_std.tolist(),
            "diff_scale": self.diff_scale.tolist(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        for net, s in zip(self.nets, state["nets"], strict=True):
            # saved before the absorbing state had a value: 0, what a new member starts from
            net.load_state_dict({"absorb": torch.zeros(()), **s})
        self.l2 = list(state["l2"])
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.out_mean, self.out_std = np.array(state["out_mean"]), np.array(state["out_std"])
        # saved before progress rewards existed: the scale of the levels (not of the changes)
        self.diff_scale = np.array(state.get("diff_scale", state["out_std"]))
        self.updates = int(state["updates"])
        self._fused = None


def parts_one_hot(act, nvec: tuple[int, ...]) -> np.ndarray:
    """MultiDiscrete actions (..., parts) as their parts' one-hot vectors side by side
    (..., sum(nvec)) float32: the reward model's input for an action of several parts."""
    act = np.asarray(act, np.int64)
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]]).astype(np.int64)
    out = np.zeros((*act.shape[:-1], sum(nvec)), np.float32)
    np.put_along_axis(out, act + offsets, 1.0, axis=-1)
    return out


class NumpyEnsemble:
    """A snapshot's MLP members, its input normalization and its absorbing-state values, in
    NumPy (inference only): the policy's reward on every env step of one to a few env copies,
    and the relabeling of replay buffers. For a handful of rows, torch's per-call overhead cost
    more than the arithmetic: the reward of one step through `FusedMLP` and `encode` was ~10x
    this (benchmarks/prefs_overhead.py). The same numbers as the torch members up to float32
    rounding (tested)."""

    def __init__(self, model: RewardModel):
        layers = [[m for m in net.body if isinstance(m, nn.Linear)] for net in model.nets]
        self.weights = [
            np.stack([ls[i].weight.detach().numpy().T for ls in layers]).astype(np.float32)
            for i in range(len(layers[0]))
        ]  # (members, in, out)
        self.biases = [
            np.stack([ls[i].bias.detach().numpy() for ls in layers])[:, None, :].astype(np.float32)
            for i in range(len(layers[0]))
        ]
        self.absorb = np.array([float(net.absorb.detach()) for net in model.nets], np.float32)
        # the policy's reward, reward_std · mean_k (r̂_k − μ_k) / σ_k, as scale · r̂ − offset
        members = len(model.nets)
        self.scale = (model.reward_std / (members * np.asarray(model.out_std))).astype(np.float64)
        self.offset = float(np.dot(self.scale, model.out_mean))
        self.heads, self.use_actions = model.heads, model.use_actions
        self.discrete, self.act_dim, self.nvec = model.discrete, model.act_dim, model.nvec
        self.obs_dim = int(np.prod(model.obs_shape))
        self.mean = np.asarray(model.obs_rms.mean, np.float64).reshape(-1)
        self.inv_std = 1 / np.sqrt(np.asarray(model.obs_rms.var, np.float64).reshape(-1) + 1e-8)
        if not self.discrete and self.nvec is None:
            space = model.act_space
            self.low = np.asarray(space.low, np.float64).reshape(-1)
            self.high = np.asarray(space.high, np.float64).reshape(-1)
            self.span = self.high - self.low

    def reward(self, obs, act, absorbing=None) -> np.ndarray:
        """The policy's reward for N steps (`RewardModel.reward`), in one matrix product over
        the members' raw outputs."""
        return self.scale @ self(obs, act, absorbing) - self.offset

    def __call__(self, obs, act, absorbing=None) -> np.ndarray:
        """(members, N) raw outputs for N steps' raw observations and actions."""
        o = np.asarray(obs).reshape(-1, self.obs_dim)
        x = (o - self.mean) * self.inv_std
        x = np.minimum(np.maximum(x, -5, out=x), 5, out=x).astype(np.float32)
        n = len(x)
        onehot = None
        if self.use_actions:
            if self.discrete:
                onehot = np.zeros((n, self.act_dim), np.float32)
                onehot[np.arange(n), np.asarray(act, np.int64).reshape(-1)] = 1.0
                a = onehot
            elif self.nvec is not None:
                a = parts_one_hot(np.asarray(act).reshape(n, -1), self.nvec)
            else:
                # 2 (clip(a) - low) / (high - low) - 1, the same operations in place (np.clip's
                # own Python costs more than its arithmetic on one row)
                a = np.maximum(np.asarray(act, np.float64).reshape(n, -1), self.low)
                np.minimum(a, self.high, out=a)
                a -= self.low
                a *= 2
                a /= self.span
                a -= 1
                a = a.astype(np.float32)
            if not self.heads:
                x = np.concatenate([x, a], 1)
        h = x[None]
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < last:
                h = np.maximum(h, 0.01 * h)  # LeakyReLU(0.01)
        out = (h * onehot[None]).sum(-1) if self.heads else h[..., 0]
        if absorbing is not None:
            mask = np.asarray(absorbing, bool).reshape(-1)
            if mask.any():
                out = np.where(mask[None], self.absorb[:, None], out)
        return out.astype(np.float64)


class FusedMLP:
    """The members' MLPs evaluated as one batched matmul per layer (inference only).

    Called on every env step of the policy, the ensemble's per-module Python overhead costs
    several times the arithmetic; stacking the members' weights makes it one `baddbmm` per
    layer (~6x faster for 3 members on 8 env copies). Dropout is the identity at inference.
    """

    def __init__(self, nets: list[RewardNet]):
        self.heads = nets[0].heads
        layers = [[m for m in net.body if isinstance(m, nn.Linear)] for net in nets]
        self.weights = [
            torch.stack([ls[i].weight.detach() for ls in layers]).transpose(1, 2)
            for i in range(len(layers[0]))
        ]
        self.biases = [
            torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1)
            for i in range(len(layers[0]))
        ]

    def __call__(self, x: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Features and encoded actions (N, ...) -> (members, N), or per-member features
        (members, N, in) with actions (members, N, |A|). As `RewardNet.forward`: the action joins
        the features, or with action heads its one-hot picks each row's output."""
        if not self.heads:
            x = torch.cat([x, act.expand(*x.shape[:-1], -1)], -1)
        h = x.expand(len(self.weights[0]), -1, -1) if x.dim() == 2 else x
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if i < len(self.weights) - 1:
                h = torch.nn.functional.leaky_relu(h, 0.01)
        if self.heads:
            return (h * act).sum(-1)
        return h.squeeze(-1)


class FusedCNN:
    """The members' CNNs in eval mode as one network (inference only: the policy's reward,
    calibration, validation and query selection).

    Batchnorm in eval mode is an affine map per channel, folded into the convolution before it
    (w·γ/√(v + ε), (b − m)·γ/√(v + ε) + β); dropout is the identity. The first layer's members
    all read the same frames, so their filters are concatenated into one convolution with
    members × 16 outputs; the later layers are grouped convolutions (one group per member),
    and the dense layers `FusedMLP`'s batched matmuls (keypoints: one softmax over every
    member's channels between them). So the whole ensemble is four convolutions and two matmuls
    per batch, whatever the number of members, instead of members × 13 modules (equal to the
    members one by one up to float rounding; tested).
    """

    def __init__(self, nets: list[RewardNet]):
        self.members = len(nets)
        self.channels_last = nets[0].channels_last
        self.layers: list[tuple[torch.Tensor, torch.Tensor, int, int, int]] = []
        convs = [[m for m in n.convs if isinstance(m, nn.Conv2d)] for n in nets]
        softmax = [m for n in nets for m in n.convs if isinstance(m, SpatialSoftmax)]
        # keypoints: the members' temperatures side by side, as their channels
        self.keypoints = None
        if softmax:
            temperature = torch.cat([m.temperature.detach() for m in softmax])
            self.keypoints = (temperature, softmax[0].grid_x, softmax[0].grid_y)
        norms = [[m for m in n.convs if isinstance(m, nn.BatchNorm2d)] for n in nets]
        for i in range(len(convs[0])):
            ws, bs = [], []
            for conv, bn in zip((c[i] for c in convs), (b[i] for b in norms), strict=True):
                scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
                ws.append(conv.weight.detach() * scale[:, None, None, None])
                bs.append((conv.bias.detach() - bn.running_mean) * scale + bn.bias.detach())
            w = torch.cat(ws)
            if self.channels_last:
                w = w.contiguous(memory_format=torch.channels_last)
            groups = 1 if i == 0 else self.members
            conv = convs[0][i]
            self.layers.append((w, torch.cat(bs), conv.stride[0], conv.padding[0], groups))
        self.mlp = FusedMLP(nets)

    def __call__(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Encoded frames (*lead, C, H, W) and actions (*lead, A) -> (members, *lead)."""
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:])
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for w, b, stride, padding, groups in self.layers:
            x = nn.functional.conv2d(x, w, b, stride, padding, groups=groups)
            x = nn.functional.leaky_relu(x, 0.01)
        n, m = x.shape[0], self.members
        if self.keypoints is not None:  # SpatialSoftmax on every member's channels at once
            temperature, grid_x, grid_y = self.keypoints
            p = torch.softmax(x.reshape(n, x.shape[1], -1) * temperature[:, None], -1)
            coords = [(p @ g).reshape(n, m, -1) for g in (grid_x, grid_y)]
            feat = torch.cat(coords, -1).transpose(0, 1)  # (members, n, 2C): x's, then y's
        else:
            feat = x.reshape(n, m, -1).transpose(0, 1)  # each member's (C, H, W) flattened
        a = act.reshape(n, -1).expand(m, n, -1)
        return self.mlp(feat, a).reshape(m, *lead)


class StackedFrames:
    """A segment's observations, kept as its distinct frames when they are stacked frames.

    Atari observations are the last k frames (k, H, W), so consecutive observations of a
    segment (which never crosses an episode end) share k − 1 frames: (L, k, H, W) is held as
    the L + k − 1 frames (4x less memory for 25 steps of 4 frames: 0.7 MB -> 0.2 MB per
    segment, and a pair set holds up to 2 × `buffer_labels` of them). `obs` gives the
    (L, k, H, W) observations back, as a view. Other observations are kept as they are.
    """

    __slots__ = ("frames", "k", "raw")

    def __init__(self, obs: np.ndarray):
        obs = np.asarray(obs)
        self.raw, self.frames, self.k = obs, None, 0
        if obs.ndim == 4 and obs.shape[1] > 1 and np.array_equal(obs[1:, :-1], obs[:-1, 1:]):
            self.frames, self.k, self.raw = (
                np.concatenate([obs[0], obs[1:, -1]]),
                obs.shape[1],
                None,
            )

    @property
    def obs(self) -> np.ndarray:
        if self.frames is None:
            return self.raw
        window = np.lib.stride_tricks.sliding_window_view(self.frames, self.k, axis=0)
        return window.transpose(0, 3, 1, 2)  # (L, H, W, k) -> (L, k, H, W)


class PairSet:
    """Labeled pairs in memory: segment arrays, labels, validation split, bootstrap weights."""

    def __init__(self, members: int, rng: np.random.Generator, capacity: int = 3000):
        self.members, self.rng, self.capacity = members, rng, capacity
        self.query_ids: list[int] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.mu = np.zeros(0, np.float32)
        self.is_val = np.zeros(0, bool)
        self.weights = np.zeros((0, members))
        self.segments: dict[int, tuple] = {}  # id -> (StackedFrames, actions, absorbing)
        self._known: dict[int, tuple[bool, np.ndarray]] = {}  # query id -> (val?, weights)
        # vector observations: every pair's arrays side by side, (pairs, 2, L, ...), built at
        # each sync, so that a minibatch is one index instead of a stack of 2B small arrays
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None

    def __len__(self) -> int:
        return len(self.query_ids)

    def sample_steps(self, n: int, rng: np.random.Generator):
        """`n` random single steps (obs, actions, absorbing) of the labeled clips, or None when
        there are none (the scale of what the labels tell apart: `RewardModel.calibrate`)."""
        if not self.segments:
            return None
        segs = list(self.segments.values())
        pick = rng.integers(0, len(segs), n)
        obs, act, absorbing = [], [], []
        for s in pick:
            frames, actions, mask = segs[s]
            i = int(rng.integers(0, len(actions)))
            obs.append(frames.obs[i])
            act.append(actions[i])
            absorbing.append(bool(mask[i]) if mask is not None else False)
        return np.stack(obs), np.stack(act), np.array(absorbing)

    def informative(self) -> bool:
        """Whether any label prefers one clip of its pair (not every answer "equally good")."""
        return bool(np.any(self.mu != 0.5))

    def sync(self, rows, load_segment) -> int:
        """Make the set equal to `rows` (query id, left, right, label) — the newest `capacity`
        answered queries — loading new segments with `load_segment(id) -> (obs, actions)` or
        `(obs, actions, absorbing)` (which steps were in the absorbing state; None: none).
        Returns how many pairs are new. A query keeps its split and weights for its lifetime."""
        rows = rows[-self.capacity :]
        new = 0
        for qid, left, right, _ in rows:
            if qid not in self._known:
                new += 1
                self._known[qid] = (
                    self.rng.random() < VAL_FRACTION,
                    self.rng.poisson(1.0, self.members).astype(np.float64),
                )
            for sid in (left, right):
                if sid not in self.segments:
                    obs, actions, *absorbing = load_segment(sid)
                    mask = absorbing[0] if absorbing else None
                    self.segments[sid] = (StackedFrames(obs), actions, mask)
        self.query_ids = [r[0] for r in rows]
        self.left = [r[1] for r in rows]
        self.right = [r[2] for r in rows]
        self.mu = np.array([r[3] for r in rows], np.float32)
        self.is_val = np.array([self._known[q][0] for q in self.query_ids], bool)
        self.weights = np.array([self._known[q][1] for q in self.query_ids]).reshape(
            -1, self.members
        )
        live = set(self.left) | set(self.right)
        for sid in [s for s in self.segments if s not in live]:
            del self.segments[sid]
        self._arrays = self._side_by_side()
        return new

    def _side_by_side(self):
        """(obs, actions, absorbing or None) of every pair, (pairs, 2, L, ...), for vector
        observations of equal-length segments (frames are kept per segment: 3,000 Atari pairs
        side by side would be gigabytes)."""
        if not self.left:
            return None
        first = self.segments[self.left[0]]
        if first[0].frames is not None or np.ndim(first[0].raw) != 2:
            return None
        pairs = list(zip(self.left, self.right, strict=True))
        try:
            obs = np.stack([[self.segments[a][0].raw, self.segments[b][0].raw] for a, b in pairs])
            act = np.stack([[self.segments[a][1], self.segments[b][1]] for a, b in pairs])
        except ValueError:  # segments of different lengths (an imported run's)
            return None
        length = obs.shape[2]
        masks = [(self.segments[a][2], self.segments[b][2]) for a, b in pairs]
        absorbing = None
        if any(m is not None for pair in masks for m in pair):
            absorbing = np.array(
                [[np.zeros(length, bool) if m is None else m for m in pair] for pair in masks]
            )
        return obs, act, absorbing

    @property
    def train(self) -> np.ndarray:
        return np.flatnonzero(~self.is_val)

    @property
    def val(self) -> np.ndarray:
        return np.flatnonzero(self.is_val)

    def batch(self, idx, model: RewardModel, offset: int = 0, stride: int = 1):
        """(obs (B, 2, L, ...), actions, mu (B,), absorbing (B, 2, L) or None) tensors for pairs
        `idx`, encoded by `model`; with `stride` > 1 only steps offset, offset + stride, ... of
        each segment. `absorbing` is None when no step of the batch was absorbed."""
        steps = slice(offset, None, stride)
        if self._arrays is not None:  # vectors: one index into the pairs side by side
            all_obs, all_act, all_absorbing = self._arrays
            idx = np.asarray(idx)
            o, a = model.encode(all_obs[idx][:, :, steps], all_act[idx][:, :, steps])
            absorbing = None
            if all_absorbing is not None:
                chosen = all_absorbing[idx][:, :, steps]
                absorbing = torch.as_tensor(chosen) if chosen.any() else None
            return o, a, torch.as_tensor(self.mu[idx]), absorbing
        obs = np.stack(
            [
                np.stack(
                    [
                        self.segments[self.left[i]][0].obs[steps],
                        self.segments[self.right[i]][0].obs[steps],
                    ]
                )
                for i in idx
            ]
        )
        act = np.stack(
            [
                np.stack(
                    [self.segments[self.left[i]][1][steps], self.segments[self.right[i]][1][steps]]
                )
                for i in idx
            ]
        )
        o, a = model.encode(obs, act)
        masks = [(self.segments[self.left[i]][2], self.segments[self.right[i]][2]) for i in idx]
        absorbing = None
        if any(m is not None for pair in masks for m in pair):
            length = o.shape[2]
            absorbing = torch.as_tensor(
                np.array(
                    [
                        [np.zeros(length, bool) if m is None else m[steps] for m in pair]
                        for pair in masks
                    ]
                )
            )
        return o, a, torch.as_tensor(self.mu[idx]), absorbing
