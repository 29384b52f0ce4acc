"""What DQN's k-step targets cost per minibatch: `ReplayBuffer.sample` against `sample_nstep`.

Fills a 50,000-transition buffer with CartPole-shaped transitions (episode ends 1% of the time)
and times each sampler on minibatches of 64, one torch thread. Usage:

    python benchmarks/replay_sample.py [--n 3] [--repeats 20000]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import timeit

import numpy as np
import torch

from backflip.buffers import ReplayBuffer


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="steps per target for sample_nstep")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20_000)
    args = p.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rb = ReplayBuffer(50_000, (4,), (), act_dtype=np.int64, seed=0)
    for _ in range(50_000):
        rb.add(rng.normal(size=4), 1, 1.0, rng.normal(size=4), rng.random() < 0.01, False)
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    for name, fn in [
        ("sample", lambda: rb.sample(args.batch)),
        (f"sample_nstep (n={args.n})", lambda: rb.sample_nstep(args.batch, args.n, 0.99)),
    ]:
        seconds = timeit.timeit(fn, number=args.repeats) / args.repeats
        print(f"{name}: {seconds * 1e6:.1f} µs per minibatch of {args.batch}")


if __name__ == "__main__":
    main()
