"""Deep Q-Network (Mnih et al. 2015), with the Double-DQN target (van Hasselt et al. 2016) and
n-step returns.

Q(s, ·) is an MLP (a CNN for image observations) with one output per discrete action. The agent
acts ε-greedily, ε falling linearly from `eps_start` to `eps_end` over the first `eps_fraction`
of the budget (uniformly random actions before `learning_starts`), and stores every transition
in a replay buffer (`backflip/buffers.py`). Every `train_every` env steps it takes
`gradient_steps` Adam steps on minibatches drawn uniformly from the buffer, minimizing the Huber
loss (or half the squared error, `huber=false`) of the k-step TD error (k = `n_step`, fewer
when the episode ends first; `n_step=1` is the classic one-step target)

    δ  = Q(s_t, a_t) − y,     y = r_t + γ r_t+1 + ... + γ^(k−1) r_t+k−1
                                  + γ^k (1 − terminated_t+k−1) Q_target(s_t+k, a*)
    a* = argmax_a Q(s_t+k, a)          Double DQN (default): the online network picks the
                                       action, the target network evaluates it
    a* = argmax_a Q_target(s_t+k, a)   plain DQN (double=false)

The k-step sum uses the rewards of the ε-greedy behaviour policy without correction, as Rainbow
does (Hessel et al. 2018); with ε at 0.04 the bias is small and the gain is large: a
termination's value reaches k steps further back per target refresh.

Q_target is a frozen copy of Q refreshed every `target_every` gradient steps (τ = 1), or moved
towards it by Polyak averaging Q_target ← (1 − τ) Q_target + τ Q at that interval (τ < 1).
(Stable-Baselines3 counts its `target_update_interval` in env steps instead; with rl-zoo's
CartPole settings — 128 gradient steps every 256 env steps, a copy every 10 env steps — that
amounts to one copy per burst of updates: `target_every=128` here.)

Episode ends: only `terminated` cuts the bootstrap. A k-step sum stops at either end, and a
time-limit truncation bootstraps from Q_target at the episode's final observation, which is the
observation returned by the step that ended the episode; Gymnasium's NEXT_STEP autoreset then
spends one more `step` call on the reset, which is not a transition and is neither stored nor
counted.

Why the defaults (docs/algorithms.md, "DQN", has the measurements): a greedy policy read off
at the end of DQN training is only as good as the last few bursts of updates. On CartPole the
failed final policies we examined kept the pole up and let the cart drift out of bounds after
250-450 steps, a mistake whose cost shows up a hundred steps later with a tiny margin in Q, so
a burst of updates at a constant learning rate (rl-zoo's, SB3's) can swing the final policy
from 500 to 20. backflip anneals the learning rate to 0 over the budget so the final policy is
a settled one, uses the Double-DQN target, and ends ε's decay at 10% of the budget instead of
rl-zoo's 16%, which leaves more of the budget for learning from near-greedy play. Those three
alone still failed about one seed in four (the fragile kind: a rounding-level change moved
which seeds); three-step targets fixed that (49 of 50 runs over seeds 0-29 and rounding-level
variants at >= 475) and roughly halved the steps to solve.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from backflip.algos import offpolicy
from backflip.algos.common import Agent
from backflip.algos.settings.dqn import Config
from backflip.config import TrainConfig
from backflip.nets import adam_step, clip_grad_norm_, encoder, frozen_copy, mlp, polyak_update
from backflip.seedrun import SeedRun


class QNetwork(nn.Module):
    """Q(s, ·): an encoder (identity for vectors, `cfg.cnn` for images) and an MLP head."""

    def __init__(self, obs_shape, n_actions: int, cfg: Config):
        super().__init__()
        self.trunk, n_in = encoder(obs_shape, cfg.cnn)
        self.head = mlp([n_in, *cfg.hidden, n_actions], cfg.activation, orthogonal=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs))


def make_agent(q: QNetwork, device) -> Agent:
    """Greedy actions argmax_a Q(s, a) and values max_a Q(s, a) on raw observation batches."""

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        return q(torch.as_tensor(o, device=device)).argmax(-1).cpu().numpy()

    @torch.inference_mode()
    def value(o: np.ndarray) -> np.ndarray:
        return q(torch.as_tensor(o, device=device)).max(-1).values.cpu().numpy()

    return Agent(act=act, value=value)


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    cfg = TrainConfig.from_dict(checkpoint["config"]).hp
    q = QNetwork(obs_space.shape, act_space.n, cfg).to(device)
    q.load_state_dict(checkpoint["state"]["q"])
    return make_agent(q, torch.device(device))


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    xp = offpolicy.Experience(cfg, run)  # the env, the replay buffer, the exploration RNG
    rb = xp.replay
    q = QNetwork(xp.obs_space.shape, xp.act_space.n, cfg).to(device)
    q_target = frozen_copy(q)
    params, target_params = list(q.parameters()), list(q_target.parameters())
    opt = torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps, fused=device.type == "cpu")
    ratio = offpolicy.UpdateRatio(tel, params)
    eps_steps = max(1, int(cfg.eps_fraction * run.steps))
    max_norm = cfg.max_grad_norm or math.inf

    def epsilon(step: int) -> float:
        return cfg.eps_start + (cfg.eps_end - cfg.eps_start) * min(1.0, step / eps_steps)

    def explore(obs: np.ndarray, step: int) -> int:
        """ε-greedy: a uniformly random action with probability ε(step), else argmax_a Q(s, a)."""
        if xp.rng.random() < epsilon(step):
            return xp.random_action()
        with torch.inference_mode():
            return int(q(torch.as_tensor(obs, device=device)).argmax())

    def update(step: int, n: int) -> None:
        """The n-th gradient step, on a uniformly sampled minibatch; every `target_every`-th
        also moves the target network."""
        if cfg.anneal_lr:  # linearly to 0 over the budget
            for g in opt.param_groups:
                g["lr"] = cfg.lr * (1.0 - step / run.steps)
        if cfg.n_step == 1:
            b = rb.sample(cfg.batch_size)
        else:
            b = rb.sample_nstep(cfg.batch_size, cfg.n_step, cfg.gamma)
        with torch.no_grad():
            q_next_all = q_target(b.next_obs)
            if cfg.double:
                a_star = q(b.next_obs).argmax(-1, keepdim=True)
                q_next = q_next_all.gather(-1, a_star).squeeze(-1)
            else:
                q_next = q_next_all.max(-1).values
            discount = cfg.gamma if b.discount is None else b.discount
            y = b.rewards + discount * (1.0 - b.terminated) * q_next
        q_all = q(b.obs)
        q_taken = q_all.gather(-1, b.actions.unsqueeze(-1)).squeeze(-1)
        loss = F.smooth_l1_loss(q_taken, y) if cfg.huber else 0.5 * F.mse_loss(q_taken, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = clip_grad_norm_(params, max_norm)  # the norm before clipping
        if tel.enabled:
            with torch.no_grad():
                tel.store(
                    **{
                        "train/loss": loss.detach(),
                        "train/q_mean": q_taken.detach().mean(),
                        "train/q_max": q_all.detach().max(),
                        "train/td_error": (q_taken.detach() - y).abs().mean(),
                        "train/grad_norm": norm,
                    }
                )
        theta0 = ratio.before()
        adam_step(opt)  # opt.step(), less its Python wrapper
        ratio.after(theta0)
        if n % cfg.target_every == 0:
            polyak_update(target_params, params, cfg.tau)

    def row(step: int, updates: int) -> dict:
        return {
            "rollout/epsilon": epsilon(step),
            "train/target_updates": updates // cfg.target_every,
            "train/lr": opt.param_groups[0]["lr"],
        }

    learner = offpolicy.Learner(
        explore=explore,
        update=update,
        agent=make_agent(q, device),
        state={"q": q, "q_target": q_target, "optimizer": opt},
        update_ratio=ratio,
        row=row,
    )
    offpolicy.train(cfg, run, xp, learner)
