"""Why does SB3's DQN with rl-zoo's CartPole settings fail on some seeds? A look inside.

Trains SB3 DQN (rl-zoo hyperparameters, 5e4 steps) on the given seeds and evaluates the greedy
policy every `--every` env steps (10 episodes on separately seeded copies, backflip's protocol),
printing the evaluation curve, how the final greedy episodes end (pole angle or cart position),
and the Q-value scale. `--anneal` decays the learning rate linearly to 0 (the same run otherwise)
to test whether the failure is the last bursts of updates. Usage:

    pip install -e '.[bench]' && python benchmarks/sb3_dqn_cartpole_seeds.py --seeds 0 [--anneal]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from offpolicy import DQN_ZOO_SB3, sb3_greedy_evaluator


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--every", type=int, default=2048)
    p.add_argument("--anneal", action="store_true", help="learning rate linearly to 0")
    args = p.parse_args()

    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    for seed in args.seeds:
        evaluate = sb3_greedy_evaluator("CartPole-v1", seed)
        curve = []

        class Probe(BaseCallback):
            def _on_step(self, curve=curve, evaluate=evaluate):
                if self.num_timesteps % args.every == 0:
                    curve.append((self.num_timesteps, evaluate(self.model)))
                return True

        params = dict(DQN_ZOO_SB3)
        if args.anneal:
            lr0 = params["learning_rate"]
            params["learning_rate"] = lambda f, lr0=lr0: f * lr0
        model = DQN(
            "MlpPolicy",
            make_vec_env("CartPole-v1", n_envs=1, seed=seed),
            seed=seed,
            device="cpu",
            verbose=0,
            **params,
        )
        t0 = time.perf_counter()
        model.learn(total_timesteps=args.steps, callback=Probe())
        final = evaluate(model)
        print(
            f"seed {seed}{' (lr annealed)' if args.anneal else ''}: final greedy eval {final:.1f} "
            f"({time.perf_counter() - t0:.0f} s)"
        )
        print("  eval curve: " + " ".join(f"{s // 1000}k:{r:.0f}" for s, r in curve))
        # how do the final greedy episodes end, and what does Q look like there?
        env = gym.make("CartPole-v1")
        for ep in range(3):
            obs, _ = env.reset(seed=10_000 + ep)
            qs, n, done = [], 0, False
            while not done:
                with torch.no_grad():
                    q = model.q_net(torch.as_tensor(obs[None])).numpy()[0]
                qs.append(q)
                obs, _, term, trunc, _ = env.step(int(q.argmax()))
                n, done = n + 1, term or trunc
            cause = (
                "time limit"
                if not term
                else ("cart position" if abs(obs[0]) > 2.4 else "pole angle")
            )
            qs = np.array(qs)
            print(
                f"  greedy episode {ep}: {n} steps, ended by {cause}; Q mean {qs.mean():.1f}, "
                f"|Q0 - Q1| mean {np.abs(qs[:, 0] - qs[:, 1]).mean():.2f}, "
                f"action 1 share {np.mean(qs.argmax(1)):.2f}"
            )


if __name__ == "__main__":
    main()
