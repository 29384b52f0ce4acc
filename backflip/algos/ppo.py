"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate with GAE.

Each iteration collects a rollout from `num_envs` env copies with GAE advantages, then runs
`epochs` passes of minibatch steps on the clipped surrogate, the value loss and the entropy
bonus (`update` in `train`). The loop around `update` (rollouts, advantages, episode ends,
metrics rows, evaluations, checkpoints, resume) is the one PPO, A2C and VPG share:
`backflip/algos/onpolicy.py`, which also says how episode ends bootstrap (truncation from
V(s_final), termination from 0) and why the autoreset step is left out of the loss.

The details that make PPO work (Engstrom et al. 2020; Huang et al. 2022, "The 37 implementation
details of PPO") are all here, and each can be switched off for ablations: orthogonal init with
a 0.01-gain policy head (`nets.ActorCritic`), Adam eps 1e-5, learning-rate and clip annealing,
advantage normalization per minibatch, optional value clipping, global gradient clipping, and
(applied by the shared loop's `Rollouts`) observation normalization and reward scaling (scale,
never shift) with running statistics.

Metrics rows: one every `log_every` env steps (a run option, default 1,000: every fourth
iteration with the CartPole defaults' 256-step rollouts), at evaluations and at the end. Losses
and gradient norm are averaged over every minibatch since the last row, entropy and clip fraction
over the samples of every minibatch of an update (reduced once, after it) and then over updates;
KL after the update is computed every iteration (on image observations from every k-th sample of
the rollout, ~256 of them: a CNN pass over all of it is a sizable part of an Atari iteration) and the row
keeps its maximum (a blow-up can last one iteration); the other diagnostics that need an extra
pass (explained variance, update size, value, advantage, observation and reward statistics)
describe the iteration that closes the row: computing all of them on every iteration cost
several times more (docs/benchmarks.md, "What logging everything costs").

Speed (docs/benchmarks.md): a gradient step on CartPole is ~100 small kernels, so what counts is
how many there are. The networks' tanh is NumPy's, each network one autograd node (`nets.MLP` on the
fast path, `backflip/fastpath.py`);
parameters, gradients and Adam's state live in one buffer (`nets.FlatParams`), so zeroing,
clipping and the Adam step are one kernel each (the Adam step called without torch.optim's
Python wrapper: `backflip/fastpath.py`); a rollout that fits in one minibatch is not
shuffled (the loss is a mean over it); the entropy term leaves the graph when its weight is 0.
"""

from __future__ import annotations

import math

import torch

from backflip.algos import onpolicy
from backflip.algos.common import build_actor_critic, load_actor_critic
from backflip.algos.settings.ppo import Config
from backflip.nets import FlatParams, uniform_entropy
from backflip.seedrun import SeedRun

KL_SAMPLES = 256  # image observations: samples of the rollout the KL after an update is taken on


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled  # diagnostics beyond the losses cost a little; skip them when logging is off
    ro = onpolicy.Rollouts(cfg, run)  # the envs, the rollout storage, the normalizers
    ac = build_actor_critic(cfg, ro.obs_space, ro.act_space).to(device)
    flat = FlatParams(list(ac.parameters()))  # one buffer: zeroing, clipping, Adam: a kernel each
    opt = torch.optim.Adam([flat.param], lr=cfg.lr, eps=cfg.adam_eps, fused=device.type == "cpu")
    max_entropy = uniform_entropy(ro.act_space)

    def normalize_adv(a: torch.Tensor) -> torch.Tensor:  # per minibatch
        return (a - a.mean()) / (a.std() + 1e-8) if cfg.norm_adv and len(a) > 1 else a

    def update(b: onpolicy.Batch, frac: float, row: bool) -> None:
        """`epochs` passes of minibatch steps on the clipped surrogate and the value loss."""
        lr = cfg.lr * frac if cfg.anneal_lr else cfg.lr
        clip = cfg.clip * frac if cfg.anneal_clip else cfg.clip
        for g in opt.param_groups:
            g["lr"] = lr
        n = len(b)
        n_mb = max(1, round(n / cfg.minibatch_size))
        whole_adv = normalize_adv(b.adv) if n_mb == 1 else None  # the same for every epoch

        theta0 = flat.data.clone() if row and diag else None  # (the buffer's padding is 0)
        epochs_done = 0
        mb_stats, mb_ratio, mb_entropy = [], [], []  # diagnostics, kept through the update
        with tel.timer("update"):
            for _ in range(cfg.epochs):
                epochs_done += 1
                kl_stop = False
                minibatches = [slice(None)]  # one minibatch: the whole rollout, unshuffled
                if n_mb > 1:
                    minibatches = torch.randperm(n, device=device).tensor_split(n_mb)
                for mb in minibatches:
                    out, value = ac(b.obs[mb])
                    logp, entropy = ac.logp_entropy(out, b.act[mb])
                    logratio = logp - b.logp[mb]
                    ratio = logratio.exp()
                    a = whole_adv if n_mb == 1 else normalize_adv(b.adv[mb])
                    clipped = ratio.clamp(1 - clip, 1 + clip)
                    pg_loss = -torch.min(a * ratio, a * clipped).mean()
                    if cfg.clip_vloss:
                        v_clipped = b.val[mb] + (value - b.val[mb]).clamp(-clip, clip)
                        v_loss = (
                            0.5
                            * torch.max(
                                (value - b.ret[mb]) ** 2, (v_clipped - b.ret[mb]) ** 2
                            ).mean()
                        )
                    else:
                        v_loss = 0.5 * ((value - b.ret[mb]) ** 2).mean()
                    loss = pg_loss + cfg.vf_coef * v_loss
                    if cfg.ent_coef:  # (entropy is still computed and logged)
                        loss = loss - cfg.ent_coef * entropy.mean()
                    flat.zero_grad()
                    loss.backward()
                    # the norm before clipping; max_norm=inf only measures it
                    grad_norm = flat.clip_grad_norm_(cfg.max_grad_norm or math.inf)
                    flat.adam_step(opt)  # opt.step(), less its Python wrapper
                    if diag:  # (list appends only; stored and reduced after the update)
                        mb_stats.append((pg_loss.detach(), v_loss.detach(), grad_norm))
                        mb_ratio.append(ratio.detach())
                        mb_entropy.append(entropy.detach())
                    if cfg.target_kl:
                        with torch.no_grad():
                            mb_kl = ((ratio - 1) - logratio).mean()
                        if mb_kl > 1.5 * cfg.target_kl:
                            kl_stop = True
                            break
                if kl_stop:
                    break
        if not diag:
            return

        # -- diagnostics: KL after every update (a blow-up can last one iteration), the rest
        # once per metrics row -----------------------------------------------------------------
        with tel.timer("diagnostics"), torch.inference_mode():  # (cost: metrics.md)
            pg, vl, gn = zip(*mb_stats, strict=True)  # per minibatch
            tel.extend(**{"train/policy_loss": pg, "train/value_loss": vl, "train/grad_norm": gn})
            # over the samples of every minibatch of this update: clipped where the clamp bit
            r = mb_ratio[0] if len(mb_ratio) == 1 else torch.cat(mb_ratio)
            ent = mb_entropy[0] if len(mb_entropy) == 1 else torch.cat(mb_entropy)
            tel.store(
                **{
                    "train/clip_frac": ((r < 1 - clip) | (r > 1 + clip)).float().mean(),
                    "train/entropy": ent.mean(),
                }
            )
            # on pixels this pass is a CNN forward over the whole rollout (a sizable part of an
            # Atari iteration): every k-th sample, ~KL_SAMPLES of them, estimates it
            kl = slice(None, None, max(1, n // KL_SAMPLES)) if ro.images else slice(None)
            out = ac.policy(b.obs[kl])
            logp_new, entropy = ac.logp_entropy(out, b.act[kl])
            logratio = logp_new - b.logp[kl]
            tel.store_max(**{"train/approx_kl": ((logratio.exp() - 1) - logratio).mean()})
            if row:  # tensors: telemetry converts them all at once, with the row
                tel.log(
                    **{
                        "train/update_ratio": (flat.data - theta0).norm() / theta0.norm(),
                        "train/lr": lr,
                        "train/clip_range": clip,
                        "train/epochs": epochs_done,
                    }
                )
                if ac.discrete:
                    tel.log(**{"train/entropy_norm": entropy.mean() / max_entropy})
                else:
                    tel.log(**{"train/policy_std": ac.std(out).mean()})

    learner = onpolicy.Learner(
        ac=ac, update=update, state={"model": ac, "optimizer": flat.checkpointed(opt)}
    )
    onpolicy.train(cfg, run, ro, learner)


# the trained agent in a checkpoint written by `train`
load = load_actor_critic
