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
from dataclasses import dataclass

import torch

from backflip.algos import onpolicy
from backflip.algos.common import build_actor_critic, load_actor_critic, log_policy_health
from backflip.nets import FlatParams, params_vector
from backflip.seedrun import SeedRun

ACTION_SPACES = ("discrete", "box")
DEFAULT_STEPS = 100_000


@dataclass
class Config(onpolicy.Settings):
    """A2C hyperparameters. Defaults: cheap and reliable on CartPole-v1 (docs/algorithms.md);
    SB3/rl-zoo's are optimizer=rmsprop lr=7e-4 num_steps=5 gae_lambda=1 anneal_lr=false
    vf_coef=1 (SB3's value loss has no ½). The network's, the normalization's and the entropy
    bonus's are `onpolicy.Settings`, which PPO and VPG share."""

    num_envs: int = 8
    """parallel env copies per rollout"""
    num_steps: int = 16
    """steps per env copy per rollout: the n of n-step returns"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda (1: plain n-step returns as in Mnih et al. 2016)"""
    optimizer: str = "adam"
    """adam or rmsprop (alpha 0.99, as in Mnih et al. 2016 and SB3)"""
    lr: float = 1e-3
    """learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the budget"""
    opt_eps: float = 1e-5
    """optimizer epsilon"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """global gradient norm clip (0: off)"""
    norm_adv: bool = False
    """normalize advantages per rollout (on tiny rollouts this keeps steps large once learned)"""


# env steps between metrics rows when `log_every` is 0 (its rollouts are tiny: a row every
# rollout would cost more than the update)
ROW_EVERY = 2000

# the trained agent in a checkpoint written by `train`
load = load_actor_critic


PRESETS = {
    "CartPole-v1": {"steps": 300_000},
    # rl-zoo's entry (gSDE, 8 x 8 steps, normalized observations and rewards, SB3's vf_coef 0.4
    # on the MSE = 0.8 on our half MSE) with Adam lr 1e-3 instead of RMSprop 7e-4: RMSprop's
    # rare huge steps (KL up to 8 on one update) drew doctor errors (docs/algorithms.md)
    "Pendulum-v1": {**onpolicy.ZOO_A2C_PENDULUM, "steps": 1_000_000, "vf_coef": 0.8, "lr": 1e-3},
    # `backflip probe a2c`: the default 8 x 16-step rollouts give a few dozen updates in a
    # probe's budget, too few for the value to converge (V(0) = 0.27 on probe 1); 4 x 4-step
    # rollouts give eight times as many (docs/doctor.md, "Probes")
    **onpolicy.probe_presets(num_envs=4, num_steps=4),
}
PRESETS["backflip/Probe5Box-v0"]["steps"] = 24_000


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
    max_entropy = math.log(ro.act_space.n) if ac.discrete else None

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
