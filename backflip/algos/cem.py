"""Cross-Entropy Method over policy parameters: a gradient-free baseline (Szita & Lőrincz 2006).

The search distribution over the flat parameter vector θ of a small deterministic policy is a
diagonal Gaussian N(μ, σ²). Each generation:

1. sample `population` candidates θ_i = μ + σ ⊙ ε_i;
2. run each for `episodes` full episodes (all candidates at once, one vectorized env copy per
   episode) and score it by its mean undiscounted return;
3. refit μ and σ to the best `elite_frac` of the candidates, adding decaying extra variance
   (σ² ← Var[elites] + extra_std² · (1 − progress)) so the search does not collapse early.

The policy is a linear map (or an MLP with `hidden` layers) from observation to action logits
(Discrete: argmax) or to a tanh-squashed action within the Box bounds. The agent is μ's policy.
`step` counts only the steps inside candidates' episodes: env copies whose episode has ended wait
(their extra steps are neither counted nor scored). There is no value function and no bootstrap:
a truncated episode simply scores its return so far.
"""

from __future__ import annotations

import numpy as np
import torch

from backflip.algos.common import Agent
from backflip.algos.settings.cem import Config
from backflip.config import TrainConfig
from backflip.envs import restore_envs, snapshot_envs
from backflip.errors import UserError
from backflip.nets import ACTIVATIONS
from backflip.seedrun import SeedRun


class Policy:
    """A batch of deterministic MLP policies, one per row of a (P, D) parameter matrix."""

    def __init__(self, obs_space, act_space, hidden: tuple[int, ...], activation: str):
        self.discrete = hasattr(act_space, "n")
        n_out = act_space.n if self.discrete else int(np.prod(act_space.shape))
        self.sizes = [int(np.prod(obs_space.shape)), *hidden, n_out]
        self.dim = sum((a + 1) * b for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True))
        self.act_fn = ACTIVATIONS[activation]()
        if not self.discrete:
            self.low = torch.as_tensor(act_space.low, dtype=torch.float32)
            self.high = torch.as_tensor(act_space.high, dtype=torch.float32)

    def __call__(self, theta: torch.Tensor, obs: torch.Tensor) -> np.ndarray:
        """Actions for obs (P, K, obs_dim) under parameters theta (P, D): (P * K, ...)."""
        h, i = obs.flatten(2), 0
        for layer, (a, b) in enumerate(zip(self.sizes[:-1], self.sizes[1:], strict=True)):
            w = theta[:, i : i + a * b].view(-1, a, b)
            bias = theta[:, i + a * b : i + (a + 1) * b].unsqueeze(1)
            h, i = torch.baddbmm(bias, h, w), i + (a + 1) * b
            if layer < len(self.sizes) - 2:
                h = self.act_fn(h)
        h = h.flatten(0, 1)
        if self.discrete:
            return h.argmax(-1).numpy()
        return (self.low + (torch.tanh(h) + 1) / 2 * (self.high - self.low)).numpy()


def make_agent(policy: Policy, mu: torch.Tensor) -> Agent:
    """The mean parameters' policy on a batch of raw observations (no value function)."""

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        return policy(mu[None], torch.as_tensor(o, dtype=torch.float32)[None])

    return Agent(act=act, value=None)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train` (CPU only: tiny policies)."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    policy = Policy(obs_space, act_space, cfg.hidden, cfg.activation)
    return make_agent(policy, checkpoint["state"]["mu"])


def train(cfg: Config, run: SeedRun) -> None:
    tel = run.tel
    P, K = cfg.population, cfg.episodes
    envs = run.make_vec(P * K)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    if len(obs_space.shape) != 1:
        raise UserError(f"cem needs vector observations; {run.env_id} has {obs_space}")
    policy = Policy(obs_space, act_space, cfg.hidden, cfg.activation)
    mu = torch.zeros(policy.dim)
    std = torch.full((policy.dim,), cfg.init_std)
    n_elite = max(1, round(cfg.elite_frac * P))
    agent = make_agent(policy, mu)  # mu is updated in place

    def state() -> dict:  # everything needed to continue training (backflip resume)
        # the envs carry their RNGs across generations: saved for an exact resume
        return {
            "mu": mu.clone(),
            "std": std.clone(),
            "generation": gen,
            "envs": snapshot_envs(envs),
        }

    gen, step = 0, 0
    if run.restored:
        mu.copy_(run.restored["mu"])
        std.copy_(run.restored["std"])
        gen, step = run.restored["generation"], run.start_step
        run.restore_rng()

    reset_seed: int | None = run.env_seed + step  # seed once; later resets continue the RNGs
    if run.restored and run.restored.get("envs"):
        envs.close()
        envs, reset_seed = restore_envs(run.restored["envs"]), None
    while step < run.steps and not run.stopping:
        gen += 1
        # -- sample and score a population --------------------------------------------------
        with tel.timer("rollout"), torch.inference_mode():
            thetas = mu + std * torch.randn(P, policy.dim)
            obs, _ = envs.reset(seed=reset_seed)
            reset_seed = None
            running = np.ones(P * K, bool)
            returns, lengths = np.zeros(P * K), np.zeros(P * K, np.int64)
            while running.any():
                o = torch.as_tensor(obs, dtype=torch.float32).view(P, K, -1)
                obs, reward, term, trunc, _ = envs.step(policy(thetas, o))
                returns += np.where(running, reward, 0.0)
                lengths += running
                ended = running & (term | trunc)
                for i in np.flatnonzero(ended):
                    tel.episode(step + int(lengths.sum()), returns[i], lengths[i])
                running &= ~ended
            step += int(lengths.sum())

        # -- refit the search distribution to the elites ------------------------------------
        scores = torch.as_tensor(returns.reshape(P, K).mean(1))
        elite = scores.argsort(descending=True)[:n_elite]
        extra = cfg.extra_std * max(0.0, 1.0 - step / run.steps)
        mu.copy_(thetas[elite].mean(0))
        var = thetas[elite].var(0, correction=0) if n_elite > 1 else torch.zeros_like(mu)
        std.copy_((var + extra**2).sqrt())

        tel.log(
            **{
                "train/pop_return_mean": float(scores.mean()),
                "train/pop_return_max": float(scores.max()),
                "train/elite_return_mean": float(scores[elite].mean()),
                "train/param_std": float(std.mean()),
                "train/param_std_max": float(std.max()),
                "train/extra_std": extra,
                "train/generation": gen,
            }
        )
        evaluate_now = run.eval_due(step)
        if evaluate_now:
            run.evaluate(step, agent.act)
        # a row every generation, or every `log_every` env steps (the generation closing it)
        if run.log_due(step, default_every=1) or evaluate_now:
            run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
