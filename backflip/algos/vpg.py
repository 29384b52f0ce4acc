"""Vanilla Policy Gradient: REINFORCE with a learned value baseline and GAE (Spinning Up's VPG).

Each iteration collects `num_envs * num_steps` steps with the current policy, then

1. computes GAE advantages A_t and value targets R_t = A_t + V(s_t) (Schulman et al. 2016);
2. takes ONE gradient step on the policy, L_π = -mean(Â_t log π(a_t|s_t)) − ent_coef · H,
   with Â the advantages (normalized over the batch with `norm_adv`; the unbiased on-policy
   gradient: a second step would be off-policy, which is what PPO's clipping is for);
3. fits the value function with `vf_iters` Adam steps on ½ (V(s_t) − R_t)² over minibatches.

Policy and value have separate optimizers (the policy's also trains the CNN trunk on images).
Episode ends follow PPO's rule (see `algos/ppo.py`): `values[t + 1]` is the bootstrap, zeroed
on termination only; the autoreset step is dropped from both losses.

Metrics rows: one every `log_every` env steps (a run option, default 1,000) and at least one per
rollout that crosses it: losses and gradient norms are means over the updates since the last
row; the other diagnostics describe the rollout that closes the row.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from backflip.algos.common import (
    Agent,
    EpisodeTracker,
    actor_critic_agent,
    build_actor_critic,
    check_obs,
    gae,
    load_actor_critic,
    log_obs_stats,
    log_policy_health,
    log_rollout_health,
    obs_dtype,
)
from backflip.algos.settings import rollouts
from backflip.algos.settings.vpg import Config
from backflip.envs import restore_envs, snapshot_envs
from backflip.nets import params_vector
from backflip.normalize import ObsNormalizer, RewardScaler
from backflip.seedrun import SeedRun


def load(checkpoint: dict, obs_space, act_space, device="cpu") -> Agent:
    """The trained agent stored in a checkpoint written by `train`."""
    return load_actor_critic(checkpoint, obs_space, act_space, device)


def train(cfg: Config, run: SeedRun) -> None:
    tel, device = run.tel, run.device
    diag = tel.enabled
    envs = run.make_vec(cfg.num_envs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    N, T = cfg.num_envs, cfg.num_steps
    ac = build_actor_critic(cfg, obs_space, act_space)
    ac.to(device)
    v_params = list(ac.v.parameters())
    pi_params = [p for p in ac.parameters() if all(p is not q for q in v_params)]
    fused = device.type == "cpu"
    pi_opt = torch.optim.Adam(pi_params, lr=cfg.pi_lr, eps=1e-5, fused=fused)
    v_opt = torch.optim.Adam(v_params, lr=cfg.vf_lr, eps=1e-5, fused=fused)
    images = check_obs(obs_space, cfg.norm_obs, "vpg")
    obs_norm = ObsNormalizer(obs_space.shape) if cfg.norm_obs else None
    rew_scaler = RewardScaler(N, cfg.gamma) if cfg.scale_reward else None
    max_entropy = math.log(act_space.n) if ac.discrete else None
    agent = actor_critic_agent(ac, obs_norm, act_space, device)  # greedy, for evaluation

    def to_env_action(a: np.ndarray) -> np.ndarray:
        return a if ac.discrete else np.clip(a, act_space.low, act_space.high)

    def state() -> dict:  # everything needed to continue training (backflip resume)
        return {
            "model": ac.state_dict(),
            "pi_optimizer": pi_opt.state_dict(),
            "v_optimizer": v_opt.state_dict(),
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
        pi_opt.load_state_dict(run.restored["pi_optimizer"])
        v_opt.load_state_dict(run.restored["v_optimizer"])
        if obs_norm:
            obs_norm.load_state_dict(run.restored["obs_norm"])
        if rew_scaler:
            rew_scaler.load_state_dict(run.restored["reward_scaler"])
        it, step = run.restored["iteration"], run.start_step
        run.restore_rng()  # last: building the networks above drew random numbers

    # Rollout storage. `valid[t]` is False on the autoreset step that follows an episode end.
    obs_buf = torch.zeros((T, N, *obs_space.shape), dtype=obs_dtype(obs_space))
    act_buf = torch.zeros((T, N, *act_space.shape), dtype=torch.long if ac.discrete else None)
    val_buf, rew_buf = torch.zeros((T + 1, N)), torch.zeros((T, N))
    term_buf, done_buf, valid_buf = (torch.zeros((T, N), dtype=torch.bool) for _ in range(3))
    raw_obs = np.zeros((T, N, *obs_space.shape), np.float32) if diag and not images else None
    raw_rew = np.zeros((T, N))

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
        frac = 1.0 - (it - 1) / iterations if cfg.anneal_lr else 1.0
        pi_opt.param_groups[0]["lr"], v_opt.param_groups[0]["lr"] = (
            cfg.pi_lr * frac,
            cfg.vf_lr * frac,
        )

        # -- rollout ------------------------------------------------------------------------
        with tel.timer("rollout"), torch.inference_mode():
            for t in range(T):
                if ac.sde and t % (cfg.sde_sample_freq or T) == 0:
                    ac.reset_noise(N)
                valid = ~prev_done
                if raw_obs is not None:
                    raw_obs[t] = obs
                obs_buf[t] = torch.as_tensor(obs_norm(obs) if obs_norm else obs)
                out, val_buf[t] = ac(obs_buf[t].to(device))
                act_buf[t] = ac.sample(out)[0]
                obs, reward, term, trunc, _ = envs.step(to_env_action(act_buf[t].numpy()))
                done = term | trunc
                raw_rew[t] = reward
                rew_buf[t] = torch.as_tensor(
                    rew_scaler(reward, done, valid) if rew_scaler else reward
                )
                term_buf[t], done_buf[t] = torch.as_tensor(term), torch.as_tensor(done)
                valid_buf[t] = torch.as_tensor(valid)
                # episode bookkeeping on raw rewards (the reset step belongs to no episode)
                episodes.update(step + (t + 1) * N, raw_rew[t], done, valid, tel)
                prev_done = done
            step += N * T
            o = torch.as_tensor(obs_norm(obs, update=False) if obs_norm else obs, device=device)
            val_buf[T] = ac.v(ac.trunk(o)).squeeze(-1)
        adv, ret = gae(
            rew_buf, val_buf[:-1], val_buf[1:], term_buf, done_buf, cfg.gamma, cfg.gae_lambda
        )

        # -- flatten the valid transitions --------------------------------------------------
        keep = valid_buf.reshape(-1).nonzero().squeeze(-1)
        b_obs = obs_buf.reshape(T * N, *obs_space.shape)[keep].to(device)
        b_act = act_buf.reshape(T * N, *act_space.shape)[keep].to(device)
        b_adv, b_ret, b_val = (x.reshape(-1)[keep].to(device) for x in (adv, ret, val_buf[:-1]))
        n = len(keep)

        evaluate_now = run.eval_due(step)
        row = run.log_due(step) or evaluate_now or it == iterations

        # -- one policy step, then fit the value function ------------------------------------
        theta0 = None
        if row and diag:
            theta0 = params_vector(ac.parameters()).detach().clone()
        with tel.timer("update"):
            out = ac.policy(b_obs)
            logp, entropy = ac.logp_entropy(out, b_act)
            a = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8) if cfg.norm_adv and n > 1 else b_adv
            pg_loss = -(a * logp).mean() - cfg.ent_coef * entropy.mean()
            pi_opt.zero_grad(set_to_none=True)
            pg_loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(pi_params, cfg.max_grad_norm or math.inf)
            pi_opt.step()

            features = ac.trunk(b_obs).detach()  # the value step does not train the trunk
            for _ in range(cfg.vf_iters):
                mb = torch.randperm(n, device=device)[: cfg.vf_minibatch]
                v_loss = 0.5 * ((ac.v(features[mb]).squeeze(-1) - b_ret[mb]) ** 2).mean()
                v_opt.zero_grad(set_to_none=True)
                v_loss.backward()
                if cfg.max_grad_norm:
                    nn.utils.clip_grad_norm_(v_params, cfg.max_grad_norm)
                v_opt.step()
                tel.store(**{"train/value_loss": v_loss.detach()})
            tel.store(
                **{
                    "train/policy_loss": pg_loss.detach(),
                    "train/entropy": entropy.detach().mean(),
                    "train/grad_norm": grad_norm,
                }
            )

        # -- diagnostics, once per metrics row ----------------------------------------------
        if row and diag:
            log_policy_health(tel, ac, b_obs, b_act, logp.detach(), theta0, max_entropy)
            log_rollout_health(tel, b_val, b_ret, b_adv)
            tel.log(**{"train/lr": cfg.pi_lr * frac, "train/vf_lr": cfg.vf_lr * frac})
            valid_np = valid_buf.numpy()
            if raw_obs is not None:
                log_obs_stats(tel, raw_obs[valid_np])
            tel.log_stats("env/reward", raw_rew[valid_np])
            if rew_scaler:
                tel.log(**{"env/reward_scale": rew_scaler.scale})
            if not ac.discrete:
                outside = (b_act < torch.as_tensor(act_space.low)) | (
                    b_act > torch.as_tensor(act_space.high)
                )
                tel.log(**{"env/action_clip_frac": float(outside.float().mean())})

        if evaluate_now:
            run.evaluate(step, agent.act)
        if row:
            run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
