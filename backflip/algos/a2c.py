"""Advantage Actor-Critic (Mnih et al. 2016), synchronous: A2C.

`num_envs` env copies step in lockstep for `num_steps` steps; the short rollout gives advantages
A_t (GAE; with gae_lambda = 1 the n-step return minus V(s_t), as in the paper), and one gradient
step on

    L = -mean(A_t log π(a_t|s_t)) + vf_coef · mean(½ (V(s_t) − R_t)²) − ent_coef · mean(H[π(·|s_t)])

with R_t = A_t + V(s_t). Then the next rollout continues from where this one stopped.

Episode ends follow PPO's rule (see `algos/ppo.py`): with NEXT_STEP autoreset the observation fed
to the policy on the step after an episode end is that episode's final observation, so
`values[t + 1]` is the bootstrap, zeroed on termination only; the reset step is dropped from the
loss.

Rollouts are tiny (8 × 5 = 40 steps with SB3's settings), so diagnostics are computed only on the
iteration that closes a metrics row, every `log_every` env steps (a run option, as for every
algorithm; A2C's default is `ROW_EVERY`): rollout statistics over all iterations since the last
row, and KL, update size and entropy of that row's last update.
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
    gae,
    load_actor_critic,
    log_obs_stats,
    log_policy_health,
    log_rollout_health,
)
from backflip.algos.settings import rollouts
from backflip.algos.settings.a2c import Config
from backflip.envs import restore_envs, snapshot_envs
from backflip.nets import FlatParams, params_vector
from backflip.normalize import ObsNormalizer, RewardScaler
from backflip.seedrun import SeedRun

# env steps between metrics rows when `log_every` is 0 (its rollouts are tiny: a row every
# rollout would cost more than the update)
ROW_EVERY = 2000


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
    params = list(ac.parameters())
    flat = FlatParams(params)  # one buffer: zeroing, clipping and the optimizer are one kernel each
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam([flat.param], lr=cfg.lr, eps=cfg.opt_eps, fused=device.type == "cpu")
    else:
        opt = torch.optim.RMSprop([flat.param], lr=cfg.lr, alpha=0.99, eps=cfg.opt_eps)
    images = check_obs(obs_space, cfg.norm_obs, "a2c")
    obs_norm = ObsNormalizer(obs_space.shape) if cfg.norm_obs else None
    rew_scaler = RewardScaler(N, cfg.gamma) if cfg.scale_reward else None
    max_entropy = math.log(act_space.n) if ac.discrete else None
    agent = actor_critic_agent(ac, obs_norm, act_space, device)  # greedy, for evaluation

    def to_env_action(a: np.ndarray) -> np.ndarray:
        return a if ac.discrete else np.clip(a, act_space.low, act_space.high)

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

    # Rollout storage as numpy (cheap per-step writes), one conversion per rollout.
    # `valid[t]` is False on the autoreset step that follows an episode end.
    obs_buf = np.zeros((T, N, *obs_space.shape), obs_space.dtype if images else np.float32)
    act_buf = np.zeros((T, N, *act_space.shape), np.int64 if ac.discrete else np.float32)
    val_buf = np.zeros((T + 1, N), np.float32)  # val_buf[T]: V of the observation after the rollout
    rew_buf, raw_rew = np.zeros((T, N), np.float32), np.zeros((T, N))
    raw_obs = np.zeros((T, N, *obs_space.shape), np.float32) if diag and not images else None
    term_buf, done_buf, valid_buf = (np.zeros((T, N), bool) for _ in range(3))
    window: dict[str, list] = {}  # rollout data since the last metrics row (diagnostics)

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
        lr = cfg.lr * (1.0 - (it - 1) / iterations) if cfg.anneal_lr else cfg.lr
        for g in opt.param_groups:
            g["lr"] = lr

        # -- rollout ------------------------------------------------------------------------
        with tel.timer("rollout"), torch.inference_mode():
            for t in range(T):
                if ac.sde and t % (cfg.sde_sample_freq or T) == 0:
                    ac.reset_noise(N)
                valid = ~prev_done
                if raw_obs is not None:
                    raw_obs[t] = obs
                obs_buf[t] = obs_norm(obs) if obs_norm else obs
                out, value = ac(torch.from_numpy(obs_buf[t]).to(device))
                act_buf[t], val_buf[t] = ac.sample(out)[0].cpu().numpy(), value.cpu().numpy()
                obs, reward, term, trunc, _ = envs.step(to_env_action(act_buf[t]))
                done = term | trunc
                raw_rew[t] = reward
                rew_buf[t] = rew_scaler(reward, done, valid) if rew_scaler else reward
                term_buf[t], done_buf[t], valid_buf[t] = term, done, valid
                # episode bookkeeping on raw rewards (the reset step belongs to no episode)
                episodes.update(step + (t + 1) * N, raw_rew[t], done, valid, tel)
                prev_done = done
            step += N * T
            o = torch.as_tensor(obs_norm(obs, update=False) if obs_norm else obs, device=device)
            val_buf[T] = ac.v(ac.trunk(o)).squeeze(-1).cpu().numpy()
        # (outside inference mode: the loss below must be able to save these for backward)
        values = torch.from_numpy(val_buf)
        adv, ret = gae(
            torch.from_numpy(rew_buf),
            values[:-1],
            values[1:],
            torch.from_numpy(term_buf),
            torch.from_numpy(done_buf),
            cfg.gamma,
            cfg.gae_lambda,
        )

        # -- one gradient step on the valid transitions --------------------------------------
        v = valid_buf.reshape(-1)
        keep = slice(None) if v.all() else torch.from_numpy(v).nonzero().squeeze(-1)
        b_obs = torch.from_numpy(obs_buf.reshape(T * N, *obs_space.shape))[keep].to(device)
        b_act = torch.from_numpy(act_buf.reshape(T * N, *act_space.shape))[keep].to(device)
        b_adv, b_ret = (x.reshape(-1)[keep].to(device) for x in (adv, ret))
        evaluate_now = run.eval_due(step)
        row = run.log_due(step, ROW_EVERY) or it == iterations or evaluate_now
        theta0 = params_vector(params).detach().clone() if row and diag else None
        with tel.timer("update"):
            out, value = ac(b_obs)
            logp, entropy = ac.logp_entropy(out, b_act)
            a = b_adv
            if cfg.norm_adv and len(a) > 1:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg_loss = -(a * logp).mean()
            v_loss = 0.5 * ((value - b_ret) ** 2).mean()
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

        # -- diagnostics, once per metrics row ----------------------------------------------
        if diag:
            for name, x in (
                ("value", val_buf[:-1].reshape(-1)[v]),
                ("ret", b_ret.cpu().numpy()),
                ("adv", b_adv.cpu().numpy()),
                ("rew", raw_rew.reshape(-1)[v]),
                ("obs", None if raw_obs is None else raw_obs.reshape(T * N, -1)[v]),
                ("act", None if ac.discrete else act_buf.reshape(T * N, -1)[v]),
            ):
                if x is not None:
                    window.setdefault(name, []).append(x)
        if row and diag:
            w = {k: np.concatenate(x) for k, x in window.items()}
            window.clear()
            log_policy_health(tel, ac, b_obs, b_act, logp.detach(), theta0, max_entropy)
            log_rollout_health(
                tel, torch.from_numpy(w["value"]), *map(torch.from_numpy, (w["ret"], w["adv"]))
            )
            tel.log(**{"train/lr": lr})
            if "obs" in w:
                log_obs_stats(tel, w["obs"])
            tel.log_stats("env/reward", w["rew"])
            if rew_scaler:
                tel.log(**{"env/reward_scale": rew_scaler.scale})
            if not ac.discrete:
                outside = (w["act"] < act_space.low) | (w["act"] > act_space.high)
                tel.log(**{"env/action_clip_frac": float(outside.mean())})
        if evaluate_now:
            run.evaluate(step, agent.act)
        if row:
            run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    envs.close()
