"""The fast path (private torch kernels, backflip/fastpath.py) against the plain path (torch's
modules, autograd, `opt.step()`): the same updates up to rounding, and a switch that works."""

import copy
import os
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from torch import nn

from backflip import fastpath
from backflip.nets import ActorCritic, FlatParams, mlp


def first(out):
    return out[0] if isinstance(out, tuple) else out


def ppo_like_updates(enabled: bool, monkeypatch, space, steps: int = 20):
    """A 64-64 tanh actor-critic on one buffer, trained by fused Adam with gradient clipping on
    a fixed stream of batches, as PPO trains it; its parameters and the last loss."""
    monkeypatch.setattr(fastpath, "ENABLED", enabled)
    torch.manual_seed(0)
    ac = ActorCritic((5,), space, (64, 64), "tanh", 0.0)
    flat = FlatParams(list(ac.parameters()))
    opt = torch.optim.Adam([flat.param], lr=3e-3, eps=1e-5, fused=True)
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        x, w = torch.randn(256, 5, generator=g), torch.randn(256, generator=g)
        with torch.no_grad():  # the rollout's forward pass, as the loop runs it
            out_rollout, _ = ac(x)
        out, v = ac(x)
        a = (
            torch.randint(0, space.n, (256,), generator=g)
            if isinstance(space, gym.spaces.Discrete)
            else torch.randn(256, *space.shape, generator=g)
        )
        logp, entropy = ac.logp_entropy(out, a)
        loss = -(logp * w).mean() + 0.5 * (v**2).mean() - 0.01 * entropy.mean()
        flat.zero_grad()
        loss.backward()
        flat.clip_grad_norm_(0.5)
        opt.param_groups[0]["lr"] = 3e-3 * (1 - i / steps)
        flat.adam_step(opt)
        # the rollout and the update see the same numbers on either path
        assert torch.equal(first(out_rollout), first(out).detach())
    return flat.data.clone(), loss.item()


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,))])
def test_the_fast_and_the_plain_path_train_the_same_network(space, monkeypatch):
    assert fastpath.ENABLED, "torch 2.13 is pinned: the fast path must be on by default"
    fast, fast_loss = ppo_like_updates(True, monkeypatch, space)
    plain, plain_loss = ppo_like_updates(False, monkeypatch, space)
    assert not torch.equal(fast, plain)  # different kernels really ran (NumPy's tanh, ...)
    assert torch.allclose(fast, plain, rtol=1e-4, atol=1e-6)
    assert fast_loss == pytest.approx(plain_loss, rel=1e-4, abs=1e-6)


def test_the_plain_path_is_torchs_own_modules(monkeypatch):
    monkeypatch.setattr(fastpath, "ENABLED", False)
    torch.manual_seed(0)
    net = mlp([4, 16, 8, 3])
    x = torch.randn(6, 4, requires_grad=True)
    reference = copy.deepcopy(net)
    w = torch.randn(6, 3)
    (net(x) * w).sum().backward()
    grad_x, x.grad = x.grad.clone(), None
    (nn.Sequential(*reference)(x) * w).sum().backward()
    assert torch.equal(grad_x, x.grad)
    for p, p_ref in zip(net.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p.grad, p_ref.grad)


def test_adam_step_falls_back_to_opt_step_off_the_fast_path(monkeypatch):
    torch.manual_seed(0)
    flat = FlatParams(list(ActorCritic((4,), gym.spaces.Discrete(2), (8,)).parameters()))
    opt = torch.optim.Adam([flat.param], lr=1e-3, fused=True)
    flat.grad.fill_(0.1)
    opt.step()  # the first step creates the state
    monkeypatch.setattr(fastpath, "ENABLED", False)
    assert not fastpath.adam_step(opt, flat.param, flat.grad)
    monkeypatch.setattr(fastpath, "ENABLED", True)
    assert fastpath.adam_step(opt, flat.param, flat.grad)
    # not a fused Adam: the caller's opt.step()
    sgd = torch.optim.SGD([flat.param], lr=0.1)
    assert not fastpath.adam_step(sgd, flat.param, flat.grad)


def test_the_torch_version_check():
    assert fastpath.supported("2.13.0") and fastpath.supported("2.13.1+cpu")
    assert not fastpath.supported("2.12.1") and not fastpath.supported("3.0.0")


@pytest.mark.parametrize("value, expected", [("0", "False"), ("off", "False"), ("1", "True")])
def test_the_environment_variable_switches_it(value, expected):
    env = {**os.environ, fastpath.SWITCH: value}
    out = subprocess.run(
        [sys.executable, "-c", "from backflip import fastpath; print(fastpath.ENABLED)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == expected
