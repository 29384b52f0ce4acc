"""The compute floor of off-policy learning on this CPU, and how close backflip gets to it.

For DQN, TD3 and SAC at rl-zoo's settings (`benchmarks/offpolicy.py`: the settings of the
side-by-side with Stable-Baselines3), one torch thread:

1. Every matrix product one gradient step and one exploring action run (forward and backward:
   `mm`, `addmm`, `bmm`, `baddbmm`, with their shapes and memory layouts) is recorded below
   torch's autograd (a `TorchDispatchMode`), averaged over 40 gradient steps.
2. The floor: each of those products timed alone on tensors of the same shapes and layouts
   (median of 5 batches, after warm-up), summed. What is left above it in a real step is
   everything else — elementwise kernels, the optimizer, autograd's bookkeeping, Python, the
   replay sample, the env — which a perfect implementation would not remove entirely, so
   "fraction of the floor" is an upper bound on what tuning can give.
3. A normal training run (nothing recorded) times each `update` and `explore` call
   (`time.perf_counter` around them) and the agent steps after `learning_starts`.
4. torch's profiler over 100 gradient steps of another run: the products' own time inside the
   real step (against their time alone: the cache they meet there) and the other kernels that
   take the most, where the gap to the floor is.

Prints, per algorithm: GFLOP and floor milliseconds per gradient step, the products' rate at
the floor (GFLOP/s: this CPU's attainable rate for those shapes), the measured milliseconds per
gradient step and per agent step, and floor / measured. Usage:

    python benchmarks/offpolicy_floor.py [--algos sac,td3,dqn] [--updates 600]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from offpolicy import DQN_ZOO, SAC_ZOO, TD3_ZOO

TASKS = {
    "dqn": ("CartPole-v1", DQN_ZOO),
    "td3": ("Pendulum-v1", TD3_ZOO),
    "sac": ("Pendulum-v1", SAC_ZOO),
}
MATMULS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default,
}


def flops(op, args) -> int:
    """Multiply-adds x 2 of one product."""
    if op in (torch.ops.aten.mm.default, torch.ops.aten.bmm.default):
        a, b = args[0], args[1]
    else:
        a, b = args[1], args[2]
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def layout(t) -> tuple:
    return (tuple(t.shape), tuple(t.stride())) if isinstance(t, torch.Tensor) else ("v", t)


class Recorder(TorchDispatchMode):
    """Counts the matrix products run under it by (op, argument layouts, keyword arguments)."""

    def __init__(self):
        super().__init__()
        self.calls, self.flops = Counter(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in MATMULS:
            key = (func, tuple(layout(a) for a in args), tuple(sorted(kwargs.items())))
            self.calls[key] += 1
            self.flops[key] = flops(func, args)
        return func(*args, **kwargs)


def alone(op, arg_layouts, kwargs) -> float:
    """Seconds one product takes on its own, on fresh tensors of the recorded layouts."""
    args = [
        torch.empty_strided(shape, stride).normal_() if shape != "v" else stride
        for shape, stride in arg_layouts
    ]
    kw = dict(kwargs)
    n = max(5, min(2000, int(2e8 / max(1, flops(op, args)))))  # ~0.1-1 s a batch at 50 GFLOP/s
    for _ in range(n // 5 + 2):
        op(*args, **kw)
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            op(*args, **kw)
        batches.append((time.perf_counter() - t) / n)
    return statistics.median(batches)


def train(algo: str, steps: int, wrap) -> None:
    """Train one seed of `algo` at rl-zoo's settings for `steps`, with `wrap(learner)` applied
    to its Learner before the loop starts."""
    from backflip.algos import get_algo, offpolicy
    from backflip.config import resolve
    from backflip.seedrun import SeedRun

    env, zoo = TASKS[algo]
    sets = {k: str(v) for k, v in zoo.items()} | {"eval_episodes": "1", "telemetry": "true"}
    cfg = resolve(algo, env, [0], steps, set_values=sets)
    loop = offpolicy.train

    def patched(cfg_hp, run, xp, learner):
        wrap(learner)
        return loop(cfg_hp, run, xp, learner)

    offpolicy.train = patched
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = SeedRun(cfg, 0, tmp)
            get_algo(algo).train(cfg.hp, run)
            run.close()
    finally:
        offpolicy.train = loop


def steps_for(algo: str, updates: int) -> int:
    zoo = TASKS[algo][1]
    per_step = zoo["gradient_steps"] / zoo["train_every"]
    return zoo["learning_starts"] + int(updates / per_step)


def measure(algo: str, updates: int) -> dict:
    torch.set_num_threads(1)
    zoo = TASKS[algo][1]
    # 1. the products of a gradient step and of an exploring action
    rec = {"update": [Recorder(), 0], "explore": [Recorder(), 0]}

    def recording(learner):
        for name in rec:
            fn = getattr(learner, name)

            def wrapped(*a, fn=fn, name=name):
                if rec[name][1] >= 40:
                    return fn(*a)
                rec[name][1] += 1
                with rec[name][0]:
                    return fn(*a)

            setattr(learner, name, wrapped)

    train(algo, steps_for(algo, 60), recording)
    floor, gflop = {}, {}
    for name, (r, n) in rec.items():
        floor[name] = sum(c * alone(*key) for key, c in r.calls.items()) / n
        gflop[name] = sum(c * r.flops[key] for key, c in r.calls.items()) / n / 1e9
    # where the rest goes (docstring, 4): torch's profiler over 100 gradient steps of the real loop
    from torch.profiler import profile

    prof, seen = profile(), [0]

    def profiling(learner):
        fn = learner.update

        def wrapped(*a):
            seen[0] += 1
            if seen[0] == 21:
                prof.__enter__()
            out = fn(*a)
            if seen[0] == 120:
                prof.__exit__(None, None, None)
            return out

        learner.update = wrapped

    train(algo, steps_for(algo, 130), profiling)
    events = [e for e in prof.key_averages() if not e.key.startswith(("autograd::", "Optimizer."))]
    own = {e.key: e.self_cpu_time_total / 100 / 1e3 for e in events}  # ms per gradient step
    names = {op._schema.name for op in MATMULS}  # "aten::mm", ...
    matmul_ms = sum(v for k, v in own.items() if k in names)
    others = sorted(((v, k) for k, v in own.items() if k not in names), reverse=True)
    # a normal run (docstring, 3), each update and exploring action timed
    spent = {"update": [0.0, 0], "explore": [0.0, 0]}
    first = []

    def timing(learner):
        for name in spent:
            fn = getattr(learner, name)

            def wrapped(*a, fn=fn, name=name):
                if not first:
                    first.append(time.perf_counter())
                t = time.perf_counter()
                out = fn(*a)
                spent[name][0] += time.perf_counter() - t
                spent[name][1] += 1
                return out

            setattr(learner, name, wrapped)

    steps = steps_for(algo, updates)
    train(algo, steps, timing)
    t_end = time.perf_counter()
    ms = {k: 1e3 * s / max(1, n) for k, (s, n) in spent.items()}
    per_step = zoo["gradient_steps"] / zoo["train_every"]
    agent_steps = steps - zoo["learning_starts"]
    step_floor = 1e3 * (floor["update"] * per_step + floor["explore"])
    return {
        "gflop_update": gflop["update"],
        "floor_update_ms": 1e3 * floor["update"],
        "gflops_at_floor": gflop["update"] / floor["update"] if floor["update"] else 0.0,
        "update_ms": ms["update"],
        "explore_ms": ms["explore"],
        "floor_step_ms": step_floor,
        # agent steps after learning_starts (final evaluation and checkpoint included, ~1%)
        "step_ms": 1e3 * (t_end - first[0]) / agent_steps,
        "profiled_ms": sum(own.values()),
        "matmul_in_step_ms": matmul_ms,
        "others": others[:6],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--algos", default="sac,td3,dqn")
    ap.add_argument("--updates", type=int, default=600, help="gradient steps of the timed run")
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread")
    for algo in args.algos.split(","):
        r = measure(algo, args.updates)
        print(
            f"{algo} ({TASKS[algo][0]}, rl-zoo settings): {r['gflop_update'] * 1e3:.0f} MFLOP per "
            f"gradient step, floor {r['floor_update_ms']:.2f} ms ({r['gflops_at_floor']:.0f} GFLOP/s "
            f"for its shapes); measured {r['update_ms']:.2f} ms -> {r['floor_update_ms'] / r['update_ms']:.2f} "
            f"of the floor. Agent step: floor {r['floor_step_ms']:.2f} ms, measured "
            f"{r['step_ms']:.2f} ms ({r['floor_step_ms'] / r['step_ms']:.2f}); explore "
            f"{r['explore_ms']:.3f} ms",
            flush=True,
        )
        print(
            f"  under the profiler: {r['profiled_ms']:.2f} ms per gradient step, of which the "
            f"products {r['matmul_in_step_ms']:.2f} ms (alone: {r['floor_update_ms']:.2f}); the "
            "most of the rest: "
            + ", ".join(f"{k.removeprefix('aten::')} {v:.2f}" for v, k in r["others"]),
            flush=True,
        )


if __name__ == "__main__":
    main()
