"""Small network builders and the action-distribution helpers the algorithms share.

The distribution helpers are plain functions on tensors rather than `torch.distributions` objects:
building a distribution object costs more than the tiny forward pass it wraps, and the hot
rollout loop calls them once per env step.
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from backflip import fastpath
from backflip.cnns import POLICY_CNN_MIN, pick_cnn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "leaky_relu": nn.LeakyReLU}


def layer_init(layer: nn.Module, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights with `gain`, constant bias (the PPO implementation-detail init)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


class MLP(nn.Sequential):
    """nn.Sequential whose forward skips the module call machinery (hooks) it never uses: it
    calls each activation's `forward` and each linear layer's kernel directly, reading weight and
    bias from the layer's parameter dict rather than through `nn.Module.__getattr__`. The network
    is called once per env step, where the call machinery costs more than the small matmuls.

    A tanh MLP on the CPU takes the fast path when it is on (`backflip.fastpath.tanh_mlp`:
    NumPy's tanh, and one autograd node with the chain rule written out), else torch's modules.
    """

    def __init__(self, *layers: nn.Module):
        super().__init__(*layers)
        self._all_tanh = len(layers) > 1 and all(
            type(m) is (nn.Linear if i % 2 == 0 else nn.Tanh) for i, m in enumerate(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_features(x)[0]

    def forward_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output, the last hidden layer's activations): gSDE's exploration features."""
        if self._all_tanh and fastpath.tanh_mlp_applies(x):
            linears = list(self._modules.values())[::2]
            params = [p for m in linears for p in (m._parameters["weight"], m._parameters["bias"])]
            return fastpath.tanh_mlp(x, params)
        *body, head = self
        for layer in body:
            x = _apply(layer, x)
        return _apply(head, x), x


def _apply(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if type(layer) is nn.Linear:
        p = layer._parameters
        return F.linear(x, p["weight"], p["bias"])
    return layer.forward(x)


def mlp(
    sizes: list[int], activation: str = "tanh", out_gain: float = 1.0, orthogonal: bool = True
) -> MLP:
    """Linear layers of `sizes` (input, hidden..., output) with `activation` between them.

    With `orthogonal`, hidden layers get gain sqrt(2) and the output layer `out_gain`
    (0.01 for a policy head keeps the initial policy near uniform, 1.0 for a value head).
    """
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        linear = nn.Linear(n_in, n_out)
        if orthogonal:
            layer_init(linear, out_gain if last else math.sqrt(2))
        layers.append(linear)
        if not last:
            layers.append(act())
    return MLP(*layers)


class NatureCNN(nn.Module):
    """The DQN-Nature encoder for stacked frames (uint8 in, features out): 84x84 in the papers,
    any size from 36x36 here (`backflip.cnns`), the linear layer sized to the last feature map.

    With `channels_last` (the default) the convolutions run on NHWC tensors: the weights are
    stored channels-last and each input batch is permuted once, as uint8, before it is scaled.
    oneDNN's NHWC kernels compute the same convolutions (equal up to float rounding; tested) and
    are much faster for the first layer's weight gradient, whose NCHW kernel on four input
    channels is the slowest op of a PPO update on Atari (docs/benchmarks.md, "Atari PPO on a
    CPU"). `nn.Flatten` reads the
    last feature map in NCHW order either way, so the linear layer sees the same features.
    """

    def __init__(
        self,
        in_channels: int,
        features: int = 512,
        channels_last: bool = True,
        frame: tuple[int, int] = (84, 84),
    ):
        super().__init__()
        self.channels_last = channels_last
        h, w = frame  # 84x84: a 7x7 map of 64 channels before the linear layer
        for k, stride in ((8, 4), (4, 2), (3, 1)):
            h, w = (h - k) // stride + 1, (w - k) // stride + 1
        self.net = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * h * w, features)),
            nn.ReLU(),
        )
        self.out_dim = features
        if channels_last:
            self.net.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x.float() / 255.0)


class SpatialSoftmax(nn.Module):
    """Each channel's expected position: a softmax over its H x W map (one learned temperature
    per channel), then the mean x and y under it, in [-1, 1] (Levine, Finn et al. 2016, "End-to-end
    training of deep visuomotor policies"). (N, C, H, W) -> (N, 2C): x of every channel, then y."""

    def __init__(self, channels: int, height: int, width: int):
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(channels))
        self.register_buffer("grid_x", torch.linspace(-1, 1, width).repeat(height))
        self.register_buffer("grid_y", torch.linspace(-1, 1, height).repeat_interleave(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        p = torch.softmax(x.reshape(n, c, -1) * self.temperature[:, None], -1)
        return torch.cat([p @ self.grid_x, p @ self.grid_y], -1)


class KeypointCNN(nn.Module):
    """Where things are in a frame, as coordinates: a 7x7 stride-3 convolution, two 3x3 at its
    resolution (ReLU), then `SpatialSoftmax` (16 channels -> 32 numbers). NatureCNN's flattened
    features give each position its own weights, so what is learned about a small object in one
    place does not carry to the next; coordinates do (MovingDot84's 2x2-pixel dot:
    docs/preferences.md, "From frames"). What is where, not what it looks like: the MLPs after it
    map the coordinates to actions and values.

    Channels-last by default, as NatureCNN (its docstring): the 3x3 convolutions at full
    resolution on 16 channels: a gradient step 1.43x faster in oneDNN's NHWC kernels
    (`benchmarks/cnn_update_step.py`, docs/benchmarks.md)."""

    def __init__(self, obs_shape: tuple[int, ...], channels: int = 16, channels_last: bool = True):
        super().__init__()
        self.channels_last = channels_last
        c, h, w = obs_shape
        side = (h - 7) // 3 + 1, (w - 7) // 3 + 1
        self.net = nn.Sequential(
            layer_init(nn.Conv2d(c, channels, 7, 3)),
            nn.ReLU(),
            layer_init(nn.Conv2d(channels, channels, 3, 1, 1)),
            nn.ReLU(),
            layer_init(nn.Conv2d(channels, channels, 3, 1, 1)),
            nn.ReLU(),
            SpatialSoftmax(channels, *side),
        )
        self.out_dim = 2 * channels
        if channels_last:
            self.net.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x.float() / 255.0)


class SmallCNN(nn.Module):
    """Frames too small for NatureCNN (MinAtar's 10x10 grids, small gridworlds): two 3x3
    convolutions at full resolution (16 and 32 channels, the second with stride 2 on frames
    larger than 16 pixels), ReLU, flattened into 256 features (the shape of MinAtar's own
    network, Young & Tian 2019, one layer deeper)."""

    def __init__(self, obs_shape: tuple[int, ...], features: int = 256):
        super().__init__()
        c, h, w = obs_shape
        stride = 2 if min(h, w) > 16 else 1
        convs = nn.Sequential(
            layer_init(nn.Conv2d(c, 16, 3, 1)),
            nn.ReLU(),
            layer_init(nn.Conv2d(16, 32, 3, stride)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = convs(torch.zeros(1, *obs_shape)).shape[-1]
        self.net = nn.Sequential(*convs, layer_init(nn.Linear(n, features)), nn.ReLU())
        self.out_dim = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float() / 255.0)


def image_encoder(obs_shape: tuple[int, ...], cnn: str = "auto") -> str:
    """The policy CNN that reads frames of `obs_shape` for the setting `cnn` (`auto`: NatureCNN
    where it fits, else SmallCNN; `backflip.cnns`)."""
    return pick_cnn(cnn, obs_shape, POLICY_CNN_MIN, "nature", "cnn")


def encoder(obs_shape: tuple[int, ...], cnn: str = "auto"):
    """A feature extractor for `obs_shape` and its output size: identity for vectors; for images
    (C, H, W) the CNN `image_encoder` picks: NatureCNN (`nature`), KeypointCNN (`keypoints`) or
    SmallCNN (`small`)."""
    if len(obs_shape) == 3:
        name = image_encoder(obs_shape, cnn)
        if name == "keypoints":
            net = KeypointCNN(obs_shape)
        elif name == "small":
            net = SmallCNN(obs_shape)
        else:
            net = NatureCNN(obs_shape[0], frame=tuple(obs_shape[1:]))
        return net, net.out_dim
    return nn.Identity(), int(np.prod(obs_shape))


class ActorCritic(nn.Module):
    """Separate policy and value MLPs on a shared encoder (PPO, A2C, VPG).

    Vector observations: two MLPs with `hidden` layers. Images: a shared CNN trunk (`cnn`):
    NatureCNN with linear policy and value heads on its features, as in the Atari papers (Mnih et
    al. 2016), or KeypointCNN with the two `hidden` MLPs on its coordinates.
    Discrete actions: the policy outputs logits; Box actions: the Gaussian mean, with a learned
    state-independent log standard deviation.

    With `sde` (Box actions only), exploration is generalized state-dependent (gSDE, Raffin et
    al. 2022): the noise is a linear function of the policy's last hidden features z(s),
    ε = z(s) · W with W ~ N(0, σ²) drawn per env copy by `reset_noise` and held fixed between
    draws, so consecutive actions are explored coherently instead of jittering step by step.
    The action's distribution given s is then a Gaussian with std_k = sqrt(Σ_j z_j² σ_jk²); the
    learned parameter `log_std` is log σ, one per (feature, action dimension), and z is detached
    in the std as in SB3 (the features learn from the mean only). The policy output `out` is
    then the pair (mean, z).
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_space,
        hidden: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        sde: bool = False,
        cnn: str = "auto",
    ):
        super().__init__()
        self.trunk, n_in = encoder(obs_shape, cnn)
        # a CNN's features feed linear heads (the Atari papers); coordinates need MLPs
        image = len(obs_shape) == 3
        heads = () if image and image_encoder(obs_shape, cnn) != "keypoints" else tuple(hidden)
        # a MultiDiscrete space (too many combinations for one Discrete: `envs.adapt_actions`)
        # gets a factorized head: one categorical per part, their logits side by side
        self.nvec = categorical_parts(action_space)
        self.discrete = hasattr(action_space, "n") or self.nvec is not None
        if self.nvec is not None:
            n_out = sum(self.nvec)
        else:
            n_out = (
                action_space.n if hasattr(action_space, "n") else int(np.prod(action_space.shape))
            )
        self.pi = mlp([n_in, *heads, n_out], activation, out_gain=0.01)
        self.v = mlp([n_in, *heads, 1], activation, out_gain=1.0)
        self.sde = sde and not self.discrete
        if not self.discrete:
            shape = ((heads[-1] if heads else n_in), n_out) if self.sde else (n_out,)
            self.log_std = nn.Parameter(torch.full(shape, float(log_std_init)))
        self.sde_noise: torch.Tensor | None = None  # (envs, features, actions): W per env copy

    def forward(self, obs: torch.Tensor):
        """(policy output, value): logits for discrete actions, the Gaussian mean for Box, and
        with gSDE the pair (mean, detached last hidden features of the policy)."""
        h = self.trunk.forward(obs)
        if self.sde:
            mean, z = self.pi.forward_features(h)
            return (mean, z.detach()), self.v.forward(h).squeeze(-1)
        return self.pi.forward(h), self.v.forward(h).squeeze(-1)

    def policy(self, obs: torch.Tensor):
        """The policy output of `forward` alone (diagnostics after an update need no value)."""
        h = self.trunk.forward(obs)
        if self.sde:
            mean, z = self.pi.forward_features(h)
            return mean, z.detach()
        return self.pi.forward(h)

    def reset_noise(self, n: int) -> None:
        """gSDE: draw a fresh exploration matrix W ~ N(0, σ²) for each of `n` env copies."""
        if self.sde:
            std = self.log_std.detach().exp()
            self.sde_noise = torch.randn((n, *std.shape), device=std.device) * std

    def std(self, out) -> torch.Tensor:
        """The Gaussian's standard deviation: per action dimension, or per row with gSDE."""
        if self.sde:
            z = out[1]
            return (z.pow(2) @ self.log_std.exp().pow(2) + 1e-6).sqrt()
        return self.log_std.exp()

    def sample(self, out):
        """A sampled action and its log-probability (gSDE: one row per env copy)."""
        if self.nvec is not None:
            return multi_categorical_sample(out, self.nvec)
        if self.discrete:
            return categorical_sample(out)
        if self.sde:
            mean, z = out
            action = mean + torch.bmm(z.unsqueeze(1), self.sde_noise).squeeze(1)
            return action, gaussian_logp_entropy(mean, self.std(out).log(), action)[0]
        action = gaussian_sample(out, self.log_std)
        return action, gaussian_logp_entropy(out, self.log_std, action)[0]

    def logp_entropy(self, out, actions: torch.Tensor):
        if self.nvec is not None:
            return multi_categorical_logp_entropy(out, self.nvec, actions)
        if self.discrete:
            return categorical_logp_entropy(out, actions)
        if self.sde:
            return gaussian_logp_entropy(out[0], self.std(out).log(), actions)
        return gaussian_logp_entropy(out, self.log_std, actions)

    def greedy(self, out) -> torch.Tensor:
        if self.nvec is not None:
            return torch.stack([p.argmax(-1) for p in out.split(self.nvec, -1)], -1)
        if self.discrete:
            return out.argmax(-1)
        return out[0] if self.sde else out


def n_params(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


# --- categorical ------------------------------------------------------------------------------


def categorical_sample(logits: torch.Tensor):
    """A sampled action per row and its log-probability."""
    logp_all = torch.log_softmax(logits, -1)
    action = torch.multinomial(logp_all.exp(), 1)
    return action.squeeze(-1), logp_all.gather(-1, action).squeeze(-1)


def categorical_logp_entropy(logits: torch.Tensor, actions: torch.Tensor):
    """log pi(a|s) and the entropy of pi(.|s), per row."""
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def categorical_parts(space) -> tuple[int, ...] | None:
    """The number of choices of each part of a MultiDiscrete action space (None: another)."""
    nvec = getattr(space, "nvec", None)
    return None if nvec is None else tuple(int(n) for n in np.ravel(nvec))


def uniform_entropy(space) -> float | None:
    """The entropy of the uniform policy over a discrete action space (log n; a MultiDiscrete
    one's is the sum over its parts), what `train/entropy_norm` divides by; None for Box."""
    parts = categorical_parts(space)
    if parts is not None:
        return float(sum(math.log(n) for n in parts))
    return math.log(space.n) if hasattr(space, "n") else None


def multi_categorical_sample(logits: torch.Tensor, nvec: tuple[int, ...]):
    """One categorical per part of a MultiDiscrete action (`logits` side by side): the sampled
    actions (B, parts) and their joint log-probability, the sum of the parts'."""
    actions, logp = zip(*(categorical_sample(p) for p in logits.split(nvec, -1)), strict=True)
    return torch.stack(actions, -1), torch.stack(logp, -1).sum(-1)


def multi_categorical_logp_entropy(logits: torch.Tensor, nvec: tuple[int, ...], actions):
    """log pi(a|s) and the entropy of a factorized policy: sums over its independent parts."""
    parts = [
        categorical_logp_entropy(p, actions[..., i]) for i, p in enumerate(logits.split(nvec, -1))
    ]
    return sum(lp for lp, _ in parts), sum(h for _, h in parts)


# --- diagonal Gaussian ------------------------------------------------------------------------

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    return mean + log_std.exp() * torch.randn_like(mean)


def gaussian_logp_entropy(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor):
    """log pi(a|s) summed over action dimensions, and the entropy, per row."""
    z = (actions - mean) / log_std.exp()
    logp = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
    entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum(-1).expand(mean.shape[:-1])
    return logp, entropy


# --- off-policy pieces (DQN, DDPG, TD3, SAC) ----------------------------------------------------


class QCritics(nn.Module):
    """`n` independent Q(s, a) MLPs on the concatenated (observation, action); forward -> (n, B).

    DDPG uses one, TD3 and SAC two ("twin" critics, whose minimum curbs overestimation).
    Actions are in the actor's [-1, 1] units.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], activation: str, n: int = 2
    ):
        super().__init__()
        sizes = [obs_dim + act_dim, *hidden, 1]
        self.qs = nn.ModuleList(mlp(sizes, activation, orthogonal=False) for _ in range(n))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], -1)
        return torch.stack([q(x).squeeze(-1) for q in self.qs])


def to_bounds(a: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """An action in [-1, 1] (tanh units) -> the env's Box [low, high]."""
    return low + (a + 1.0) * 0.5 * (high - low)


def squashed_gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor):
    """a = tanh(u), u ~ N(mean, std): a sample in (-1, 1) and its log-density, per row.

    The change of variables subtracts log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) per
    dimension, written in the form that stays finite when tanh saturates.
    """
    u = mean + log_std.exp() * torch.randn_like(mean)
    logp = (-0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
    logp = logp - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
    return torch.tanh(u), logp


@torch.no_grad()
def polyak_update(target: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, parameter by parameter (tau = 1: a copy).

    Takes parameter lists (`list(net.parameters())`, made once) because walking the modules on
    every call costs as much as the update itself for small networks.
    """
    if tau == 1.0:
        torch._foreach_copy_(target, online)
    else:
        torch._foreach_lerp_(target, online, tau)


def frozen_copy(net: nn.Module) -> nn.Module:
    """A target network: a deep copy that never receives gradients."""
    target = copy.deepcopy(net)
    target.requires_grad_(False)
    return target


def params_vector(params) -> torch.Tensor:
    """The parameters as one vector, in each tensor's logical order: torch's
    `parameters_to_vector`, which `view`s each tensor and so refuses a channels-last weight."""
    return torch.cat([p.reshape(-1) for p in params])


def grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of the gradients of `params` (a 0-d tensor; no host sync)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = fastpath.total_norm(grads)
    return torch.nn.utils.get_total_norm(grads) if norm is None else norm


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_(params, max_norm)` (the norm before clipping), through
    the fast path where it applies: bit for bit, a third of its time on a small network."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = fastpath.clip_grad_norm_(grads, max_norm)
    return torch.nn.utils.clip_grad_norm_(params, max_norm) if norm is None else norm


def _dense_strides(p: torch.Tensor) -> tuple[int, ...]:
    """`p`'s strides if they lay it out densely (contiguous, or channels-last), else row-major."""
    if p.is_contiguous() or (p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)):
        return p.stride()
    return torch.empty(p.shape, device="meta").stride()


def adam_step(opt: torch.optim.Optimizer) -> None:
    """`opt.step()`: for a fused Adam on the fast path, the same kernels without torch.optim's
    Python around them, bit for bit (`fastpath.adam_step`); on a small network that wrapper
    costs as much as the kernels."""
    if not fastpath.adam_step(opt):
        opt.step()


class FlatParams:
    """Parameters and gradients re-homed in two contiguous buffers, for cheap small updates.

    After `FlatParams(params)` every parameter is a view of `self.data` and its `.grad` a view of
    `self.grad`; `backward()` accumulates into an existing `.grad` in place, so the views stay.
    Zeroing, clipping and an elementwise optimizer (Adam, RMSprop, on `[self.param]`) then cost
    one kernel each instead of one per tensor, which on a small actor-critic is a good part of
    an update. The optimizers' results equal the per-tensor ones up to rounding (tested), as
    does the gradient norm.
    Zero with `zero_grad()`; setting a `.grad` to None would detach it from the buffer.
    """

    ALIGN = 16  # elements: each tensor starts 64 bytes in, as a tensor of its own would

    def __init__(self, params: list[nn.Parameter]):
        # Matrix kernels pick their code path by address alignment, so an unaligned view gives
        # results a rounding error away from a separately allocated tensor: pad to keep it.
        starts, n = [], 0
        for p in params:
            starts.append(n)
            n += -(-p.numel() // self.ALIGN) * self.ALIGN
        ref = params[0]
        self.param = torch.zeros(n, dtype=ref.dtype, device=ref.device, requires_grad=True)
        self.param.grad = torch.zeros_like(self.param)
        self.data, self.grad = self.param.detach(), self.param.grad
        for p, i in zip(params, starts, strict=True):
            # views with the parameter's own strides: a channels-last convolution weight stays
            # channels-last (its kernels would otherwise reorder it on every call)
            view = self.data.as_strided(p.shape, _dense_strides(p), i)
            view.copy_(p.detach())
            p.data = view
            p.grad = self.grad.as_strided(p.shape, _dense_strides(p), i)
        self.params, self.grads, self.starts = params, [p.grad for p in params], starts

    def optimizer_state(self, state: dict) -> dict:
        """An optimizer's `state_dict` for `[self.param]`. One saved for the separate parameter
        tensors (PPO and A2C's Adam before the buffer) is converted: its per-tensor moments are
        laid out in the buffer, so those checkpoints still resume."""
        groups = state["param_groups"]
        ids = groups[0]["params"] if len(groups) == 1 else []
        if len(self.params) == 1 or len(ids) != len(self.params):
            return state  # already one tensor (or not ours: load_state_dict will say so)
        per_tensor = [state["state"].get(i, {}) for i in ids]
        flat = {}
        for key, value in per_tensor[0].items():
            if not (torch.is_tensor(value) and value.shape == self.params[0].shape):
                # e.g. Adam's step count, the same for every tensor
                flat[key] = value.clone() if torch.is_tensor(value) else value
                continue
            buffer = torch.zeros_like(self.data)
            for p, i, st in zip(self.params, self.starts, per_tensor, strict=True):
                buffer.as_strided(p.shape, p.stride(), i).copy_(st[key])
            flat[key] = buffer
        return {"state": {0: flat} if flat else {}, "param_groups": [{**groups[0], "params": [0]}]}

    def checkpointed(self, opt: torch.optim.Optimizer) -> FlatOptimizer:
        """`opt` (over `[self.param]`) as a checkpoint holds it: see `FlatOptimizer`."""
        return FlatOptimizer(opt, self)

    def zero_grad(self) -> None:
        self.grad.zero_()

    def adam_step(self, opt: torch.optim.Adam) -> None:
        """`opt.step()`: for a fused Adam over `[self.param]` on the fast path, the same kernels
        without torch.optim's Python around them, bit for bit (`adam_step`)."""
        adam_step(opt)

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """`nn.utils.clip_grad_norm_(params, max_norm)`: returns the global gradient norm and
        multiplies the gradients by min(1, max_norm / (norm + 1e-6)). The norm is one kernel
        over the buffer (its padding is zero), not torch's norm of per-tensor norms: equal up
        to rounding, and one kernel instead of one per tensor."""
        if any(p.grad is not g for p, g in zip(self.params, self.grads, strict=True)):
            raise RuntimeError("a .grad was replaced: zero with FlatParams.zero_grad()")
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm


class FlatOptimizer:
    """An optimizer over a `FlatParams` buffer as a checkpoint holds it: its `state_dict` as it
    is, and a `load_state_dict` that also reads one saved for the separate parameter tensors
    (`FlatParams.optimizer_state`), so that older checkpoints still resume."""

    def __init__(self, opt: torch.optim.Optimizer, flat: FlatParams):
        self.opt, self.flat = opt, flat

    def state_dict(self) -> dict:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(self.flat.optimizer_state(state))
