import numpy as np

from backflip.normalize import ObsNormalizer, RewardScaler, RunningMeanStd


def test_parallel_update_matches_statistics_of_all_data():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.0, size=(n, 3)) for n in (1, 7, 100, 2, 50)]
    rms = RunningMeanStd((3,), epsilon=0.0 + 1e-12)
    for c in chunks:
        rms.update(c)
    data = np.concatenate(chunks)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-9)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-9)


def test_obs_normalizer_freezes_when_not_updating_and_round_trips():
    norm = ObsNormalizer((2,))
    rng = np.random.default_rng(1)
    for _ in range(50):
        norm(rng.normal([100.0, -5.0], [10.0, 0.1], size=(8, 2)))
    before = norm.state_dict()
    out = norm(np.array([[100.0, -5.0]]), update=False)
    assert np.abs(out).max() < 0.5
    assert norm.state_dict()["count"] == before["count"]
    other = ObsNormalizer((2,))
    other.load_state_dict(before)
    np.testing.assert_array_equal(
        other(np.ones((1, 2)), update=False), norm(np.ones((1, 2)), update=False)
    )


def test_reward_scaler_scales_but_never_shifts():
    scaler = RewardScaler(num_envs=2, gamma=0.99)
    rewards = np.array([5.0, 5.0])
    for _ in range(200):
        out = scaler(rewards, np.array([False, False]))
    # a constant positive reward stays positive and keeps its sign and ratio: no mean subtraction
    assert (out > 0).all() and out[0] == out[1]
    assert np.isclose(out[0], 5.0 / scaler.scale)


def test_reward_scaler_restarts_accumulator_on_truncation_too():
    scaler = RewardScaler(num_envs=1, gamma=0.9)
    scaler(np.array([1.0]), np.array([True]))  # an episode ended (by truncation, say)
    assert scaler.ret[0] == 0.0
