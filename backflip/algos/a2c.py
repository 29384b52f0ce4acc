"""Advantage Actor-Critic (Mnih et al. 2016), synchronous: A2C.

`num_envs` env copies step in lockstep for `num_steps` steps; the short rollout gives advantages
A_t (GAE; with gae_lambda = 1 the n-step return minus V(s_t), as in the paper), and one gradient
step on

    L = -mean(A_t log π(a_t|s_t)) + vf_coef · mean(½ (V(s_t) − R_t)²) − ent_coef · mean(H[π(·|s_t)])

with R_t = A_t + V(s_t) (`update` in `train`). Then the next rollout continues from where this
one stopped. The loop around `update` (rollouts, advantages, episode ends, metrics rows,
evaluations, checkpoints, resume) is the one PPO, A2C and VPG share:
`backflip/algos/onpolicy.py`; as there, `values[t + 1]` is the bootstrap, zeroed on termination
only, and the autoreset step is dropped from the loss.

Rollouts are tiny (8 × 5 = 40 steps with SB3's settings), so diagnostics are computed only on the
iteration that closes a metrics row, every `log_every` env steps (a run option, as for every
algorithm; A2C's default is `ROW_EVERY`): rollout statistics over all iterations since the last
row, and KL, update size and entropy of that row's last update.
"""

from __future__ import annotations

import math

import torch

from backflip.algos import onpolicy
from backflip.algos.common import build_actor_critic, load_actor_critic, log_policy_health
from backflip.algos.settings.a2c import Config
from backflip.nets import FlatParams, params_vector, uniform_entropy
from backflip.seedrun import SeedRun

# env steps between metrics rows when `log_every` is 0 (its rollouts are tiny: a row every
# rollout would cost more than the update)
ROW_EVERY = 2000


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled
    ro = onpolicy.Rollouts(cfg, run)  # the envs, the rollout storage, the normalizers
    ac = build_actor_critic(cfg, ro.obs_space, ro.act_space).to(device)
    params = list(ac.parameters())
    flat = FlatParams(params)  # one buffer: zeroing, clipping and the optimizer are one kernel each
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam([flat.param], lr=cfg.lr, eps=cfg.opt_eps, fused=device.type == "cpu")
    else:
        opt = torch.optim.RMSprop([flat.param], lr=cfg.lr, alpha=0.99, eps=cfg.opt_eps)
    max_entropy = uniform_entropy(ro.act_space)

    def update(b: onpolicy.Batch, frac: float, row: bool) -> None:
        """One gradient step on the policy, value and entropy losses of the rollout."""
        lr = cfg.lr * frac if cfg.anneal_lr else cfg.lr
        for g in opt.param_groups:
            g["lr"] = lr
        theta0 = params_vector(params).detach().clone() if row and diag else None
        with tel.timer("update"):
            out, value = ac(b.obs)
            logp, entropy = ac.logp_entropy(out, b.act)
            a = b.adv
            if cfg.norm_adv and len(a) > 1:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg_loss = -(a * logp).mean()
            v_loss = 0.5 * ((value - b.ret) ** 2).mean()
            loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy.mean()
            flat.zero_grad()
            loss.backward()
            # the norm before clipping; max_norm=inf only measures it
            grad_norm = flat.clip_grad_norm_(cfg.max_grad_norm or math.inf)
            opt.step()
        tel.store(
            **{
                "train/policy_loss": pg_loss.detach(),
                "train/value_loss": v_loss.detach(),
                "train/entropy": entropy.detach().mean(),
                "train/grad_norm": grad_norm,
            }
        )
        if row and diag:  # KL, update size and entropy of the update that closes the row
            log_policy_health(tel, ac, b.obs, b.act, logp.detach(), theta0, max_entropy)
            tel.log(**{"train/lr": lr})

    learner = onpolicy.Learner(
        ac=ac,
        update=update,
        state={"model": ac, "optimizer": flat.checkpointed(opt)},
        log_every=ROW_EVERY,
        window=True,  # a row's rollout statistics: every rollout since the last row
    )
    onpolicy.train(cfg, run, ro, learner)


# the trained agent in a checkpoint written by `train`
load = load_actor_critic
