"""Jones's probes: every algorithm passes them, and each probe catches the bug it is meant for.

Each bug is injected with a test-only monkeypatch into PPO (the probes train in-process), and the
test asserts that the right probe fails while a probe that does not depend on the broken part
still passes.
"""

import json
import time
from dataclasses import fields

import pytest
import torch

from backflip.algos import ALGOS, common, get_algo, onpolicy
from backflip.doctor.audits import audit_obs_normalizer, audit_reward_scaler
from backflip.doctor.probes import PROBE_GAMMA, probe_kinds, result_line, run_probe, run_probes
from backflip.nets import ActorCritic  # the network PPO builds (algos.common.build_actor_critic)
from backflip.normalize import RewardScaler


def probe(k, box=False):
    return run_probe("ppo", k, box, seed=0)


def test_probe_1_passes_with_a_correct_value_function():
    r = probe(1)
    assert r.passed, [c.text() for c in r.checks]
    assert r.checks[0].name == "V(0)" and abs(r.checks[0].measured - 1.0) < 0.05


def test_probe_command_reports_probes_and_audits_as_json(cli):
    # cem: the cheapest algorithm (about 4 s with start-up)
    out = json.loads(cli("probe", "cem", "--json").stdout)
    assert out["passed"] and len(out["probes"]) == 10  # discrete and Box
    assert [p["passed"] for p in out["probes"]] == [None, None, None, True, True] * 2
    assert out["audits"] and all(a["passed"] for a in out["audits"])


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_every_algorithm_passes_every_probe_within_a_minute(algo):
    # cost: 1-20 s per algorithm on a quiet 2-core machine (docs/doctor.md, "Probes")
    spec = get_algo(algo)
    t0 = time.perf_counter()
    results = run_probes(algo, seed=0)
    seconds = time.perf_counter() - t0
    assert len(results) == 5 * len(probe_kinds(spec))  # discrete and/or Box
    failed = [result_line(r) for r in results if r.passed is False]
    assert not failed, failed
    for r in results:  # nothing checked only where there is no value function to check
        assert r.passed or (r.probe <= 3 and r.note.startswith("skipped")), result_line(r)
    for r in results:
        if r.probe == 3 and r.checks and "gamma" in {f.name for f in fields(spec.config)}:
            v0 = next(c for c in r.checks if c.name == "V(0)")
            assert v0.expected == PROBE_GAMMA and abs(v0.measured - PROBE_GAMMA) < 0.1
    assert seconds < 60, f"{algo}: the probes took {seconds:.0f} s"


@pytest.mark.slow
def test_discount_applied_twice_fails_probe_3_only(monkeypatch):
    def gae_discounting_twice(r, v, nv, term, done, gamma, lam):
        return common.gae(r, v, nv, term, done, gamma * gamma, lam)

    monkeypatch.setattr(onpolicy, "gae", gae_discounting_twice)
    assert probe(1).passed  # one-step episodes: no discounting involved
    r = probe(3)
    assert r.passed is False
    v0 = next(c for c in r.checks if c.name == "V(0)")
    assert not v0.passed and abs(v0.measured - PROBE_GAMMA**2) < 0.1


@pytest.mark.slow
def test_advantage_sign_flipped_fails_probe_4_but_not_the_value_probes(monkeypatch):
    def gae_flipped(*args):
        adv, ret = common.gae(*args)
        return -adv, ret

    monkeypatch.setattr(onpolicy, "gae", gae_flipped)
    assert probe(1).passed
    r = probe(4)
    assert r.passed is False
    action = next(c for c in r.checks if c.name == "action(0)")
    assert not action.passed and action.measured == 1.0
    box = probe(4, box=True)
    assert box.passed is False and box.checks[0].measured < 0.4


@pytest.mark.slow
def test_no_gradient_through_the_value_head_fails_probe_1(monkeypatch):
    forward = ActorCritic.forward

    def detached_value(self, obs):
        out, value = forward(self, obs)
        return out, value.detach()

    monkeypatch.setattr(ActorCritic, "forward", detached_value)
    r = probe(1)
    assert r.passed is False and abs(r.checks[0].measured - 1.0) > 0.5


@pytest.mark.slow
def test_value_net_blind_to_its_input_fails_probe_2_not_probe_1(monkeypatch):
    def blind_value(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.v(torch.zeros_like(h)).squeeze(-1)

    monkeypatch.setattr(ActorCritic, "forward", blind_value)
    assert probe(1).passed
    r = probe(2)
    assert r.passed is False
    assert all(abs(c.measured) < 0.5 for c in r.checks)  # stuck at the mean, 0


@pytest.mark.slow
def test_observations_misaligned_across_the_batch_fail_probe_5_not_probe_4(monkeypatch):
    def shifted_policy(self, obs):
        h = self.trunk(obs)
        return self.pi(h.roll(1, 0)), self.v(h).squeeze(-1)  # row i acts on row i-1's obs

    monkeypatch.setattr(ActorCritic, "forward", shifted_policy)
    assert probe(4).passed
    assert probe(5).passed is False


def test_normalizer_audits_pass_on_backflips_normalizers():
    assert all(a.passed for a in audit_reward_scaler() + audit_obs_normalizer())


def test_reward_audit_catches_a_shifted_or_never_reset_normalizer():
    class Shifting(RewardScaler):  # subtracts the running mean of rewards
        def __call__(self, reward, done, valid=None):
            self.rms.update(reward)
            return (reward - self.rms.mean) / (self.rms.std + 1e-8)

    class NeverReset(RewardScaler):  # the return accumulator leaks across episodes
        def __call__(self, reward, done, valid=None):
            return super().__call__(reward, done & False, valid)

    shifted = {a.name: a.passed for a in audit_reward_scaler(Shifting)}
    assert shifted["scales, never shifts"] is False
    leaking = {a.name: a.passed for a in audit_reward_scaler(NeverReset)}
    assert leaking["restarts the return at episode ends"] is False
    assert leaking["scales, never shifts"] is True
