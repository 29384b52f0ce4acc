"""Where the time of Atari PPO, with and without preferences, goes on this CPU, and its floor.

One torch thread, as a seed process has. Every figure is printed twice: per second of this
thread's CPU time (what the code costs; on a machine shared with other work it moves little) and
per second of wall time (what a user waits; it moves with the load, printed with `uptime`).

1. **This CPU's rate**: a 1024^3 matmul, and each convolution of the policy's NatureCNN and of
   the paper's reward CNN at the batch sizes the code runs them at, in NCHW and channels-last.
2. **FLOPs per agent step** (multiply-adds x 2, counted with forward hooks on the real
   modules; a backward pass is twice the forward less the first layer's input gradient):
   the policy at the PPO Atari preset (a forward pass per step in the rollout, `epochs` forward
   and backward passes in the update, one forward pass for the KL diagnostic) and the reward
   model (the ensemble on every step's frames; per update, each member on `rm_batch` pairs of
   two segments at `frame_stride`).
3. **The code's own times** for the same work: a rollout forward pass on 8 frames, a PPO
   gradient step on 256, the ensemble's reward for 8 frames and a reward-model update,
   before (NCHW, members one by one, float64 inputs, every frame) and after (channels-last,
   fused ensemble, float32, `frame_stride`); and env throughput, Gymnasium's SyncVectorEnv
   against AsyncVectorEnv for 8 copies with the Atari preprocessing.
4. **The floor**: FLOPs per agent step over the measured rate of the same layers, against the
   measured time per agent step.

    python benchmarks/atari_profile.py [--env PongNoFrameskip-v4] [--env-seconds 10]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

REPS = {"fwd8": 200, "fwd": 10, "step": 10}


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "?"


def timed(f, n: int, warm: int = 3) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per call of f, median of 3 blocks of n calls."""
    for _ in range(warm):
        f()
    cpu, wall = [], []
    for _ in range(3):
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(n):
            f()
        cpu.append((time.thread_time() - c0) / n)
        wall.append((time.perf_counter() - w0) / n)
    return float(np.median(cpu)), float(np.median(wall))


def macs(model: nn.Module, *inputs) -> dict[str, int]:
    """Multiply-adds of each Conv2d and Linear of `model` for one forward pass of `inputs`."""
    counts: dict[str, int] = {}

    def hook(name):
        def f(m, args, out):
            if isinstance(m, nn.Conv2d):
                k = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                counts[name] = counts.get(name, 0) + out.numel() * k
            else:
                counts[name] = counts.get(name, 0) + out.numel() * m.in_features

        return f

    handles = [
        m.register_forward_hook(hook(n))
        for n, m in model.named_modules()
        if isinstance(m, nn.Conv2d | nn.Linear)
    ]
    with torch.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    return counts


def fwd_bwd_flops(counts: dict[str, int]) -> tuple[float, float]:
    """(forward, forward + backward) FLOPs: backward = 2x forward less the first layer's input
    gradient (the frames need none)."""
    fwd = 2 * sum(counts.values())
    first = 2 * next(iter(counts.values()))
    return fwd, 3 * fwd - first


def conv_rates(hw_batches) -> list[str]:
    lines = []
    for name, cin, cout, k, s, hw, batches in hw_batches:
        conv = nn.Conv2d(cin, cout, k, s)
        o = (hw - k) // s + 1
        for b in batches:
            m = b * o * o * cout * cin * k * k
            row = []
            for fmt, label in ((torch.contiguous_format, "NCHW"), (torch.channels_last, "NHWC")):
                c = conv.to(memory_format=fmt)
                x = torch.randn(b, cin, hw, hw).contiguous(memory_format=fmt)
                with torch.no_grad():
                    fc, _ = timed(lambda c=c, x=x: c(x), REPS["fwd8"] if b <= 32 else REPS["fwd"])
                text = f"{label} fwd {2 * m / fc / 1e9:5.1f}"
                if b > 32:  # training batch: forward + backward (weight grad; input grad after
                    first = cin <= 4  # the first layer)
                    xg = x.detach().requires_grad_(not first)

                    def fb(c=c, xg=xg):
                        y = c(xg)
                        y.backward(torch.ones_like(y))

                    fbc, _ = timed(fb, REPS["step"])
                    text += f", fwd+bwd {(4 if first else 6) * m / fbc / 1e9:5.1f}"
                row.append(text)
            lines.append(f"  {name:6s} batch {b:5d} ({o}x{o} out): " + " | ".join(row))
    return lines


def env_rate(env_id: str, kind: str, seconds: float, n: int = 8) -> float:
    from backflip.envs import make_env

    fns = [functools.partial(make_env, env_id) for _ in range(n)]
    mode = gym.vector.AutoresetMode.NEXT_STEP
    if kind == "sync":
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    else:
        envs = gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, shared_memory=True)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(20):
        envs.step(envs.action_space.sample())
    t0, steps = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        envs.step(envs.action_space.sample())
        steps += n
    rate = steps / (time.perf_counter() - t0)
    envs.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--env-seconds", type=float, default=10.0)
    ap.add_argument("--preset", default="cpu", help="the preference preset to profile")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from backflip.algos.settings.ppo import PRESETS as PPO_PRESETS
    from backflip.nets import ActorCritic, FlatParams
    from backflip.prefs.presets import preset_for
    from backflip.prefs.reward_model import PairSet, RewardModel

    ppo = PPO_PRESETS[args.env]
    prefs = preset_for(args.env, args.preset)["prefs"]
    members, batch = prefs.get("members", 3), prefs.get("rm_batch", 32)
    stride, length = prefs.get("frame_stride", 1), prefs.get("segment_length", 25)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {cpu_model()}; torch {torch.__version__}, "
        f"1 thread; load average {os.getloadavg()[0]:.2f}"
    )

    # 1. rates -----------------------------------------------------------------------------
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    mm, _ = timed(lambda: a @ b, 20)
    peak = 2 * 1024**3 / mm / 1e9
    print(f"\n1. GFLOP/s per CPU second: matmul 1024^3 {peak:.1f}")
    frames = 2 * batch * len(range(0, length, stride))
    print(
        "\n".join(
            conv_rates(
                [
                    ("conv1", 4, 32, 8, 4, 84, (8, 256)),
                    ("conv2", 32, 64, 4, 2, 20, (8, 256)),
                    ("conv3", 64, 64, 3, 1, 9, (8, 256)),
                    ("rm1", 4, 16, 7, 3, 84, (8, frames)),
                    ("rm2", 16, 16, 5, 2, 26, (8, frames)),
                    ("rm3", 16, 16, 3, 1, 11, (8, frames)),
                    ("rm4", 16, 16, 3, 1, 9, (8, frames)),
                ]
            )
        )
    )

    # 2. FLOPs per agent step ----------------------------------------------------------------
    space = gym.spaces.Discrete(6)
    obs_shape = (4, 84, 84)
    ac = ActorCritic(obs_shape, space)
    x1 = torch.zeros(1, *obs_shape, dtype=torch.uint8)
    pol_f, pol_fb = fwd_bwd_flops(macs(ac, x1))
    epochs = ppo["epochs"]
    pol_step = pol_f + epochs * pol_fb + pol_f  # rollout, update, the KL diagnostic
    obs_space = gym.spaces.Box(0, 255, obs_shape, np.uint8)
    model = RewardModel(obs_space, space, members=members, dropout=prefs.get("dropout", 0.0))
    o1, a1 = torch.zeros(1, *obs_shape), torch.zeros(1, 6)
    rm_f, rm_fb = fwd_bwd_flops(macs(model.nets[0].eval(), o1, a1))
    rm_infer = members * rm_f
    rm_update = members * frames * rm_fb
    kstep = prefs.get("rm_updates_per_kstep", 10.0)
    rm_train_step = rm_update * kstep / 1000
    print(
        f"\n2. FLOPs: policy CNN {pol_f / 1e6:.1f} M forward, {pol_fb / 1e6:.1f} M forward + "
        f"backward per frame; per agent step at {epochs} epochs {pol_step / 1e6:.0f} M.\n"
        f"   reward CNN {rm_f / 1e6:.2f} M forward, {rm_fb / 1e6:.2f} M forward + backward per "
        f"frame; per agent step: inference {rm_infer / 1e6:.1f} M ({members} members); per "
        f"update {rm_update / 1e9:.2f} G ({batch} pairs x 2 x {frames // (2 * batch)} frames "
        f"x {members}), at {kstep:g} updates per 1,000 steps {rm_train_step / 1e6:.1f} M per "
        f"agent step"
    )

    # 3. the code's own times ---------------------------------------------------------------
    print("\n3. time per call, CPU ms (wall ms):")
    x8 = torch.randint(0, 256, (8, *obs_shape), dtype=torch.uint8)
    x256 = torch.randint(0, 256, (256, *obs_shape), dtype=torch.uint8)
    policy = {}
    for cl in (False, True):
        torch.manual_seed(0)
        net = ActorCritic(obs_shape, space)
        if not cl:
            net.trunk.channels_last = False
            net.trunk.net.to(memory_format=torch.contiguous_format)
        flat = FlatParams(list(net.parameters()))
        opt = torch.optim.Adam([flat.param], lr=2.5e-4, eps=1e-5, fused=True)

        def step(net=net, flat=flat, opt=opt):
            out, v = net(x256)
            loss = out.logsumexp(-1).mean() + v.pow(2).mean()
            flat.zero_grad()
            loss.backward()
            flat.adam_step(opt)

        def fwd(net=net):
            with torch.inference_mode():
                net(x8)

        f8, s256 = timed(fwd, REPS["fwd8"] // 4), timed(step, REPS["step"])
        policy[cl] = (f8[0], s256[0])
        label = "channels-last" if cl else "NCHW"
        print(
            f"  policy {label:13s}: forward on 8 frames {f8[0] * 1e3:6.2f} ({f8[1] * 1e3:6.2f}), "
            f"gradient step on 256 {s256[0] * 1e3:6.1f} ({s256[1] * 1e3:6.1f})"
        )

    rng = np.random.default_rng(0)
    segs = {
        i: (rng.integers(0, 256, (length, *obs_shape), dtype=np.uint8), rng.integers(0, 6, length))
        for i in range(2 * batch)
    }
    obs8, act8 = rng.integers(0, 256, (8, *obs_shape), dtype=np.uint8), rng.integers(0, 6, 8)
    reward = {}
    for fast in (False, True):
        torch.manual_seed(0)
        m = RewardModel(
            obs_space,
            space,
            members=members,
            dropout=prefs.get("dropout", 0.0),
            batch_size=batch,
            frame_stride=stride if fast else 1,
            rng=np.random.default_rng(0),
        )
        m.observe(np.concatenate([s[0] for s in segs.values()]))
        if not fast:  # as before: NCHW nets, members one by one, float64 inputs
            m.image = False
            for net in m.nets:
                net.channels_last = False
                net.convs.to(memory_format=torch.contiguous_format)
        pairs = PairSet(members, np.random.default_rng(1))
        pairs.sync([(q, 2 * q, 2 * q + 1, float(q % 2)) for q in range(batch)], segs.__getitem__)
        pairs.is_val[:] = False
        snap = m.snapshot() if fast else m
        infer = timed(lambda snap=snap: snap.reward(obs8, act8), REPS["fwd8"] // 4)
        upd = timed(lambda m=m, pairs=pairs: m.train_step(pairs), 3, warm=1)
        reward[fast] = (infer[0], upd[0])
        label = (
            f"channels-last, fused, float32, stride {stride}"
            if fast
            else "NCHW, one by one, float64, stride 1"
        )
        print(
            f"  reward model ({label}): reward for 8 frames {infer[0] * 1e3:6.2f} "
            f"({infer[1] * 1e3:6.2f}), update {upd[0] * 1e3:7.0f} ({upd[1] * 1e3:7.0f})"
        )

    for kind in ("sync", "async", "sync", "async"):
        print(
            f"  env {kind:5s} vector env, 8 copies: "
            f"{env_rate(args.env, kind, args.env_seconds):6.0f} agent steps/s (wall)"
        )

    # 4. floor ------------------------------------------------------------------------------
    n_mb = ppo["num_envs"] * ppo["num_steps"] // ppo["minibatch_size"]
    per_sample_step = policy[True][1] / ppo["minibatch_size"]
    pol_time = policy[True][0] / 8 + epochs * per_sample_step + policy[True][0] / 8
    pol_floor = pol_step / (peak * 1e9)
    old_time = policy[False][0] / 8 + epochs * policy[False][1] / 256 + policy[False][0] / 8
    print(
        f"\n4. floor at the matmul rate {peak:.0f} GFLOP/s: policy {pol_floor * 1e3:.2f} ms per "
        f"agent step; the code {pol_time * 1e3:.2f} ms channels-last (floor/achieved "
        f"{pol_floor / pol_time:.2f}), {old_time * 1e3:.2f} ms NCHW ({epochs} epochs of "
        f"{n_mb} minibatches, one forward pass per step in the rollout and one for the KL)"
    )
    infer_t, upd_t = reward[True][0] / 8, reward[True][1] * kstep / 1000
    print(
        f"   reward model: inference {rm_infer / (peak * 1e9) * 1e3:.3f} ms floor vs "
        f"{infer_t * 1e3:.3f} ms per agent step ({rm_infer / (peak * 1e9) / infer_t:.2f}); "
        f"training {rm_train_step / (peak * 1e9) * 1e3:.3f} ms floor vs {upd_t * 1e3:.3f} ms "
        f"per agent step ({rm_train_step / (peak * 1e9) / upd_t:.2f}); before: inference "
        f"{reward[False][0] / 8 * 1e3:.3f} ms, an update at stride 1 "
        f"{reward[False][1] * 1e3:.0f} ms"
    )


if __name__ == "__main__":
    main()
