"""nets: FlatParams (one buffer for all parameters and gradients, with results those of torch's
per-tensor clipping and optimizers up to rounding), the fast MLP forward and its tanh MLP
autograd node, and gSDE exploration."""

import copy
import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from backflip.nets import ActorCritic, FlatParams, mlp


def loss_of(ac: ActorCritic, x, a, w):
    out, v = ac(x)
    logp, entropy = ac.logp_entropy(out, a)
    return -(logp * w).mean() + 0.5 * (v**2).mean() - 0.01 * entropy.mean()


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
@pytest.mark.parametrize("max_norm", [0.5, math.inf])
def test_flat_updates_equal_torchs_per_tensor_updates(optimizer, max_norm):
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (3,))  # a Gaussian head: log_std is a parameter too
    ref = ActorCritic((5,), space, (64, 64), "tanh", 0.0)
    ac = copy.deepcopy(ref)
    p_ref, p = list(ref.parameters()), list(ac.parameters())
    flat = FlatParams(p)
    if optimizer == "rmsprop":  # one kernel per step over the whole buffer, as A2C uses them
        opt_ref = torch.optim.RMSprop(p_ref, lr=7e-4, alpha=0.99, eps=1e-5, foreach=True)
        opt = torch.optim.RMSprop([flat.param], lr=7e-4, alpha=0.99, eps=1e-5)
    else:  # as PPO and A2C's default use it
        opt_ref = torch.optim.Adam(p_ref, lr=1e-3, eps=1e-5, fused=True)
        opt = torch.optim.Adam([flat.param], lr=1e-3, eps=1e-5, fused=True)
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
        assert torch.allclose(norm, norm_ref, rtol=1e-5)
    for q_ref, q in zip(p_ref, p, strict=True):
        assert torch.allclose(q_ref, q, rtol=1e-4, atol=1e-6)
    # the parameters really are views of the buffer, and its padding stays zero
    assert all(q.untyped_storage().data_ptr() == flat.param.untyped_storage().data_ptr() for q in p)
    assert flat.data.count_nonzero() == sum(int(q.count_nonzero()) for q in p)


@pytest.mark.parametrize("fused", [True, False])
def test_adam_step_is_opt_step_bit_for_bit(fused):
    # PPO's `flat.adam_step(opt)` skips torch.optim's wrapper; the learning curves must not move
    def make():
        torch.manual_seed(0)
        flat = FlatParams(list(ActorCritic((4,), gym.spaces.Discrete(2), (64, 64)).parameters()))
        return flat, torch.optim.Adam([flat.param], lr=3e-3, eps=1e-5, fused=fused)

    (flat_ref, opt_ref), (flat, opt) = make(), make()
    g = torch.Generator().manual_seed(1)
    for i in range(30):
        grad = torch.randn(flat.grad.shape, generator=g)
        for f, o in ((flat_ref, opt_ref), (flat, opt)):
            f.grad.copy_(grad)
            o.param_groups[0]["lr"] = 3e-3 * (1 - i / 40)  # annealed, as PPO does
        opt_ref.step()
        flat.adam_step(opt)
        assert torch.equal(flat.data, flat_ref.data)
    ref, got = opt_ref.state_dict(), opt.state_dict()  # checkpoints: the same state
    assert ref["param_groups"] == got["param_groups"]
    assert all(torch.equal(ref["state"][0][k], got["state"][0][k]) for k in ref["state"][0])
    assert got["state"][0]["step"] == 30


def test_an_optimizer_state_saved_per_tensor_resumes_on_the_flat_buffer():
    # checkpoints written before PPO and A2C's Adam moved to the buffer still resume
    torch.manual_seed(0)
    ref = ActorCritic((5,), gym.spaces.Box(-1.0, 1.0, (3,)), (16, 16), "tanh", 0.0)
    ac = copy.deepcopy(ref)
    p_ref = list(ref.parameters())
    opt_ref = torch.optim.Adam(p_ref, lr=1e-3, eps=1e-5, fused=True)
    x, a, w = torch.randn(32, 5), torch.randn(32, 3), torch.randn(32)

    def step(model, opt, flat=None):
        opt.zero_grad() if flat is None else flat.zero_grad()
        loss_of(model, x, a, w).backward()
        opt.step()

    for _ in range(3):
        step(ref, opt_ref)
    ac.load_state_dict(ref.state_dict())
    flat = FlatParams(list(ac.parameters()))
    opt = torch.optim.Adam([flat.param], lr=1e-3, eps=1e-5, fused=True)
    opt.load_state_dict(flat.optimizer_state(opt_ref.state_dict()))
    for _ in range(3):
        step(ref, opt_ref)
        step(ac, opt, flat)
    for q_ref, q in zip(p_ref, ac.parameters(), strict=True):
        assert torch.allclose(q_ref, q, rtol=1e-5, atol=1e-7)
    assert float(opt.state[flat.param]["step"]) == 6
    # a state already for the buffer passes through unchanged
    assert flat.optimizer_state(opt.state_dict()) == opt.state_dict()


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


def test_the_fast_mlp_forward_is_nn_sequentials():
    torch.manual_seed(0)
    for activation in ("tanh", "relu", "elu", "leaky_relu"):
        ac = ActorCritic((7,), gym.spaces.Discrete(3), (64, 32), activation, 0.0)
        x = torch.randn(33, 7)
        reference = nn.Sequential(*ac.pi)  # torch's own forward through each module's __call__
        out, z = ac.pi.forward_features(x)
        ref_out, ref_z = reference(x), nn.Sequential(*ac.pi[:-1])(x)
        if activation == "tanh":  # NumPy's tanh: within rounding of torch's
            assert torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(z, ref_z, atol=1e-6)
        else:  # the same kernels, bit for bit
            assert torch.equal(out, ref_out) and torch.equal(z, ref_z)
        assert torch.equal(ac.pi(x), out)


def test_tanh_mlps_compute_the_same_numbers_with_and_without_gradients():
    # The rollout's policy (no gradients) and the update's (one autograd node) must agree
    # exactly: PPO's first probability ratio of an update is then exactly 1.
    torch.manual_seed(0)
    net = mlp([5, 64, 64, 3])
    for n in (1, 8, 256):
        x = torch.randn(n, 5)
        with torch.inference_mode():
            y_rollout = net(x)
        y_update = net(x)
        assert y_update.requires_grad and torch.equal(y_update.detach(), y_rollout)


def test_the_tanh_mlp_node_gives_autograds_gradients():
    torch.manual_seed(0)
    net = mlp([4, 16, 8, 3]).double()
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(net, (x,))
    # the same gradients as torch's own modules, for the input and every parameter
    reference = copy.deepcopy(net)
    w = torch.randn(6, 3, dtype=torch.float64)
    (net(x) * w).sum().backward()
    grad_x, x.grad = x.grad.clone(), None
    (nn.Sequential(*reference)(x) * w).sum().backward()
    assert torch.allclose(grad_x, x.grad)
    for p, p_ref in zip(net.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(p.grad, p_ref.grad, rtol=1e-10, atol=1e-12)
    # inputs with no batch dimension or several
    for shape in [(4,), (2, 3, 4)]:
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(net, (x,))
        assert torch.allclose(net(x), nn.Sequential(*reference)(x))
    # other activations, devices and dtypes take torch's modules
    assert not mlp([4, 8, 2], "relu")._all_tanh and not mlp([4, 2])._all_tanh


def test_policy_alone_is_the_first_output_of_forward():
    torch.manual_seed(0)
    spaces = [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,))]
    nets = [(ActorCritic((5,), s, (16, 16), "tanh", 0.0), 5) for s in spaces] + [(sde_policy(), 3)]
    for ac, obs_dim in nets:
        x = torch.randn(32, obs_dim)
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                full, alone = ac(x)[0], ac.policy(x)
            full, alone = (o if isinstance(o, tuple) else (o,) for o in (full, alone))
            for a, b in zip(full, alone, strict=True):  # (gSDE: the mean and the features)
                assert torch.equal(a, b)
                assert a.requires_grad == b.requires_grad


# --- gSDE -------------------------------------------------------------------------------------


def sde_policy(log_std_init=-1.0):
    torch.manual_seed(0)
    return ActorCritic((3,), gym.spaces.Box(-2.0, 2.0, (2,)), (16, 16), "tanh", log_std_init, True)


def test_gsde_std_is_the_spread_of_the_noise_it_samples():
    ac = sde_policy()
    assert ac.log_std.shape == (16, 2)  # one sigma per (feature, action dimension)
    with torch.no_grad():
        out, _ = ac(torch.randn(1, 3))
        ac.reset_noise(100_000)  # 100k draws of W for the same state
        mean, z = out
        actions, _ = ac.sample((mean.expand(100_000, 2), z.expand(100_000, 16)))
    empirical = actions.std(0)
    assert torch.allclose(empirical, ac.std(out)[0], rtol=0.02), (empirical, ac.std(out))
    assert torch.allclose(actions.mean(0), mean[0], atol=0.02)


def test_gsde_noise_is_fixed_between_draws_and_differs_between_env_copies():
    ac = sde_policy()
    obs = torch.randn(1, 3).expand(4, 3)  # four env copies in the same state
    with torch.no_grad():
        ac.reset_noise(4)
        out, _ = ac(obs)
        a1, logp = ac.sample(out)
        a2, _ = ac.sample(out)
        ac.reset_noise(4)
        a3, _ = ac.sample(out)
        logp2, entropy = ac.logp_entropy(out, a1)
    assert torch.equal(a1, a2)  # the same W: the same state gives the same action
    assert not torch.equal(a1, a3)  # a fresh W explores elsewhere
    assert len(set(a1[:, 0].tolist())) == 4  # each env copy has its own W
    assert torch.allclose(logp, logp2) and entropy.shape == (4,)
    assert torch.equal(ac.greedy(out), out[0])


def test_gsde_trains_the_mean_and_log_std_but_not_the_features_through_the_std():
    ac = sde_policy()
    out, _ = ac(torch.randn(32, 3))
    ac.reset_noise(32)
    with torch.no_grad():
        a, _ = ac.sample(out)
    logp, entropy = ac.logp_entropy(out, a)
    assert not out[1].requires_grad  # z is detached: features learn from the mean only
    (-logp.mean() - entropy.mean()).backward()
    assert ac.log_std.grad is not None and ac.log_std.grad.abs().sum() > 0
    assert ac.pi[0].weight.grad.abs().sum() > 0  # through the mean


def cnn_pair(cnn: str = "auto"):
    """An Atari actor-critic with its CNN channels-last (the default) and a copy in NCHW."""
    torch.manual_seed(0)
    fast = ActorCritic((4, 84, 84), gym.spaces.Discrete(6), cnn=cnn)
    slow = ActorCritic((4, 84, 84), gym.spaces.Discrete(6), cnn=cnn)
    slow.trunk.channels_last = False
    slow.load_state_dict(fast.state_dict())
    slow.trunk.net.to(memory_format=torch.contiguous_format)
    return fast, slow


@pytest.mark.parametrize("cnn", ["nature", "keypoints"])
def test_the_channels_last_cnn_computes_the_nchw_cnns_outputs_and_gradients(cnn):
    fast, slow = cnn_pair(cnn)
    conv = fast.trunk.net[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert slow.trunk.net[0].weight.is_contiguous()
    x = torch.randint(0, 256, (13, 4, 84, 84), dtype=torch.uint8)
    for ac in (fast, slow):
        out, v = ac(x)
        (out.logsumexp(-1).mean() + v.pow(2).mean()).backward()
    (out_f, v_f), (out_s, v_s) = fast(x), slow(x)
    assert torch.allclose(out_f, out_s, rtol=1e-4, atol=1e-5)
    assert torch.allclose(v_f, v_s, rtol=1e-4, atol=1e-5)
    for (name, p_f), p_s in zip(fast.named_parameters(), slow.parameters(), strict=True):
        assert torch.allclose(p_f.grad, p_s.grad, rtol=1e-3, atol=1e-6), name
    # a single frame (the rollout's batch of one env copy) takes the same path
    assert torch.allclose(fast(x[:1])[1], slow(x[:1])[1], rtol=1e-4, atol=1e-5)


def test_flat_parameters_keep_a_channels_last_weight_channels_last_with_its_values():
    fast, slow = cnn_pair()
    before = {k: v.clone() for k, v in fast.state_dict().items()}
    flat = FlatParams(list(fast.parameters()))
    for k, v in fast.state_dict().items():
        assert torch.equal(v, before[k]), k
    for p in fast.trunk.parameters():
        if p.dim() == 4:
            assert p.is_contiguous(memory_format=torch.channels_last)
            assert p.grad.stride() == p.stride()
            assert p.data_ptr() >= flat.data.data_ptr()  # a view of the buffer
    x = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    out, v = fast(x)
    (out.sum() + v.sum()).backward()
    out, v = slow(x)
    (out.sum() + v.sum()).backward()
    for p_f, p_s in zip(fast.parameters(), slow.parameters(), strict=True):
        assert torch.allclose(p_f.grad, p_s.grad, rtol=1e-3, atol=1e-6)
    # the buffer's gradient holds exactly the parameters' gradients (padding stays zero)
    total = sum(p.grad.pow(2).sum() for p in fast.parameters())
    assert torch.allclose(flat.grad.pow(2).sum(), total, rtol=1e-5)


def test_the_keypoint_cnn_reports_where_a_dot_is_as_coordinates():
    """With every filter positive and a sharp softmax, each channel's expected position is the
    dot's (x first, then y, in [-1, 1]); moving the dot moves the coordinates with it."""
    torch.manual_seed(0)
    ac = ActorCritic((1, 84, 84), gym.spaces.Discrete(5), cnn="keypoints")
    trunk = ac.trunk
    with torch.no_grad():
        for m in trunk.net:
            if isinstance(m, nn.Conv2d):
                m.weight.uniform_(0.1, 0.2)
                m.bias.zero_()
        trunk.net[-1].temperature.fill_(50.0)

    def coords(x, y):
        frame = torch.zeros(1, 1, 84, 84, dtype=torch.uint8)
        frame[0, 0, y : y + 2, x : x + 2] = 255
        out = trunk(frame)[0]
        return out[:16], out[16:]

    (x1, y1), (x2, y2) = coords(10, 60), coords(60, 20)
    assert trunk.out_dim == 32 and x1.shape == y1.shape == (16,)
    assert (x1 < -0.5).all() and (y1 > 0.2).all() and (x2 > 0.2).all() and (y2 < -0.3).all()
    # the actor-critic puts its `hidden` MLPs on the coordinates (NatureCNN: linear heads)
    assert [m.out_features for m in ac.pi if isinstance(m, nn.Linear)] == [64, 64, 5]
    assert [m.out_features for m in ActorCritic((1, 84, 84), gym.spaces.Discrete(5)).pi
            if isinstance(m, nn.Linear)] == [5]  # fmt: skip
