"""What the fixed horizon alone costs: PPO on the env's *true* reward under a preference run's
horizon treatment, beside PPO on the env's own episodes.

A preference run on an env whose episodes end early makes every episode as long as the time
limit (`prefs.horizon=restart`, the default: after the env ends an episode, `absorb_steps`
steps in an absorbing state with reward 0, then a fresh start inside the episode;
backflip/envs/horizon.py). Where the preference run lags PPO on the true reward
(docs/preferences.md, "Calibration on envs no preset names"), the lag is the learned reward's
or the horizon's. This script separates them: the same PPO settings (the env's preset), steps
and seeds, trained on the true reward inside `FixedHorizon(restart_after=absorb_steps)`, and
each final policy evaluated greedily on the env's own episodes (20, as the calibration does).
The true-reward runs on the env's own episodes are read from the calibration's results
(`prefs_user_envs_results.json`), not run again.

    python benchmarks/horizon_cost.py --envs invdoublependulum,invpendulum,cartpole --seeds 3

The envs are registered by this module (`--env horizon_cost:Restart25/ID`), the way a user's
own module registers its envs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve().parent
ABSORB = 25  # prefs.absorb_steps' derived value: one clip
ENVS = {  # name in prefs_user_envs.py: (env id, agent steps)
    "cartpole": ("CartPole-v1", 100_000),
    "invpendulum": ("InvertedPendulum-v5", 100_000),
    "invdoublependulum": ("InvertedDoublePendulum-v5", 200_000),
    "hopper": ("Hopper-v5", 300_000),
}


def _restart(env_id: str, absorb_steps: int, **kwargs) -> gym.Env:
    from backflip.envs.horizon import FixedHorizon

    return FixedHorizon(gym.make(env_id, **kwargs), restart_after=absorb_steps)


for _env_id, _ in ENVS.values():
    if f"Restart{ABSORB}/{_env_id}" not in gym.registry:
        gym.register(
            f"Restart{ABSORB}/{_env_id}", entry_point=functools.partial(_restart, _env_id, ABSORB)
        )


def greedy_on_own_episodes(run_dir: Path, seed: int, env_id: str, episodes: int = 20) -> float:
    """The mean greedy return of the seed's final policy on the env's own episodes."""
    import torch

    from backflip.algos import get_algo
    from backflip.envs import make_env
    from backflip.runs.layout import CHECKPOINTS, FINAL_CHECKPOINT, seed_dir
    from backflip.seedrun import evaluate

    checkpoint = torch.load(
        seed_dir(run_dir, seed) / CHECKPOINTS / FINAL_CHECKPOINT, weights_only=False
    )
    envs = gym.vector.SyncVectorEnv(
        [lambda: make_env(env_id, evaluation=True) for _ in range(episodes)]
    )
    try:
        agent = get_algo("ppo").load(
            checkpoint, envs.single_observation_space, envs.single_action_space
        )
        returns, _ = evaluate(agent.act, envs, episodes, 1_000_003 + seed)
    finally:
        envs.close()
    return float(returns.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="agent steps (default: the table's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--home", default="runs")
    ap.add_argument("--calibration", default=str(HERE / "prefs_user_envs_results.json"))
    ap.add_argument("--out", default=str(HERE / "horizon_cost_results.json"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))  # this module, as a user's own (`--env horizon_cost:...`)
    from backflip.config import resolve
    from backflip.jsonout import dumps
    from backflip.launch import launch_runs

    calibration = json.loads(Path(args.calibration).read_text())
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    names = args.envs.split(",")
    seeds = list(range(args.seeds))
    cfgs = []
    for name in names:
        env_id, steps = ENVS[name][0], args.steps or ENVS[name][1]
        # the env's own PPO settings (its preset), on the fixed-horizon copy of it
        own = resolve("ppo", env_id, seeds, steps, set_values={"eval_episodes": "20"})
        cfgs.append(dataclasses.replace(own, env_id=f"horizon_cost:Restart{ABSORB}/{env_id}"))
    home = Path(args.home)
    t0 = time.time()
    records = launch_runs(
        cfgs,
        home,
        ["python", "benchmarks/horizon_cost.py", *sys.argv[1:]],
        messages=[f"horizon-cost: {n}, true reward, restart after {ABSORB}" for n in names],
        workers=args.workers,
        progress=not args.no_progress,
        tags=[["horizon-cost", n] for n in names],
        labels=names,
    )
    print(f"{len(names)} envs in {(time.time() - t0) / 60:.1f} min", file=sys.stderr)
    for name, record, cfg in zip(names, records, cfgs, strict=True):
        env_id, steps = ENVS[name][0], cfg.steps
        if record["status"] != "finished":
            print(f"{name}: not recorded ({record['status']})")
            continue
        base = calibration.get(name, {})
        own = [
            greedy_on_own_episodes(Path(record["dir"]), s, env_id) for s in seeds
        ]  # fmt: skip
        results[name] = {
            "env": env_id,
            "steps": steps,
            "seeds": seeds,
            "absorb_steps": ABSORB,
            "run": record["id"],
            "home": str(home.resolve()),
            "restart_returns": own,
            "true_returns": base.get("true_returns"),
            "pref_returns": base.get("pref_returns"),
            "R_random": base.get("R_random"),
        }
    out.write_text(dumps(results, indent=1) + "\n")
    print(table(results))


def table(results: dict) -> str:
    rows = [
        "| env | steps | PPO, true reward, own episodes | PPO, true reward, fixed horizon "
        f"(restart after {ABSORB}) | PPO from preferences (restart) | horizon's share of the gap |",
        "|---|---|---|---|---|---|",
    ]
    for res in results.values():

        def cells(values):
            return ", ".join("–" if v is None else f"{v:,.1f}" for v in values or [])

        own, fixed, pref = res["true_returns"], res["restart_returns"], res["pref_returns"]
        share = "–"
        if own and fixed and pref:
            gap = np.mean(own) - np.mean(pref)
            share = f"{(np.mean(own) - np.mean(fixed)) / gap:.2f}" if gap > 0 else "–"
        rows.append(
            f"| {res['env']} | {res['steps']:,} | {cells(own)} | {cells(fixed)} | {cells(pref)} "
            f"| {share} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
