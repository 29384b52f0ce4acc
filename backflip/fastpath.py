"""The fast path: the two places backflip reaches into torch's private kernels, in one module.

- `adam_step`: a fused Adam step (on a `FlatParams` buffer, or on an optimizer's own list of
  tensors) without torch.optim's Python around the kernel: the two kernels `opt.step()` runs
  (the step counts + 1, then `torch._fused_adam_`) on the same state, so the result is
  `opt.step()`'s bit for bit; `total_norm` and `clip_grad_norm_`, torch's gradient norm and
  clipping by the same kernels without the grouping around them, bit for bit.
- `tanh_mlp`: a tanh MLP on the CPU with NumPy's tanh, and with gradients on as one autograd
  node whose backward is the chain rule written out (`torch.ops.aten.tanh_backward`, the kernel
  autograd runs for tanh): the numbers of torch's own modules up to rounding (~1 ulp).

Both are on only with a torch they were checked against (`CHECKED_TORCH`: private kernels may
change their arguments between releases) and unless `BACKFLIP_FASTPATH=0`. Off, `nets` runs the
plain path: `opt.step()`, and tanh networks through torch's modules under autograd.
`tests/test_fastpath.py` runs an update both ways and compares them; what the fast path saves
is measured by `benchmarks/ppo_update_step.py` (docs/benchmarks.md).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.nn import functional as F

CHECKED_TORCH = ("2.13",)  # major.minor versions whose private kernels are called as below
SWITCH = "BACKFLIP_FASTPATH"  # "0" (or false, no, off): the plain path
TANH_DTYPES = (torch.float32, torch.float64)  # the dtypes NumPy's tanh computes in place


def supported(version: str) -> bool:
    """Whether torch `version` (e.g. "2.13.0+cpu") is one the fast path was checked against."""
    return ".".join(version.split("+")[0].split(".")[:2]) in CHECKED_TORCH


def _enabled() -> bool:
    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return (
        supported(torch.__version__)
        and hasattr(torch, "_fused_adam_")
        and hasattr(torch.ops.aten, "tanh_backward")
    )


ENABLED = _enabled()  # read at each call, so a test can switch it


def adam_step(
    opt: torch.optim.Optimizer,
    params: list[torch.Tensor] | None = None,
    grads: list[torch.Tensor] | None = None,
) -> bool:
    """`opt.step()` for a fused Adam with one parameter group, over `params` (whose gradients
    are `grads`; default: the group's parameters that have a gradient, as `opt.step()` takes
    them); False, having done nothing, when it does not apply: the fast path off, another
    optimizer or configuration, or a first step (which creates the optimizer's state)."""
    if not ENABLED or type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
        return False
    g = opt.param_groups[0]
    if g.get("amsgrad") or g.get("differentiable") or g.get("capturable") or not g.get("fused"):
        return False
    if params is None:
        params = [p for p in g["params"] if p.grad is not None]
        grads = [p.grad for p in params]
    states = [opt.state.get(p) for p in params]
    if not params or not all(states):
        return False
    steps = [st["step"] for st in states]
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(
        params,
        grads,
        [st["exp_avg"] for st in states],
        [st["exp_avg_sq"] for st in states],
        [],
        steps,
        amsgrad=False,
        lr=g["lr"],
        beta1=g["betas"][0],
        beta2=g["betas"][1],
        weight_decay=g["weight_decay"],
        eps=g["eps"],
        maximize=g["maximize"],
        grad_scale=None,
        found_inf=None,
    )
    return True


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor | None:
    """`torch.nn.utils.get_total_norm(grads)` (the L2 norm of the per-tensor L2 norms), the same
    kernels without its grouping by device and dtype; None when that grouping would matter (the
    fast path off, no tensors, or more than one device or dtype)."""
    if not ENABLED or not grads:
        return None
    first = grads[0]
    if any(g.device != first.device or g.dtype != first.dtype for g in grads):
        return None
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


def clip_grad_norm_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor | None:
    """`torch.nn.utils.clip_grad_norm_` on these gradients: the norm before clipping, and every
    gradient multiplied by min(1, max_norm / (norm + 1e-6)), by the same kernels without the
    Python around them; None, having done nothing, where `total_norm` does not apply."""
    norm = total_norm(grads)
    if norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def tanh_mlp_applies(x: torch.Tensor) -> bool:
    """Whether `tanh_mlp` takes input `x` (the fast path on, a CPU tensor of a NumPy dtype)."""
    return ENABLED and x.device.type == "cpu" and x.dtype in TANH_DTYPES


def tanh_mlp(x: torch.Tensor, params: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, last hidden activations) of linear layers (w0, b0, w1, b1, ...) with tanh
    between them, for inputs with any number of batch dimensions."""
    if not torch.is_grad_enabled():
        values = _forward(x, params)
        return values[-1], values[-2]
    if x.dim() == 2:
        return _TanhMLP.apply(x, *params)
    out, z = _TanhMLP.apply(x.reshape(-1, x.shape[-1]), *params)  # (one batch dimension)
    return out.reshape(*x.shape[:-1], -1), z.reshape(*x.shape[:-1], -1)


def _forward(x: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """[x, h1, ..., hk, output], each tanh by NumPy in place on its fresh linear output. Call
    without gradient recording."""
    values, n = [x], len(params) // 2
    for i in range(n):
        h = F.linear(values[-1], params[2 * i], params[2 * i + 1])
        if i < n - 1:
            a = h.numpy()
            np.tanh(a, out=a)
        values.append(h)
    return values


class _TanhMLP(torch.autograd.Function):
    """`_forward` as one autograd node: forward (x, w0, b0, ...) -> (output, last hidden
    activations, not differentiable: gSDE detaches them); backward is the chain rule."""

    @staticmethod
    def forward(ctx, x, *params):
        values = _forward(x, params)
        ctx.save_for_backward(*values[:-1], *params[::2])
        ctx.mark_non_differentiable(values[-2])
        return values[-1], values[-2]

    @staticmethod
    def backward(ctx, g, _):
        saved = ctx.saved_tensors
        n = len(saved) // 2
        inputs, weights = saved[:n], saved[n:]  # each linear layer's input and weight
        grads: list[torch.Tensor | None] = [None] * (2 * n)
        for i in reversed(range(n)):
            if i < n - 1:  # through tanh: g * (1 - y^2)
                g = torch.ops.aten.tanh_backward(g, inputs[i + 1])
            x = inputs[i]  # dL/dW = g^T x: MKL is faster on x^T g for x with few columns
            grads[2 * i] = x.t().mm(g).t() if x.shape[1] < g.shape[1] else g.t().mm(x)
            grads[2 * i + 1] = g.sum(0)
            if i > 0 or ctx.needs_input_grad[0]:
                g = g.mm(weights[i])
        return (g if ctx.needs_input_grad[0] else None, *grads)
