"""DQN, DDPG, TD3 and SAC: replay at episode ends, bootstrapping, checkpoints, errors, determinism."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from backflip.algos import get_algo
from backflip.buffers import ReplayBuffer
from backflip.config import resolve
from backflip.envs import make_vec
from backflip.nets import to_bounds
from backflip.runs.layout import eval_seed
from backflip.seedrun import SeedRun, evaluate
from backflip.telemetry import read_metrics

OFF_POLICY = ["dqn", "ddpg", "td3", "sac"]
ENV = {"dqn": "CartPole-v1", "ddpg": "Pendulum-v1", "td3": "Pendulum-v1", "sac": "Pendulum-v1"}
SMALL = {"hidden": "16,16", "batch_size": "32", "learning_starts": "200", "log_every": "250"}


def train(algo, env, steps, out_dir=None, seed=0, **sets):
    cfg = resolve(algo, env, [seed], steps, set_values={k: str(v) for k, v in sets.items()})
    run = SeedRun(cfg, seed, out_dir)
    get_algo(algo).train(cfg.hp, run)
    run.close()
    return run, cfg


def final_checkpoint(folder):
    return torch.load(folder / "checkpoints" / "final.pt", weights_only=False)


def test_replay_keeps_the_final_observation_of_a_truncated_episode_and_skips_reset_steps(
    tmp_path,
):
    # random actions only (learning never starts): the buffer holds exactly what the env did
    train("td3", "Pendulum-v1", 35, tmp_path, learning_starts=1000, **{"env.max_episode_steps": 10})
    buf = final_checkpoint(tmp_path)["state"]["buffer"]
    assert buf["size"] == 35  # the three reset steps are neither stored nor counted
    ends = np.flatnonzero(buf["truncated"])
    assert ends.tolist() == [9, 19, 29] and not buf["terminated"].any()
    inside = np.setdiff1d(np.arange(34), ends)
    assert np.array_equal(buf["next_obs"][inside], buf["obs"][inside + 1])
    pendulum = gym.make("Pendulum-v1").unwrapped
    pendulum.reset(seed=0)
    for i in ends:
        # s' of the last transition is the true successor of (s, a), not the next reset obs
        assert not np.allclose(buf["next_obs"][i], buf["obs"][i + 1])
        cos, sin, thdot = buf["obs"][i].astype(np.float64)
        pendulum.state = np.array([np.arctan2(sin, cos), thdot])
        successor, *_ = pendulum.step(to_bounds(buf["actions"][i], -2.0, 2.0))
        np.testing.assert_allclose(buf["next_obs"][i], successor, atol=1e-5)


def test_replay_marks_terminations_apart_from_truncations(tmp_path):
    train("dqn", "CartPole-v1", 300, tmp_path, learning_starts=1000)
    buf = final_checkpoint(tmp_path)["state"]["buffer"]
    assert buf["size"] == 300 and buf["terminated"].sum() >= 5  # random play drops the pole
    assert not buf["truncated"].any()


def test_replay_buffer_is_a_ring_and_samples_deterministically():
    a, b = (ReplayBuffer(4, (2,), (), act_dtype=np.int64, seed=7) for _ in range(2))
    for rb in (a, b):
        for i in range(6):
            rb.add(np.full(2, i), i % 2, float(i), np.full(2, i + 1), i == 5, False)
    assert len(a) == 4 and a.pos == 2
    assert sorted(a.rewards.tolist()) == [2.0, 3.0, 4.0, 5.0]  # the two oldest were overwritten
    x, y = a.sample(16), b.sample(16)
    assert torch.equal(x.obs, y.obs) and torch.equal(x.rewards, y.rewards)
    assert torch.equal(x.terminated, (x.rewards == 5.0).float())


def test_nstep_returns_stop_at_episode_ends_and_at_the_newest_transition():
    """k-step targets read the following ring slots: they must stop (inclusive) at a termination
    or a truncation, never run past the newest transition, and follow the ring's wrap."""
    rb = ReplayBuffer(8, (1,), (), act_dtype=np.int64, seed=0)
    ends = {2: (True, False), 5: (False, True)}  # t=2 terminates, t=5 hits the time limit
    for t in range(10):  # slots hold t = 2..9 after the wrap; t = 9 is the newest
        rb.add([t], 0, float(t + 1), [t + 1], *ends.get(t, (False, False)))
    b = rb.sample_nstep(256, 3, 0.5)
    got = {
        int(o): (r, int(n), int(te), d)
        for o, r, n, te, d in zip(
            b.obs[:, 0], b.rewards, b.next_obs[:, 0], b.terminated, b.discount, strict=True
        )
    }
    assert got == {  # t: (k-step return, s_(t+k), terminated, 0.5^k)
        2: (3.0, 3, 1, 0.5),  # its own termination: k = 1, no bootstrap
        3: (4 + 0.5 * 5 + 0.25 * 6, 6, 0, 0.125),  # stops at the truncation, which bootstraps
        4: (5 + 0.5 * 6, 6, 0, 0.25),
        5: (6.0, 6, 0, 0.5),
        6: (7 + 0.5 * 8 + 0.25 * 9, 9, 0, 0.125),  # slots 6, 7 and, past the wrap, 0
        7: (8 + 0.5 * 9 + 0.25 * 10, 10, 0, 0.125),
        8: (9 + 0.5 * 10, 10, 0, 0.25),  # only t = 9 is stored after it
        9: (10.0, 10, 0, 0.5),
    }
    # k = 1 is the one-step batch, drawn with the same indices as `sample`
    x, y = (ReplayBuffer(8, (1,), (), act_dtype=np.int64, seed=3) for _ in range(2))
    for buf in (x, y):
        for t in range(10):
            buf.add([t], 0, float(t + 1), [t + 1], *ends.get(t, (False, False)))
    one, plain = x.sample_nstep(64, 1, 0.5), y.sample(64)
    for field in ("obs", "actions", "rewards", "next_obs", "terminated"):
        assert torch.equal(getattr(one, field), getattr(plain, field)), field
    assert torch.all(one.discount == 0.5)


@pytest.mark.parametrize("algo", [*OFF_POLICY, "dqn-1step", "dqn-5step"])
def test_truncation_bootstraps_so_q_learns_the_value_beyond_the_time_limit(algo, tmp_path):
    """Reward 1 forever, cut by a 5-step time limit: Q must reach 1 / (1 - gamma) = 10. Treating
    the limit as a termination would give a value near 3.6 (and ~1 right before it). DQN runs
    with one-step targets and with 5-step ones, which reach past every time limit."""
    algo, _, n = algo.partition("-")
    extra = {"n_step": n.removesuffix("step")} if n else {}
    env = (
        "tests.fault_envs:EndlessReward-v0"
        if algo == "dqn"
        else "tests.fault_envs:EndlessRewardBox-v0"
    )
    sets = dict(SMALL, gamma=0.9, tau=0.05, lr=3e-3, learning_starts=100)
    if algo == "dqn":
        sets.update(target_every=1, **extra)
    if algo == "sac":
        sets.update(autotune_alpha=False, alpha_init=1e-4)  # soft Q = Q when alpha is ~0
    train(algo, env, 2500, tmp_path, **sets)
    envs = make_vec(env, 1)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    agent = get_algo(algo).load(final_checkpoint(tmp_path), obs_space, act_space)
    value = float(agent.value(np.zeros((1, 1), np.float32))[0])
    assert abs(value - 10.0) < 0.5, value


@pytest.mark.parametrize("algo", OFF_POLICY)
def test_final_checkpoint_reproduces_the_final_evaluation(algo, tmp_path):
    run, cfg = train(algo, ENV[algo], 600, tmp_path, **SMALL)
    envs = make_vec(ENV[algo], cfg.run.eval_episodes)
    spec = get_algo(algo)
    agent = spec.load(
        final_checkpoint(tmp_path), envs.single_observation_space, envs.single_action_space
    )
    rets, _ = evaluate(agent.act, envs, cfg.run.eval_episodes, eval_seed(run.seed))
    assert rets.mean() == run.result["eval_return"]
    assert agent.value(envs.reset(seed=0)[0]).shape == (cfg.run.eval_episodes,)


@pytest.mark.parametrize("algo", OFF_POLICY)
def test_resuming_from_a_checkpoint_continues_the_count(algo, tmp_path):
    train(algo, ENV[algo], 500, tmp_path / "a", **SMALL)
    ck = final_checkpoint(tmp_path / "a")
    cfg = resolve(algo, ENV[algo], [0], 1000, set_values=SMALL)
    run = SeedRun(cfg, 0, tmp_path / "b")
    run.restore(ck)
    get_algo(algo).train(cfg.hp, run)
    run.close()
    assert run.result["steps"] == 1000
    steps, _ = read_metrics(tmp_path / "b" / "metrics.csv")["time/sps"]
    assert steps.min() > 500  # rows continue from the checkpoint's step


@pytest.mark.parametrize("algo", OFF_POLICY)
def test_same_seed_twice_gives_identical_metrics(algo, tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    for folder in runs:
        train(algo, ENV[algo], 800, folder, seed=3, **SMALL)
    a, b = (
        {
            k: v
            for k, v in read_metrics(f / "metrics.csv").items()
            if not k.startswith(("time/", "sys/"))
        }
        for f in runs
    )
    assert a.keys() == b.keys() and len(a) > 15
    for k in a:
        assert np.array_equal(a[k][0], b[k][0]) and np.array_equal(a[k][1], b[k][1]), k
    assert (runs[0] / "episodes.csv").read_text() == (runs[1] / "episodes.csv").read_text()


def test_one_metrics_row_per_log_interval(tmp_path):
    train("sac", "Pendulum-v1", 1000, tmp_path, **SMALL)
    steps, _ = read_metrics(tmp_path / "metrics.csv")["time/sps"]
    assert steps.tolist() == [250, 500, 750, 1000, 1000]  # the last row carries the evaluation


@pytest.mark.parametrize(
    ("algo", "env", "message"),
    [
        (
            "dqn",
            "Pendulum-v1",
            "dqn needs a Discrete action space; Pendulum-v1 has Box(-2.0, 2.0, (1,), float32)",
        ),
        ("td3", "CartPole-v1", "td3 needs a Box action space; CartPole-v1 has Discrete(2)"),
    ],
)
def test_an_unsupported_action_space_is_one_clear_line(cli, algo, env, message):
    proc = cli("train", algo, "--env", env, "--no-progress", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {message}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_one_clear_line(cli):
    proc = cli(
        "train", "sac", "--env", "Pendulum-v1", "--set", "device=cuda", "--no-progress", check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "device=cuda requested but CUDA is not available" in proc.stderr
    assert "use device=cpu" in proc.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_cuda_trains_where_cuda_exists(tmp_path):
    run, _ = train("sac", "Pendulum-v1", 600, tmp_path, device="cuda", **SMALL)
    assert run.result["steps"] == 600


@pytest.mark.parametrize(
    ("algo", "env"),
    [("sac", "InvertedPendulum-v5"), ("td3", "HalfCheetah-v5"), ("sac", "HalfCheetah-v5")],
)
def test_mujoco_smoke_with_a_100_step_horizon(cli, home, algo, env):
    pytest.importorskip("mujoco", reason="the mujoco extra: pip install 'backflip[mujoco]'")
    proc = cli(
        "train",
        algo,
        "--env",
        env,
        "--seeds",
        "1",
        "--steps",
        "400",
        "--set",
        "env.max_episode_steps=100",
        "--set",
        "learning_starts=100",
        "--set",
        "eval_episodes=2",
        "--no-progress",
        "--json",
    )
    import json

    record = json.loads(proc.stdout)
    seed = record["seeds"][0]
    assert seed["status"] == "finished" and seed["steps"] == 400
    lengths = np.loadtxt(
        home / record["id"] / "seeds" / "0" / "episodes.csv", delimiter=",", skiprows=1, ndmin=2
    )[:, 2]
    assert lengths.max() <= 100 and len(lengths) >= 4


def test_parameter_counts_leave_out_target_networks():
    import torch

    from backflip.seedrun import count_params

    net = {"w": torch.zeros(3, 4), "b": torch.zeros(4)}
    state = {"q": net, "q_target": net, "critic_targ": net, "target_q": net, "opt": net}
    assert count_params(state) == 16
