"""How reliable are backflip's DQN defaults on CartPole-v1, really? Seeds and nearby variants.

A learning test that passes 5 of 5 seeds says little if the same settings, nudged by a rounding
error, fail one seed in five: DQN training is chaotic, and any change to the arithmetic (a
different optimizer kernel, another Adam epsilon, one more network evaluated) gives each seed a
different trajectory. This script trains the defaults and any variants given with `--variant`
on seeds `--seeds` for the full budget, evaluating the greedy policy (10 episodes) every 1,000
steps, and prints per seed the first step and second at which the evaluation reached 475, the
final greedy return, and per variant how many seeds end at >= 475. Each run is its own process
with one torch thread; `--workers` runs at once. Usage:

    python benchmarks/dqn_seed_sensitivity.py --seeds 0-9 \
        --variant defaults --variant adam_eps=1e-4 --variant adam_eps=1e-3

A variant is `defaults` or comma-separated `key=value` settings (`backflip train --set` names).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor

THRESHOLD = 475.0
EVAL_EVERY = 1000


def one(job: tuple[int, dict]) -> dict:
    seed, sets = job
    import torch
    from offpolicy import train_seed

    from backflip.config import resolve

    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # import torch._dynamo off the clock
    values = {"eval_every": EVAL_EVERY, "log_every": EVAL_EVERY, **sets}
    cfg = resolve("dqn", "CartPole-v1", [seed], None, set_values=values)
    run, evals, _, _ = train_seed("dqn", cfg, seed)
    first = next(((s, t) for s, r, t in evals if r >= THRESHOLD), (None, None))
    return {"first_step": first[0], "first_s": first[1], "final": run.result["eval_return"]}


def parse_variant(text: str) -> dict:
    if text == "defaults":
        return {}
    pairs: list[str] = []
    for part in text.split(","):  # "hidden=64,64,lr=1e-3": a part without "=" continues a value
        if "=" in part or not pairs:
            pairs.append(part)
        else:
            pairs[-1] += "," + part
    return dict(kv.split("=", 1) for kv in pairs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0-9", help="a range, e.g. 0-9")
    p.add_argument("--variant", action="append", help="defaults, or key=value[,key=value]")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    seeds = list(range(lo, hi + 1))
    variants = args.variant or ["defaults"]
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, {args.workers} workers"
    )
    with ProcessPoolExecutor(args.workers) as pool:
        for variant in variants:
            sets = parse_variant(variant)
            results = list(pool.map(one, [(s, sets) for s in seeds]))
            print(f"\n## {variant}")
            print("| seed | first eval >= 475: step (s) | final greedy return |")
            print("|---|---|---|")
            for seed, r in zip(seeds, results, strict=True):
                first = (
                    f"{r['first_step']:,} ({r['first_s']:.1f} s)" if r["first_step"] else "never"
                )
                print(f"| {seed} | {first} | {r['final']:.1f} |")
            ok = sum(r["final"] >= THRESHOLD for r in results)
            print(f"final >= {THRESHOLD:.0f} on {ok}/{len(seeds)} seeds")


if __name__ == "__main__":
    main()
