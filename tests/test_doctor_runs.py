"""The doctor on real runs: after `backflip train`, live, on demand, and on TensorBoard logs.

Broken runs are made with `backflip train` itself (fault options in docs/doctor.md); healthy runs
use the defaults. The Stable-Baselines3 runs (a test-only dependency) get the same faults.
"""

import json
import re
import shutil

import numpy as np
import pytest

from backflip.doctor import diagnose
from backflip.doctor.sources import resolve_target
from backflip.runs.archive import load_run
from tests.conftest import ROOT

TINY = ["--seeds", "1", "--steps", "2048", "--set", "epochs=2", "--no-progress"]


def run_id(proc) -> str:
    return proc.stdout.split()[1].rstrip(":")


def findings_of(home, rid) -> dict:
    data = json.loads((home / rid / "findings.json").read_text())
    return {f["rule"]: f for f in data["findings"]}


def test_train_stores_findings_and_prints_them_and_show_repeats_them(cli, home):
    proc = cli("train", "ppo", "--env", "CartPole-v1", *TINY)
    rid = run_id(proc)
    assert "doctor: 1 info — details: backflip doctor " + rid in proc.stdout
    data = json.loads((home / rid / "findings.json").read_text())
    assert data["target"] == str(home / rid)
    (f,) = data["findings"]
    assert set(f) == {"rule", "severity", "metric", "step", "message", "evidence"}
    assert f["rule"] == "short-run" and f["evidence"]["series"] == "seed 0"
    assert "info    short-run [seed 0]: only 3 metric rows" in cli("show", rid).stdout


def test_doctor_json_contract_and_exit_status(cli, home, tmp_path):
    rid = run_id(cli("train", "ppo", "--env", "CartPole-v1", "--set", "vf_coef=0", *TINY))
    for target in (rid, str(home / rid), str(home / rid / "seeds" / "0"), "last"):
        out = json.loads(cli("doctor", target, "--json").stdout)
        assert set(out) == {"target", "findings"} and out["target"] == target
        for f in out["findings"]:
            assert set(f) == {"rule", "severity", "metric", "step", "message", "evidence"}
            assert f["severity"] in ("info", "warning", "error")
    text = cli("doctor", rid).stdout
    assert text.startswith(f"doctor: {rid} — backflip run (1 series from backflip, ppo on CartPole")
    # unreadable targets: exit 2 with one line, never a traceback
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_tb = tmp_path / "bad"
    bad_tb.mkdir()
    (bad_tb / "events.out.tfevents.1.host").write_bytes(b"\x00garbage" * 10)
    for target, words in (
        ("nosuchrun", "no run 'nosuchrun'"),
        (str(tmp_path / "missing"), "does not exist"),
        (str(empty), "nothing to diagnose"),
        (str(bad_tb), "no scalar metrics"),
    ):
        proc = cli("doctor", target, "--json", check=False)
        assert proc.returncode == 2, (target, proc.stderr)
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_nan_rewards_stop_the_seed_and_the_doctor_says_where(cli, home):
    proc = cli(
        "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "4096",
        "--set", "env.nan_reward_at=100", "--set", "epochs=2", "--no-progress", check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    rid = run_id(proc)
    seed = load_run(home / rid)["seeds"][0]
    assert seed["status"] == "failed" and seed["steps"] == 1024
    # named as the env's: the first NaN reward it gave, then the row that stopped the seed
    assert seed["error"].startswith("non-finite reward from the environment (nan at env step")
    assert "then: non-finite values at step 1024: env/reward_max" in seed["error"]
    f = findings_of(home, rid)["nonfinite"]
    assert f["severity"] == "error" and f["step"] == 1024 and f["metric"].startswith("env/reward")
    assert "the environment" in f["message"] and "seed was stopped" in f["message"]
    assert "error   nonfinite [seed 0]" in proc.stdout


def test_stop_on_nan_false_warns_once_and_goes_on(cli, home):
    proc = cli(
        "train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "4096",
        "--set", "epochs=2", "--set", "env.nan_reward_at=100", "--set", "doctor.stop_on_nan=false",
        check=False,
    )  # fmt: skip
    rid = run_id(proc)
    log = (home / rid / "seeds" / "0" / "stderr.log").read_text()
    assert log.count("[doctor] non-finite values at step 1024") == 1
    assert "seed 0: warning: non-finite values at step 1024" in proc.stderr
    seed = load_run(home / rid)["seeds"][0]
    # not stopped by the check: PPO went on to its next rollout, where NaN parameters made
    # torch refuse to sample (its own failure, recorded as such)
    assert "stopping this seed" not in (seed.get("error") or "")
    assert "probability tensor contains" in seed["error"]


def _cleanrl_log(folder, kl_blowup=False):
    """A log with CleanRL's tag names, written by torch's SummaryWriter as CleanRL does."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    w = SummaryWriter(str(folder))
    step = 0
    for it in range(40):
        for _ in range(5):  # episodes finishing in this iteration
            step += 50
            w.add_scalar("charts/episodic_return", 20 + 10 * it + rng.normal(0, 5), step)
            w.add_scalar("charts/episodic_length", 20 + 10 * it, step)
        w.add_scalar("charts/SPS", 1000, step)
        w.add_scalar("losses/entropy", np.log(3) * (1 - it / 60), step)
        w.add_scalar("losses/approx_kl", 5.0 if kl_blowup and it == 3 else 0.01, step)
        w.add_scalar("losses/explained_variance", 0.8, step)
    w.close()


def test_cleanrl_logs_are_mapped_to_backflip_names(tmp_path):
    _cleanrl_log(tmp_path / "runs" / "ppo_run", kl_blowup=True)
    t = resolve_target(str(tmp_path / "runs"), tmp_path)
    assert t.kind == "tensorboard"
    (d,) = t.runs
    assert d.source == "cleanrl" and d.action_n == 3  # inferred from the first entropy, log 3
    assert len(d.episodes[1]) == 200 and d.get("rollout/ep_return_mean") is not None
    assert np.isclose(d.get("train/entropy_norm")[1][0], 1.0)
    assert d.get("time/sps") is not None  # derived from event wall times, not charts/SPS
    found = {f.rule: f for f in diagnose(d)}
    assert found["kl-large"].severity == "error" and found["kl-large"].step == 1000


def test_a_real_cleanrl_log_is_read_with_its_hyperparameters_and_no_returns(cli):
    """`backflip doctor` on the logdir of CleanRL's own ppo.py under Gymnasium 1.x ended in a
    traceback (the hyperparameters' text summary); the log is real, not imitated: how it was
    made is in tests/data/cleanrl_ppo_gymnasium1/README.md."""
    logdir = ROOT / "tests" / "data" / "cleanrl_ppo_gymnasium1"
    out = json.loads(cli("doctor", str(logdir), "--json").stdout)
    found = {f["rule"]: f for f in out["findings"]}
    assert found["no-returns"]["severity"] == "info", out["findings"]
    assert "final_info" in found["no-returns"]["message"]
    # explained variance ~0 over 10 updates, with no return to say anything is wrong: no error
    assert not [f for f in out["findings"] if f["severity"] == "error"], out["findings"]
    (d,) = resolve_target(str(logdir), logdir).runs
    assert d.source == "cleanrl" and d.action_n == 2
    assert (d.env_id, d.algo, d.budget, d.hp["gamma"]) == ("CartPole-v1", "ppo", 5120, 0.99)
    assert len(d.get("train/approx_kl")[0]) == 10
    assert not [k for k in d.metrics if "hyperparameters" in k]
    assert "1 series from cleanrl, ppo on CartPole-v1" in cli("doctor", str(logdir)).stdout


def test_a_folder_of_runs_gets_seed_level_findings(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    for i, final in enumerate([500, 480, 22]):  # one of three seeds fails
        w = SummaryWriter(str(tmp_path / f"PPO_{i + 1}"))
        for k in range(30):
            w.add_scalar("rollout/ep_rew_mean", 22 + (final - 22) * k / 29, 1000 * (k + 1))
            w.add_scalar("time/fps", 1000, 1000 * (k + 1))
        w.close()
    t = resolve_target(str(tmp_path), tmp_path)
    from backflip.doctor import examine

    assert t.kind == "folder" and [r.source for r in t.runs] == ["sb3"] * 3
    found = {f.rule: f for f in examine(t)}
    assert found["seed-success"].severity == "warning" or "2 of 3" in found["seed-success"].message
    assert "2 of 3 seeds succeed" in found["seed-success"].message
    assert found["seed-bimodal"].severity == "warning" and "PPO_3" in found["seed-bimodal"].message


# --- broken and healthy runs made with `backflip train` (slow) ---------------------------------

BROKEN = [
    # (fault, env, steps, settings, expected rule, its severity)
    # ent_coef=-1 collapses most seeds only after the return rose (a warning, by the rule's
    # design: seeds 1-3 before 2026-11-23, all of 0-3 since); -10 collapses at the first
    # updates and the return stays ~10 on seeds 0-2 (3-5: a deterministic policy at ~50)
    ("collapse", "CartPole-v1", 20_000, ["ent_coef=-10"], "entropy-collapse", "error"),
    ("no learning", "CartPole-v1", 20_000, ["lr=1e-8"], "entropy-flat", "error"),
    ("KL blow-up", "CartPole-v1", 20_000, ["lr=0.01", "clip=1e6", "max_grad_norm=0"],
     "kl-large", "error"),
    # without a value baseline PPO still improves on CartPole (return 16 -> 27 in 2e4 steps): a
    # health signal alone is a warning (issue 23); with a flat return it is an error
    # (test_doctor_rules.py: test_explained_variance_is_an_error_only_when_the_return_is_flat_too)
    ("value coef 0", "CartPole-v1", 20_000, ["vf_coef=0"], "explained-variance", "warning"),
    ("rewards x1000", "CartPole-v1", 20_000, ["env.reward_scale=1000"], "reward-scale",
     "warning"),
    ("obs x1000+500", "CartPole-v1", 20_000, ["env.obs_scale=1000", "env.obs_shift=500"],
     "obs-scale", "warning"),
    ("NaN rewards", "CartPole-v1", 20_000, ["env.nan_reward_at=1000"], "nonfinite", "error"),
    ("growing work", "CartPole-v1", 20_000, ["env.slowdown=300"], "throughput-decline",
     "warning"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "env", "steps", "sets", "rule", "severity"), BROKEN,
                         ids=[b[0] for b in BROKEN])  # fmt: skip
def test_broken_run_gets_the_right_finding(cli, home, fault, env, steps, sets, rule, severity):
    # cost: 10-30 s each on an idle 2-core machine
    args = ["train", "ppo", "--env", env, "--seeds", "1", "--steps", str(steps)]
    for s in sets:
        args += ["--set", s]
    proc = cli(*args, check=False)  # progress on (not a terminal): live warnings are printed
    rid = run_id(proc)
    found = findings_of(home, rid)
    assert rule in found, (fault, list(found))
    assert found[rule]["severity"] == severity, found[rule]
    assert f"{found[rule]['severity']:<7} {rule} [seed 0]" in proc.stdout
    if rule in ("obs-scale", "reward-scale", "kl-large", "entropy-collapse"):  # live rules
        # each live line carries one severity, and the last one is the summary's (issue 23:
        # "warning: entropy-collapse (error)" live, "warning" in the summary)
        live = re.findall(rf"seed 0: (\w+): {rule} at ", proc.stderr)
        assert live and live[-1] == severity, (live, proc.stderr[-2000:])
        log = (home / rid / "seeds" / "0" / "stderr.log").read_text()
        assert f"[doctor] {live[0]}: {rule} at step " in log


@pytest.mark.slow
def test_healthy_ppo_run_has_no_error_findings(cli, home):
    # cost: ~30 s on an idle machine (CartPole, 1e5 steps). Pendulum and 3 seeds of each are
    # measured by benchmarks/doctor_calibration.py --healthy (docs/doctor.md): too slow here.
    rid = run_id(cli("train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--no-progress"))
    found = findings_of(home, rid)
    assert not [f for f in found.values() if f["severity"] == "error"], found
    assert not [f for f in found.values() if f["severity"] == "warning"], found


# --- Stable-Baselines3 TensorBoard logs (slow) --------------------------------------------------

SB3 = [
    ("ppo", "collapse", "entropy-collapse"),
    ("ppo", "nolearn", "entropy-flat"),
    ("ppo", "klblow", "kl-large"),
    ("ppo", "vf0", "explained-variance"),
    ("ppo", "rew1000", "reward-scale"),
    ("ppo", "nan", "nonfinite"),
    ("ppo", "slow", "throughput-decline"),
    ("a2c", "collapse", "entropy-collapse"),
    ("a2c", "nolearn", "entropy-flat"),
    ("a2c", "vf0", "explained-variance"),
    ("a2c", "rew1000", "reward-scale"),
    ("a2c", "slow", "throughput-decline"),
    ("dqn", "nolearn", "never-better"),
    ("dqn", "rew1000", "reward-scale"),
    ("dqn", "nan", "nonfinite"),
    ("dqn", "eps", "epsilon-stuck"),
]
SB3_STEPS = {"ppo": 20_000, "a2c": 20_000, "dqn": 15_000, ("a2c", "collapse"): 30_000}
# SB3 writes a row after each rollout and crashes in the update after NaN rewards: the NaN is in
# its log only if an episode holding one finished in that rollout. PPO gets NaN rewards while
# episodes are still short (env step 100 of each copy), so one does.
NAN_AT = {"ppo": 100, "dqn": 1000}
# Not in the list (docs/doctor.md, "Reading other libraries' logs"): A2C with NaN rewards (its
# 5-step rollouts end before such an episode finishes: its log just stops), and DQN's throughput
# decline (SB3's DQN logs every 4 episodes and trains in bursts: its wall-clock steps/s is too
# noisy on a shared machine to separate the injected slowdown reliably — caught in 1 of 2 runs).


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "fault", "rule"), SB3, ids=[f"{a}-{f}" for a, f, _ in SB3])
def test_sb3_logs_with_the_same_faults_get_the_same_findings(cli, tmp_path, algo, fault, rule):
    # cost: 5-20 s each on an idle machine (SB3 trains in this process, 1 thread)
    pytest.importorskip("stable_baselines3")
    from tests.sb3_logs import train_sb3

    steps = SB3_STEPS.get((algo, fault), SB3_STEPS[algo])
    folder = train_sb3(algo, tmp_path / "tb", steps, fault=fault, nan_at=NAN_AT.get(algo, 1000))
    out = json.loads(cli("doctor", str(folder), "--json").stdout)
    found = {f["rule"]: f for f in out["findings"]}
    assert rule in found, (algo, fault, list(found))
    assert found[rule]["severity"] in ("warning", "error")


def test_sb3_csv_and_monitor_files_are_read_as_its_tensorboard_log(cli, tmp_path):
    """SB3's CSV logger and Monitor wrapper (no TensorBoard): "nothing to diagnose" before."""
    pytest.importorskip("stable_baselines3")
    from tests.sb3_logs import train_sb3

    folder = train_sb3("ppo", tmp_path / "csv", 4096, csv=True)
    assert (folder / "progress.csv").is_file() and list(folder.glob("*.monitor.csv"))
    text = cli("doctor", str(folder)).stdout
    assert "Stable-Baselines3 CSV log (1 series from sb3)" in text, text
    t = resolve_target(str(folder), tmp_path)
    assert t.kind == "sb3-csv" and t.env_id == "CartPole-v1"  # the Monitor files' header
    (d,) = t.runs
    steps, rets, lens = d.episodes
    assert len(rets) > 100 and np.all(rets == lens)  # CartPole: 1 a step
    assert steps[-1] <= 4096 and np.all(np.diff(steps) > 0)
    assert {"rollout/ep_return_mean", "train/entropy", "train/entropy_norm", "time/sps"} <= set(
        d.metrics
    )
    assert d.action_n == 2


@pytest.mark.slow
def test_sb3_csv_logs_with_a_fault_get_the_finding(cli, tmp_path):
    # cost: ~10 s (SB3 PPO, 2e4 steps, its entropy bonus negative)
    pytest.importorskip("stable_baselines3")
    from tests.sb3_logs import train_sb3

    folder = train_sb3("ppo", tmp_path / "csv", 20_000, fault="collapse", csv=True)
    out = json.loads(cli("doctor", str(folder / "progress.csv"), "--json").stdout)
    assert "entropy-collapse" in {f["rule"] for f in out["findings"]}, out["findings"]


def test_a_log_from_a_library_the_doctor_does_not_map_says_so(cli, tmp_path):
    """Tianshou's `train/reward`: read as "no episode return" without a word of why."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "tianshou"))
    for i in range(30):
        w.add_scalar("train/reward", -200.0 + 5 * i, i * 1000)
        w.add_scalar("update/loss", 1.0 / (i + 1), i * 1000)
    w.close()
    proc = cli("doctor", str(tmp_path / "tianshou"))
    assert "from a library the doctor does not map" in proc.stdout + proc.stderr
    assert "(train/reward, update/loss)" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_sb3_healthy_ppo_log_has_no_errors_and_reads_as_a_folder(cli, tmp_path):
    # cost: ~20 s on an idle machine (two SB3 PPO runs of 3e4 steps)
    pytest.importorskip("stable_baselines3")
    from tests.sb3_logs import train_sb3

    for seed in (0, 1):
        train_sb3("ppo", tmp_path / "tb", 30_000, seed=seed)
    out = json.loads(cli("doctor", str(tmp_path / "tb"), "--json").stdout)
    assert not [f for f in out["findings"] if f["severity"] == "error"], out["findings"]
    assert any(f["rule"] == "seed-success" for f in out["findings"])
    shutil.rmtree(tmp_path / "tb")


# --- preference runs: the policy trains on a learned reward -------------------------------------

RETURN_RULES = {
    "entropy-flat",
    "entropy-collapse",
    "ep-len-collapse",
    "losing-slower",
    "never-better",
    "reward-model-gamed",
}


def test_a_preference_run_is_judged_on_its_true_return(home):
    """The issue's run: the learned-reward return flat and falling while the true return rose
    42 -> 97. Read as the learned reward (the old behaviour), never-better fired."""
    from backflip.doctor import examine
    from backflip.doctor.series import progress
    from tests.prefs_runs import write_preference_run

    rng = np.random.default_rng(0)
    true = np.linspace(42, 97, 100) + rng.normal(0, 3, 100)
    learned = rng.normal(40, 25, 200) - np.linspace(0, 20, 200)
    run_dir = write_preference_run(home, true, learned)
    t = resolve_target(str(run_dir), home)
    (d,) = t.runs
    assert d.learned_reward and d.returns.mean == "prefs/true_return_mean"
    p = progress(d)  # what every rule asking "did it improve?" sees
    assert p.improved and p.describe().startswith("true return (prefs/true_return_mean) 4")
    found = {f.rule: f for f in examine(t)}
    assert "never-better" not in found and "reward-model-gamed" not in found, list(found)
    for f in found.values():
        if f.rule in RETURN_RULES:
            assert "true return (prefs/true_return_mean)" in f.message, f.message
            assert f.evidence["return_metric"] == "prefs/true_return_mean"
    # the same files read as an ordinary run: the learned reward's episodes never get better
    d.learned_reward = False
    blind = {f.rule: f for f in examine(t)}["never-better"]
    assert blind.metric == "rollout/ep_return_max" and "true return" not in blind.message


def test_a_policy_gaming_its_reward_model_is_caught_and_named(home, tmp_path):
    """The converse: the learned-reward return rises while the true return stays flat."""
    from backflip.doctor import examine
    from tests.prefs_runs import write_preference_run

    rng = np.random.default_rng(1)
    true = 42 + rng.normal(0, 3, 100)
    learned = np.linspace(0, 300, 200) + rng.normal(0, 20, 200)
    run_dir = write_preference_run(home, true, learned)
    found = {f.rule: f for f in examine(resolve_target(str(run_dir), home))}
    gamed = found["reward-model-gamed"]
    assert gamed.severity == "warning" and gamed.metric == "prefs/true_return_mean"
    assert "learned-reward return (rollout/ep_return_mean" in gamed.message
    assert "but the true return (prefs/true_return_mean)" in gamed.message
    assert gamed.evidence["learned_late"] > gamed.evidence["learned_early"] + 200
    never = found["never-better"]
    assert never.metric == "prefs/true_return_mean" and "true return" in never.message
    # a seed folder without its run.json: the pipeline's prefs/* metrics say what it is
    loose = tmp_path / "loose"
    shutil.copytree(run_dir / "seeds" / "0", loose)
    found = {f.rule for f in examine(resolve_target(str(loose), tmp_path))}
    assert {"reward-model-gamed", "never-better"} <= found
