import torch

from backflip.algos.common import explained_variance, gae


def test_truncation_bootstraps_from_final_obs_and_termination_does_not():
    # one env, three steps; the episode ends at t=1, then t=2 is the autoreset step
    rewards = torch.tensor([[1.0], [1.0], [0.0]])
    values = torch.tensor([[0.5], [0.5], [7.0]])  # V(s_final) = 7 is observed at t=2
    next_values = torch.cat([values[1:], torch.tensor([[0.0]])])
    done = torch.tensor([[False], [True], [False]])
    _truncated_adv, truncated_ret = gae(
        rewards, values, next_values, torch.zeros_like(done), done, gamma=0.9, lam=1.0
    )
    assert torch.isclose(truncated_ret[1, 0], torch.tensor(1.0 + 0.9 * 7.0))
    _terminated_adv, terminated_ret = gae(rewards, values, next_values, done, done, 0.9, 1.0)
    assert torch.isclose(terminated_ret[1, 0], torch.tensor(1.0))
    # advantages never flow back across the episode boundary (t=2 -> t=1)
    assert torch.isclose(truncated_ret[0, 0], torch.tensor(1.0 + 0.9 * (1.0 + 0.9 * 7.0)))


def test_gae_with_lambda_one_equals_discounted_return_minus_value():
    T = 6
    r = torch.arange(1.0, T + 1).unsqueeze(1)
    v = torch.zeros(T, 1)
    no = torch.zeros(T, 1, dtype=torch.bool)
    _adv, ret = gae(r, v, torch.zeros(T, 1), no, no, gamma=0.5, lam=1.0)
    expected = [sum(r[k, 0].item() * 0.5 ** (k - t) for k in range(t, T)) for t in range(T)]
    torch.testing.assert_close(ret[:, 0], torch.tensor(expected))


def test_explained_variance():
    y = torch.randn(1000)
    assert explained_variance(y, y) == 1.0
    assert abs(explained_variance(torch.full_like(y, y.mean().item()), y)) < 1e-6
    assert explained_variance(-y, y) < 0
