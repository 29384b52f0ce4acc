"""TensorBoard logs of Stable-Baselines3's PPO on CartPole-v1 with rl-baselines3-zoo's settings
(the same ones backflip's PPO preset uses), one folder per seed — a baseline for
`backflip compare RUN LOGDIR@CartPole-v1` (docs/experiments.md).

    pip install -e '.[bench]'
    python benchmarks/sb3_tensorboard_logs.py --seeds 5 --steps 50000 --logdir sb3-logs
"""

from __future__ import annotations

import argparse

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env


def linear(start: float):
    return lambda progress: progress * start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--logdir", default="sb3-logs")
    args = p.parse_args()
    torch.set_num_threads(1)
    for seed in range(args.seeds):
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            seed=seed,
            tensorboard_log=args.logdir,
        )
        model.learn(args.steps, tb_log_name="PPO")
        env.close()
        print(f"seed {seed}: done", flush=True)


if __name__ == "__main__":
    main()
