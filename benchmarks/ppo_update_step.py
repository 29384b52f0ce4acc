"""Where one PPO gradient step goes on this CPU: microbenchmarks behind docs/benchmarks.md.

Prints (one torch thread):
1. elementwise kernels on a 256 x 64 float32 batch — torch's tanh, NumPy's tanh, sigmoid, relu —
   and the matmul;
2. one PPO-shaped gradient step (two 64-64 MLPs on CartPole's 4 inputs, batch 256: clipped
   surrogate, value loss, backward, gradient clipping, fused Adam) with nn.Tanh, ReLU, a
   sigmoid-based tanh, both towers computed as one batched matmul, and backflip's own networks
   (`nets.mlp`: NumPy's tanh, one autograd node per network) alone and with `nets.FlatParams`
   (one-kernel clipping and Adam over one buffer), as `backflip/algos/ppo.py` runs it;
3. the torch profiler's top operators of the nn.Tanh step and of backflip's.

    python benchmarks/ppo_update_step.py [--steps 3000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from torch import nn

B = 256


def per_call_us(fn, n: int) -> float:
    for _ in range(200):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


class SigmoidTanh(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 2.0) * 2.0 - 1.0


def tower(act, n_out):
    return nn.Sequential(nn.Linear(4, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, n_out))


class Separate(nn.Module):
    def __init__(self, act=nn.Tanh):
        super().__init__()
        self.pi, self.v = tower(act, 2), tower(act, 1)

    def forward(self, x):
        return self.pi(x), self.v(x).squeeze(-1)


class Batched(nn.Module):
    """Both towers' hidden layers as stacked [2, in, out] weights: one baddbmm per layer."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(2, 4, 64) * 0.5)
        self.b1 = nn.Parameter(torch.zeros(2, 1, 64))
        self.w2 = nn.Parameter(torch.randn(2, 64, 64) * 0.1)
        self.b2 = nn.Parameter(torch.zeros(2, 1, 64))
        self.pi, self.v = nn.Linear(64, 2), nn.Linear(64, 1)

    def forward(self, x):
        h = torch.tanh(torch.baddbmm(self.b1, x.expand(2, *x.shape), self.w1))
        h_pi, h_v = torch.tanh(torch.baddbmm(self.b2, h, self.w2)).unbind(0)
        return self.pi(h_pi), self.v(h_v).squeeze(-1)


class Backflip(nn.Module):
    """backflip's networks: `nets.mlp` towers (NumPy tanh, one autograd node per network)."""

    def __init__(self):
        super().__init__()
        from backflip.nets import mlp

        self.pi, self.v = mlp([4, 64, 64, 2]), mlp([4, 64, 64, 1])

    def forward(self, x):
        return self.pi(x), self.v(x).squeeze(-1)


def ppo_step(model, flat=False):
    torch.manual_seed(0)
    params = list(model.parameters())
    if flat:  # as backflip's PPO: one buffer, clipping and Adam one kernel each
        from backflip.nets import FlatParams

        buffer = FlatParams(params)
        opt = torch.optim.Adam([buffer.param], 1e-3, eps=1e-5, fused=True)
    else:
        opt = torch.optim.Adam(params, 1e-3, eps=1e-5, fused=True)
    x, a = torch.randn(B, 4), torch.randint(0, 2, (B,))
    adv, ret, old_logp = torch.randn(B), torch.randn(B), torch.randn(B)

    def step():
        logits, value = model(x)
        logp_all = torch.log_softmax(logits, -1)
        logp = logp_all.gather(-1, a[:, None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        ratio = (logp - old_logp).exp()
        adv_n = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg = torch.max(-adv_n * ratio, -adv_n * ratio.clamp(0.8, 1.2)).mean()
        loss = pg + 0.5 * 0.5 * ((value - ret) ** 2).mean() - 0.0 * entropy.mean()
        if flat:
            buffer.zero_grad()
            loss.backward()
            buffer.clip_grad_norm_(0.5)
        else:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(
        f"# load average {os.getloadavg()[0]:.2f}, CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    x, w = torch.randn(B, 64), torch.randn(64, 64)
    xn, yn = x.numpy(), x.clone().numpy()
    print("\n## 1. one call on 256 x 64 float32 (us)")
    for name, fn in [
        ("tanh", lambda: torch.tanh(x)),
        ("NumPy tanh", lambda: np.tanh(xn, out=yn)),
        ("sigmoid", lambda: torch.sigmoid(x)),
        ("relu", lambda: torch.relu(x)),
        ("matmul 256x64 @ 64x64", lambda: x @ w),
    ]:
        print(f"{name:24s} {per_call_us(fn, 5000):8.1f}")
    print(f"\n## 2. one PPO gradient step, batch {B} (us)")
    for name, make in [
        ("nn.Tanh (backflip, SB3)", lambda: Separate(nn.Tanh)),
        ("ReLU (a floor)", lambda: Separate(nn.ReLU)),
        ("sigmoid-based tanh", lambda: Separate(SigmoidTanh)),
        ("towers batched (tanh)", Batched),
        ("backflip nets.mlp", Backflip),
    ]:
        print(f"{name:24s} {per_call_us(ppo_step(make()), args.steps):8.1f}")
    name = "+ FlatParams (backflip)"
    print(f"{name:24s} {per_call_us(ppo_step(Backflip(), flat=True), args.steps):8.1f}")
    from torch.profiler import ProfilerActivity, profile

    for name, step in [
        ("nn.Tanh", ppo_step(Separate(nn.Tanh))),
        ("backflip", ppo_step(Backflip(), flat=True)),
    ]:
        for _ in range(200):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(500):
                step()
        print(f"\n## 3. top operators of the {name} step (500 steps)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
