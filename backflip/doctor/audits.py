"""Audits of backflip's normalizers (catalog entry 9): behaviour checks on synthetic streams.

Schulman: scale rewards, never shift them (a subtracted mean turns a reward for staying alive
into a punishment); the running discounted return must restart at every episode end (OpenAI
baselines #538: it did not, so returns leaked across episodes). Observation statistics must
freeze during evaluation. Each audit feeds a known stream and compares with the value computed
here from first principles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Audit:
    name: str
    passed: bool
    detail: str


def audit_reward_scaler(factory=None) -> list[Audit]:
    """Check `RewardScaler` (or `factory(num_envs, gamma)`) scales without shifting and resets."""
    if factory is None:
        from backflip.normalize import RewardScaler as factory
    gamma, length, steps = 0.99, 10, 300
    out = []

    # 1. no shift: constant positive rewards stay positive and proportional; zero stays zero
    scaler = factory(1, gamma)
    scaled = []
    for t in range(steps):
        done = np.array([(t + 1) % length == 0])
        scaled.append(float(scaler(np.array([1.0]), done)[0]))
    zero = float(scaler(np.array([0.0]), np.array([False]))[0])
    shift_ok = min(scaled) > 0 and abs(zero) < 1e-12 and np.ptp(scaled[-50:]) < 0.05 * scaled[-1]
    out.append(
        Audit(
            "scales, never shifts",
            bool(shift_ok),
            f"rewards of +1 became {min(scaled):.3g}..{max(scaled):.3g}, a reward of 0 became "
            f"{zero:.3g} (expected: positive, and exactly 0)",
        )
    )

    # 2. the discounted-return accumulator restarts at each episode end
    returns, g = [], 0.0
    for t in range(steps):
        g = gamma * g + 1.0
        returns.append(g)
        if (t + 1) % length == 0:
            g = 0.0
    expected = float(np.std(returns))
    got = scaler.scale
    reset_ok = abs(got - expected) < 0.1 * expected
    out.append(
        Audit(
            "restarts the return at episode ends",
            bool(reset_ok),
            f"scale {got:.3g} after {steps} steps of 10-step episodes; with the return restarted "
            f"at each end it is {expected:.3g}",
        )
    )
    return out


def audit_obs_normalizer(factory=None) -> list[Audit]:
    """Check `ObsNormalizer` standardizes with running statistics and freezes when asked."""
    if factory is None:
        from backflip.normalize import ObsNormalizer as factory
    rng = np.random.default_rng(0)
    norm = factory((3,))
    data = rng.normal([100.0, -5.0, 0.0], [10.0, 0.1, 1.0], size=(2000, 3)).astype(np.float32)
    for batch in np.array_split(data, 20):
        norm(batch)
    z = norm(data, update=False)
    std_ok = np.allclose(z.mean(0), 0, atol=0.05) and np.allclose(z.std(0), 1, atol=0.05)
    before = norm(data[:5], update=False)
    norm(data[:5] * 100, update=False)
    frozen_ok = np.array_equal(before, norm(data[:5], update=False))
    return [
        Audit(
            "standardizes with running statistics",
            bool(std_ok),
            f"normalized means {np.round(z.mean(0), 3).tolist()}, stds "
            f"{np.round(z.std(0), 3).tolist()} (expected 0 and 1)",
        ),
        Audit(
            "frozen when update=False",
            bool(frozen_ok),
            "statistics " + ("unchanged" if frozen_ok else "changed") + " by evaluation calls",
        ),
    ]
