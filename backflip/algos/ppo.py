"""Proximal Policy Optimization (Schulman et al. 2017), clipped surrogate with GAE.

One file, top to bottom: networks, then `train`: collect a rollout from `num_envs` env copies,
compute GAE advantages, run `epochs` passes of minibatch updates, log, repeat.

The details that make PPO work (Engstrom et al. 2020; Huang et al. 2022, "The 37 implementation
details of PPO") are all here and each can be switched off for ablations:
orthogonal init with a 0.01-gain policy head, Adam eps 1e-5, learning-rate and clip annealing,
advantage normalization per minibatch, optional value clipping, global gradient clipping,
observation normalization and reward scaling (scale, never shift) with running statistics.

Episode ends (Gymnasium NEXT_STEP autoreset): on the step after `terminated or truncated` the
env returns the reset observation and ignores the action. So the observation fed to the policy at
that step *is* the episode's final observation, and its value V(s_final) is computed there for
free. A step's bootstrap value is therefore always `values[t + 1]`, multiplied by
`1 - terminated[t]`: truncation (a time limit) bootstraps from V(s_final), termination from 0.
The reset step itself is not a real transition and is masked out of the loss (`valid`).

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

import numpy as np
import torch

from backflip.algos.common import (
    Agent,
    EpisodeTracker,
    actor_critic_agent,
    build_actor_critic,
    check_obs,
    explained_variance,
    gae,
    load_actor_critic,
    log_obs_stats,
    obs_dtype,
)
from backflip.algos.settings import rollouts
from backflip.algos.settings.ppo import Config
from backflip.envs import restore_envs, snapshot_envs
from backflip.nets import FlatParams
from backflip.normalize import ObsNormalizer, RewardScaler
from backflip.seedrun import SeedRun

KL_SAMPLES = 256  # image observations: samples of the rollout the KL after an update is taken on


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    return load_actor_critic(checkpoint, obs_space, act_space, device)


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled  # diagnostics beyond the losses cost a little; skip them when logging is off
    envs = run.make_vec(cfg.num_envs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    N, T = cfg.num_envs, cfg.num_steps
    ac = build_actor_critic(cfg, obs_space, act_space)
    ac.to(device)
    params = list(ac.parameters())
    flat = FlatParams(params)  # one buffer: zeroing, clipping and Adam are one kernel each
    opt = torch.optim.Adam([flat.param], lr=cfg.lr, eps=cfg.adam_eps, fused=device.type == "cpu")
    images = check_obs(obs_space, cfg.norm_obs, "ppo")
    obs_norm = ObsNormalizer(obs_space.shape) if cfg.norm_obs else None
    rew_scaler = RewardScaler(N, cfg.gamma) if cfg.scale_reward else None
    if ac.discrete:
        max_entropy = math.log(act_space.n)
    else:
        low, high = act_space.low, act_space.high

    agent = actor_critic_agent(ac, obs_norm, act_space, device)  # greedy, for evaluation

    def to_env_action(a: torch.Tensor) -> np.ndarray:
        a = a.cpu().numpy()
        return a if ac.discrete else np.clip(a, low, high)

    def normalize_adv(a: torch.Tensor) -> torch.Tensor:  # per minibatch
        return (a - a.mean()) / (a.std() + 1e-8) if cfg.norm_adv and len(a) > 1 else a

    def state() -> dict:  # everything needed to continue training (backflip resume)
        return {
            "model": ac.state_dict(),
            "optimizer": opt.state_dict(),
            "obs_norm": obs_norm.state_dict() if obs_norm else None,
            "reward_scaler": rew_scaler.state_dict() if rew_scaler else None,
            "iteration": it,
            # the envs mid-episode and the loop's carried variables: an exact resume
            "envs": snapshot_envs(envs),
            "loop": {
                "obs": obs,
                "prev_done": prev_done,
                "ep_ret": episodes.ret,
                "ep_len": episodes.len,
            },
        }

    it, step = 0, 0
    if run.restored:  # resuming from a checkpoint
        ac.load_state_dict(run.restored["model"])
        opt.load_state_dict(flat.optimizer_state(run.restored["optimizer"]))
        if obs_norm:
            obs_norm.load_state_dict(run.restored["obs_norm"])
        if rew_scaler:
            rew_scaler.load_state_dict(run.restored["reward_scaler"])
        it, step = run.restored["iteration"], run.start_step
        run.restore_rng()  # last: building the networks above drew random numbers

    # Rollout storage: torch for what the update reads, numpy for what the env returns.
    # `valid[t]` is False on the autoreset step that follows an episode end.
    # (images stay uint8 until the CNN scales them: 4x less memory)
    obs_buf = torch.zeros((T, N, *obs_space.shape), dtype=obs_dtype(obs_space))
    act_buf = torch.zeros(
        (T, N, *act_space.shape), dtype=torch.long if ac.discrete else torch.float32
    )
    logp_buf, val_buf = torch.zeros((T, N)), torch.zeros((T, N))
    rew_np, raw_rew = np.zeros((T, N), np.float32), np.zeros((T, N), np.float64)
    term_np, done_np, valid_np = (np.zeros((T, N), bool) for _ in range(3))
    raw_obs = np.zeros((T, N, *obs_space.shape), np.float32) if diag and not images else None

    episodes = EpisodeTracker(N)
    if run.restored and run.restored.get("envs"):  # continue the episodes in progress
        envs.close()
        envs = restore_envs(run.restored["envs"])
        loop = run.restored["loop"]
        obs, prev_done = loop["obs"], loop["prev_done"]
        episodes.ret, episodes.len = loop["ep_ret"], loop["ep_len"]
    else:  # a fresh start (or a resume whose envs could not be saved: they restart)
        obs, _ = envs.reset(seed=run.env_seed + step)
        prev_done = np.zeros(N, bool)
    iterations = rollouts(run.steps, N, T)  # whole rollouts: the run states it (`budget`)
    while it < iterations and not run.stopping:
        it += 1
        frac = 1.0 - (it - 1) / iterations
        lr = cfg.lr * frac if cfg.anneal_lr else cfg.lr
        clip = cfg.clip * frac if cfg.anneal_clip else cfg.clip
        for g in opt.param_groups:
            g["lr"] = lr
        row_due = run.log_due(step + N * T)  # does this iteration close a metrics row?
        keep_raw = raw_obs is not None and (row_due or it == iterations)

        # -- rollout ------------------------------------------------------------------------
        with tel.timer("rollout"), torch.inference_mode():
            for t in range(T):
                if ac.sde and t % (cfg.sde_sample_freq or T) == 0:
                    ac.reset_noise(N)
                valid_np[t] = ~prev_done
                if keep_raw:
                    raw_obs[t] = obs
                obs_buf[t] = torch.as_tensor(obs_norm(obs) if obs_norm else obs)
                out, val_buf[t] = ac(obs_buf[t].to(device))
                action, logp_buf[t] = ac.sample(out)
                act_buf[t] = action
                obs, reward, term, trunc, _ = envs.step(to_env_action(action))
                prev_done = done_np[t] = term | trunc
                term_np[t], raw_rew[t] = term, reward
                if rew_scaler:
                    rew_np[t] = rew_scaler(raw_rew[t], prev_done, valid_np[t])
                episodes.update(step + (t + 1) * N, raw_rew[t], prev_done, valid_np[t], tel)
            step += N * T
            rew_buf = torch.as_tensor(rew_np if rew_scaler else raw_rew, dtype=torch.float32)
            term_buf, done_buf = torch.as_tensor(term_np), torch.as_tensor(done_np)
            valid_buf = torch.as_tensor(valid_np)

            # -- advantages (GAE) -------------------------------------------------------------
            o = obs_norm(obs, update=False) if obs_norm else obs
            _, last_value = ac(torch.as_tensor(o, device=device))
            next_val = torch.cat([val_buf[1:], last_value.cpu()[None]])
            adv, ret = gae(
                rew_buf, val_buf, next_val, term_buf, done_buf, cfg.gamma, cfg.gae_lambda
            )

        # -- flatten the valid transitions --------------------------------------------------
        keep = valid_buf.reshape(-1).nonzero().squeeze(-1)
        b_obs = obs_buf.reshape(T * N, *obs_space.shape)[keep].to(device)
        b_act = act_buf.reshape(T * N, *act_space.shape)[keep].to(device)
        b_logp, b_adv, b_ret, b_val = (
            x.reshape(-1)[keep].to(device) for x in (logp_buf, adv, ret, val_buf)
        )
        n = len(keep)
        n_mb = max(1, round(n / cfg.minibatch_size))
        whole_adv = normalize_adv(b_adv) if n_mb == 1 else None  # the same for every epoch

        evaluate_now = run.eval_due(step)
        row = row_due or evaluate_now or it == iterations

        # -- update -------------------------------------------------------------------------
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
                    out, value = ac(b_obs[mb])
                    logp, entropy = ac.logp_entropy(out, b_act[mb])
                    logratio = logp - b_logp[mb]
                    ratio = logratio.exp()
                    a = whole_adv if n_mb == 1 else normalize_adv(b_adv[mb])
                    clipped = ratio.clamp(1 - clip, 1 + clip)
                    pg_loss = -torch.min(a * ratio, a * clipped).mean()
                    if cfg.clip_vloss:
                        v_clipped = b_val[mb] + (value - b_val[mb]).clamp(-clip, clip)
                        v_loss = (
                            0.5
                            * torch.max(
                                (value - b_ret[mb]) ** 2, (v_clipped - b_ret[mb]) ** 2
                            ).mean()
                        )
                    else:
                        v_loss = 0.5 * ((value - b_ret[mb]) ** 2).mean()
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

        # -- diagnostics: KL after every update (a blow-up can last one iteration), the rest
        # once per metrics row -------------------------------------------------------------
        if diag:
            with tel.timer("diagnostics"), torch.inference_mode():  # (cost: metrics.md)
                pg, vl, gn = zip(*mb_stats, strict=True)  # per minibatch
                tel.extend(
                    **{"train/policy_loss": pg, "train/value_loss": vl, "train/grad_norm": gn}
                )
                # over the samples of every minibatch of this update: clipped where the clamp bit
                r = mb_ratio[0] if len(mb_ratio) == 1 else torch.cat(mb_ratio)
                ent = mb_entropy[0] if len(mb_entropy) == 1 else torch.cat(mb_entropy)
                tel.store(
                    **{
                        "train/clip_frac": ((r < 1 - clip) | (r > 1 + clip)).float().mean(),
                        "train/entropy": ent.mean(),
                    }
                )
                # on pixels this pass is a CNN forward over the whole rollout (a sizable part
                # of an Atari iteration): every k-th sample, ~KL_SAMPLES of them, estimates it
                kl = slice(None, None, max(1, n // KL_SAMPLES)) if images else slice(None)
                out = ac.policy(b_obs[kl])
                logp_new, entropy = ac.logp_entropy(out, b_act[kl])
                logratio = logp_new - b_logp[kl]
                tel.store_max(**{"train/approx_kl": ((logratio.exp() - 1) - logratio).mean()})
                if row:  # tensors: telemetry converts them all at once, with the row
                    tel.log(
                        **{
                            "train/explained_var": explained_variance(b_val, b_ret),
                            "train/update_ratio": (flat.data - theta0).norm() / theta0.norm(),
                            "train/lr": lr,
                            "train/clip_range": clip,
                            "train/epochs": epochs_done,
                            "rollout/value_mean": b_val.mean(),
                            "rollout/value_std": b_val.std(),
                            "rollout/adv_mean": b_adv.mean(),
                            "rollout/adv_std": b_adv.std(),
                            "rollout/return_target_mean": b_ret.mean(),
                            "rollout/return_target_absmax": b_ret.abs().max(),
                        }
                    )
                    if ac.discrete:
                        tel.log(**{"train/entropy_norm": entropy.mean() / max_entropy})
                    else:
                        tel.log(**{"train/policy_std": ac.std(out).mean()})
                    if keep_raw:
                        log_obs_stats(tel, raw_obs[valid_np])
                    tel.log_stats("env/reward", raw_rew[valid_np])
                    if rew_scaler:
                        tel.log(**{"env/reward_scale": rew_scaler.scale})
                    if not ac.discrete:
                        outside = (b_act < torch.as_tensor(low)) | (b_act > torch.as_tensor(high))
                        tel.log(**{"env/action_clip_frac": outside.float().mean()})

        if evaluate_now:
            run.evaluate(step, agent.act)
        if row:
            run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
