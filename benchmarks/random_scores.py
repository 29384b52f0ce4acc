"""The random-policy scores of `backflip/references.py`: the mean return of uniformly random
actions (`env.action_space.sample()`), over episodes reset with seeds 0..N-1 (the action space
seeded with the same seed), on Gymnasium's registered env (its own time limit).

    python benchmarks/random_scores.py [--episodes 100] [--envs CartPole-v1,Acrobot-v1]

Prints one line per env: mean, its standard error, min and max. The values in REFERENCES are
this script's means, rounded to the precision its standard error allows.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

ENVS = (
    "CartPole-v1,Acrobot-v1,MountainCar-v0,MountainCarContinuous-v0,Pendulum-v1,"
    "InvertedPendulum-v5,InvertedDoublePendulum-v5,Reacher-v5,Swimmer-v5,Hopper-v5,"
    "HalfCheetah-v5,Ant-v5"
)


def random_returns(env_id: str, episodes: int) -> np.ndarray:
    env = gym.make(env_id)
    out = []
    for seed in range(episodes):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(env.action_space.sample())
            total += float(r)
            done = term or trunc
        out.append(total)
    env.close()
    return np.asarray(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--envs", default=ENVS)
    args = p.parse_args()
    for env_id in args.envs.split(","):
        x = random_returns(env_id, args.episodes)
        se = x.std(ddof=1) / np.sqrt(x.size)
        print(
            f"{env_id}: mean {x.mean():.3f} (s.e. {se:.3f}), min {x.min():.3f}, "
            f"max {x.max():.3f}, {x.size} episodes",
            flush=True,
        )


if __name__ == "__main__":
    main()
