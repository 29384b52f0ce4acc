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
    assert not fastpath.adam_step(opt, [flat.param], [flat.grad])
    monkeypatch.setattr(fastpath, "ENABLED", True)
    assert fastpath.adam_step(opt, [flat.param], [flat.grad])
    # not a fused Adam: the caller's opt.step()
    sgd = torch.optim.SGD([flat.param], lr=0.1)
    assert not fastpath.adam_step(sgd, [flat.param], [flat.grad])


def off_policy_like_updates(fast: bool, max_norm: float, steps: int = 30):
    """A 256-256 ReLU MLP's separate parameter tensors trained by fused Adam with gradient
    clipping, as DQN trains its Q-network: through `nets.adam_step` and `nets.clip_grad_norm_`
    (the fast path) or `opt.step()` and torch's `clip_grad_norm_`; parameters, norms, losses."""
    from backflip.nets import adam_step, clip_grad_norm_

    torch.manual_seed(0)
    net = mlp([4, 256, 256, 2], "relu", orthogonal=False)
    params = list(net.parameters())
    opt = torch.optim.Adam(params, lr=2e-3, fused=True)
    g = torch.Generator().manual_seed(1)
    norms, losses = [], []
    for _ in range(steps):
        x, y = torch.randn(64, 4, generator=g), 30 * torch.randn(64, 2, generator=g)
        loss = nn.functional.smooth_l1_loss(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if fast:
            norms.append(clip_grad_norm_(params, max_norm).item())
            adam_step(opt)
        else:
            norms.append(nn.utils.clip_grad_norm_(params, max_norm).item())
            opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in params], norms, losses


@pytest.mark.parametrize("max_norm", [float("inf"), 10.0, 0.2])
def test_adam_and_clipping_on_separate_tensors_are_torchs_bit_for_bit(max_norm):
    # DQN, TD3, SAC and VPG step their optimizers and clip through these: their curves must not
    # move (benchmarks/same_numbers.py checks whole runs)
    fast, fast_norms, fast_losses = off_policy_like_updates(True, max_norm)
    plain, plain_norms, plain_losses = off_policy_like_updates(False, max_norm)
    assert fast_norms == plain_norms and fast_losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(fast, plain, strict=True))
    if max_norm == 0.2:  # the clipping really clipped
        assert min(fast_norms) > 0.2


def test_norms_fall_back_to_torch_where_the_grouping_matters(monkeypatch):
    grads = [torch.ones(3), torch.ones(2, dtype=torch.float64)]
    assert fastpath.total_norm(grads) is None and fastpath.total_norm([]) is None
    assert fastpath.clip_grad_norm_(grads, 1.0) is None
    assert torch.equal(grads[0], torch.ones(3))  # untouched
    monkeypatch.setattr(fastpath, "ENABLED", False)
    assert fastpath.total_norm([torch.ones(3)]) is None


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
