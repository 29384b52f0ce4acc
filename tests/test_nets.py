"""nets.FlatParams: one buffer for all parameters and gradients, with results bit for bit those of
torch's per-tensor clipping and optimizers (A2C and PPO rely on that to stay reproducible)."""

import copy
import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from backflip.nets import ActorCritic, FlatParams


def loss_of(ac: ActorCritic, x, a, w):
    out, v = ac(x)
    logp, entropy = ac.logp_entropy(out, a)
    return -(logp * w).mean() + 0.5 * (v**2).mean() - 0.01 * entropy.mean()


@pytest.mark.parametrize("optimizer", ["rmsprop-flat", "adam-fused"])
@pytest.mark.parametrize("max_norm", [0.5, math.inf])
def test_flat_updates_equal_torchs_per_tensor_updates_bit_for_bit(optimizer, max_norm):
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (3,))  # a Gaussian head: log_std is a parameter too
    ref = ActorCritic((5,), space, (64, 64), "tanh", 0.0)
    ac = copy.deepcopy(ref)
    p_ref, p = list(ref.parameters()), list(ac.parameters())
    flat = FlatParams(p)
    if optimizer == "rmsprop-flat":  # one kernel per step over the whole buffer
        opt_ref = torch.optim.RMSprop(p_ref, lr=7e-4, alpha=0.99, eps=1e-5, foreach=True)
        opt = torch.optim.RMSprop([flat.param], lr=7e-4, alpha=0.99, eps=1e-5)
    else:  # per-parameter views, as PPO and A2C's default use it
        opt_ref = torch.optim.Adam(p_ref, lr=1e-3, eps=1e-5, fused=True)
        opt = torch.optim.Adam(p, lr=1e-3, eps=1e-5, fused=True)
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        x, w = torch.randn(64, 5, generator=g), torch.randn(64, generator=g)
        a = torch.randn(64, 3, generator=g)
        for q in p_ref:
            q.grad = None
        loss_of(ref, x, a, w).backward()
        norm_ref = nn.utils.clip_grad_norm_(p_ref, max_norm, foreach=True)
        opt_ref.step()
        flat.zero_grad()
        loss_of(ac, x, a, w).backward()
        norm = flat.clip_grad_norm_(max_norm)
        opt.step()
        assert torch.equal(norm, norm_ref)
    for q_ref, q in zip(p_ref, p, strict=True):
        assert torch.equal(q_ref, q)
    # the parameters really are views of the buffer
    assert all(q.untyped_storage().data_ptr() == flat.param.untyped_storage().data_ptr() for q in p)


def test_a_replaced_gradient_is_an_error_not_a_silent_zero():
    ac = ActorCritic((4,), gym.spaces.Discrete(2), (8,), "tanh", 0.0)
    params = list(ac.parameters())
    flat = FlatParams(params)
    params[0].grad = None  # what opt.zero_grad(set_to_none=True) would do
    out, v = ac(torch.randn(3, 4))
    (out.sum() + v.sum()).backward()
    with pytest.raises(RuntimeError, match="zero_grad"):
        flat.clip_grad_norm_(1.0)


@pytest.mark.parametrize(
    "obs_dim, space", [(4, gym.spaces.Discrete(2)), (3, gym.spaces.Box(-1.0, 1.0, (1,)))]
)
def test_flat_parameters_give_the_same_forward_pass_at_every_batch_size(obs_dim, space):
    # Matrix kernels choose their path by address alignment: unpadded views (a tensor starting
    # mid-cache-line) give results a rounding error off at batch sizes 1, 2 and 5 here.
    torch.manual_seed(0)
    ref = ActorCritic((obs_dim,), space, (64, 64), "tanh", 0.0)
    ac = copy.deepcopy(ref)
    FlatParams(list(ac.parameters()))
    for n in (1, 2, 5, 8, 40, 256):
        x = torch.randn(n, obs_dim)
        with torch.inference_mode():
            (out_ref, v_ref), (out, v) = ref(x), ac(x)
        assert torch.equal(out, out_ref) and torch.equal(v, v_ref), f"batch {n}"
