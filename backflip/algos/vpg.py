"""Vanilla Policy Gradient: REINFORCE with a learned value baseline and GAE (Spinning Up's VPG).

Each iteration collects `num_envs * num_steps` steps with the current policy, then

1. computes GAE advantages A_t and value targets R_t = A_t + V(s_t) (Schulman et al. 2016);
2. takes ONE gradient step on the policy, L_π = -mean(Â_t log π(a_t|s_t)) − ent_coef · H,
   with Â the advantages (normalized over the batch with `norm_adv`; the unbiased on-policy
   gradient: a second step would be off-policy, which is what PPO's clipping is for);
3. fits the value function with `vf_iters` Adam steps on ½ (V(s_t) − R_t)² over minibatches.

Policy and value have separate optimizers (the policy's also trains the CNN trunk on images).
Steps 2 and 3 are `update` in `train`; the loop around it (rollouts, advantages, episode ends,
metrics rows, evaluations, checkpoints, resume) is the one PPO, A2C and VPG share:
`backflip/algos/onpolicy.py`. As there, `values[t + 1]` is the bootstrap, zeroed on termination
only, and the autoreset step is dropped from both losses.

Metrics rows: one every `log_every` env steps (a run option, default 1,000) and at least one per
rollout that crosses it: losses and gradient norms are means over the updates since the last
row; the other diagnostics describe the rollout that closes the row.
"""

from __future__ import annotations

import math

import torch

from backflip.algos import onpolicy
from backflip.algos.common import build_actor_critic, load_actor_critic, log_policy_health
from backflip.algos.settings.vpg import Config
from backflip.nets import adam_step, clip_grad_norm_, params_vector, uniform_entropy
from backflip.seedrun import SeedRun


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled
    ro = onpolicy.Rollouts(cfg, run)  # the envs, the rollout storage, the normalizers
    ac = build_actor_critic(cfg, ro.obs_space, ro.act_space).to(device)
    v_params = list(ac.v.parameters())
    pi_params = [p for p in ac.parameters() if all(p is not q for q in v_params)]
    fused = device.type == "cpu"
    pi_opt = torch.optim.Adam(pi_params, lr=cfg.pi_lr, eps=1e-5, fused=fused)
    v_opt = torch.optim.Adam(v_params, lr=cfg.vf_lr, eps=1e-5, fused=fused)
    max_entropy = uniform_entropy(ro.act_space)

    def update(b: onpolicy.Batch, frac: float, row: bool) -> None:
        """One policy step, then `vf_iters` steps fitting the value function."""
        frac = frac if cfg.anneal_lr else 1.0
        pi_opt.param_groups[0]["lr"], v_opt.param_groups[0]["lr"] = (
            cfg.pi_lr * frac,
            cfg.vf_lr * frac,
        )
        n = len(b)
        theta0 = None
        if row and diag:
            theta0 = params_vector(ac.parameters()).detach().clone()
        with tel.timer("update"):
            out = ac.policy(b.obs)
            logp, entropy = ac.logp_entropy(out, b.act)
            a = (b.adv - b.adv.mean()) / (b.adv.std() + 1e-8) if cfg.norm_adv and n > 1 else b.adv
            pg_loss = -(a * logp).mean() - cfg.ent_coef * entropy.mean()
            pi_opt.zero_grad(set_to_none=True)
            pg_loss.backward()
            grad_norm = clip_grad_norm_(pi_params, cfg.max_grad_norm or math.inf)
            adam_step(pi_opt)
            tel.store(
                **{
                    "train/policy_loss": pg_loss.detach(),
                    "train/entropy": entropy.detach().mean(),
                    "train/grad_norm": grad_norm,
                }
            )

            features = ac.trunk(b.obs).detach()  # the value step does not train the trunk
            for _ in range(cfg.vf_iters):
                mb = torch.randperm(n, device=device)[: cfg.vf_minibatch]
                v_loss = 0.5 * ((ac.v(features[mb]).squeeze(-1) - b.ret[mb]) ** 2).mean()
                v_opt.zero_grad(set_to_none=True)
                v_loss.backward()
                if cfg.max_grad_norm:
                    clip_grad_norm_(v_params, cfg.max_grad_norm)
                adam_step(v_opt)
                tel.store(**{"train/value_loss": v_loss.detach()})
        if row and diag:  # KL, update size and entropy of the policy step
            log_policy_health(tel, ac, b.obs, b.act, logp.detach(), theta0, max_entropy)
            tel.log(**{"train/lr": cfg.pi_lr * frac, "train/vf_lr": cfg.vf_lr * frac})

    learner = onpolicy.Learner(
        ac=ac, update=update, state={"model": ac, "pi_optimizer": pi_opt, "v_optimizer": v_opt}
    )
    onpolicy.train(cfg, run, ro, learner)


# the trained agent in a checkpoint written by `train`
load = load_actor_critic
