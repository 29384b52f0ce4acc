"""The rollout loop of the on-policy algorithms: PPO, A2C and VPG.

Each algorithm file keeps its networks' optimizers and its losses, and hands its update to
this loop, which is the same for all three. What they accept is torch-free, in
`settings/<algo>.py`: each `Config` extends `settings/onpolicy.py`'s `Settings` (the network,
the normalization and the entropy bonus, which the three share), whose `rollouts` is also the
loop's count of iterations and the budget every run states before it trains.

    ro = Rollouts(cfg, run)         the training envs (`run.make_vec(num_envs)`), their spaces,
                                    the observation normalizer and reward scaler, the rollout
                                    storage and the episodes in progress
    ac = build_actor_critic(cfg, ro.obs_space, ro.act_space) ... optimizers, update ...
    train(cfg, run, ro, Learner(ac, update, state))

and `train` runs `steps // (num_envs * num_steps)` iterations (at least one), until they are
done or the seed is asked to stop:

    rollout     `num_steps` steps of the `num_envs` copies with the current policy, in inference
                mode (gSDE's exploration noise drawn afresh every `sde_sample_freq` steps, or once
                per rollout); each finished episode is logged with its raw return
    advantages  GAE (`common.gae`) over the rollout, bootstrapped from V of the observation that
                follows it
    batch       the valid transitions, flattened time-major onto the run's device (`Batch`)
    update      `learner.update(batch, frac, row)`: `frac` is the share of the iterations still
                to run, this one included (1 on the first: an annealed rate is `lr * frac`),
                `row` says whether this iteration closes a metrics row
    row         every `log_every` env steps (on the iteration that crosses a multiple), at
                evaluations and on the last iteration: the value fit and the scale of values,
                advantages and targets (`common.log_rollout_health`), the raw observations',
                rewards' and actions' statistics (`Rollouts.log_row`), then the evaluation,
                the row and a checkpoint when due

Storage: torch for what the update reads (observations as the policy saw them — normalized, or
uint8 images that the CNN scales —, actions, log-probabilities, values), NumPy for what the env
returns (raw and scaled rewards, terminated, done, valid), turned into tensors once per rollout
without a copy.

Episode ends (Gymnasium NEXT_STEP autoreset): on the step after `terminated or truncated` the
env returns the reset observation and ignores the action. So the observation fed to the policy
at that step *is* the episode's final observation, and its value V(s_final) is computed there
for free. A step's bootstrap value is therefore always `values[t + 1]`, multiplied by
`1 - terminated[t]`: truncation (a time limit) bootstraps from V(s_final), termination from 0.
The reset step itself is not a transition: `valid` is False there, and it is left out of the
batch, of the episodes and of the row's statistics.

Resume: a checkpoint holds the learner's `state` (networks, optimizers), the observation
normalizer and the reward scaler, the iteration, the envs mid-episode (`snapshot_envs`), the
current observation, which copies have just ended an episode and the running episodes' returns
and lengths; the global RNG states go back last (`run.restore_rng`), so a resumed seed continues
exactly. Envs that cannot be pickled restart from a reset seeded with `env_seed + step`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from backflip.algos.common import (
    EpisodeTracker,
    actor_critic_agent,
    check_obs,
    gae,
    log_obs_stats,
    log_rollout_health,
    obs_dtype,
)
from backflip.algos.settings.onpolicy import rollouts
from backflip.envs import restore_envs, snapshot_envs
from backflip.nets import ActorCritic
from backflip.normalize import ObsNormalizer, RewardScaler
from backflip.seedrun import SeedRun


@dataclass
class Batch:
    """One rollout's valid transitions, flattened time-major (step t of every env copy, then
    step t + 1), on the run's device."""

    obs: torch.Tensor
    """observations as the policy saw them (normalized, or uint8 images)"""
    act: torch.Tensor
    """the actions taken (indices, or the sampled Gaussian actions before clipping to the Box)"""
    logp: torch.Tensor
    """log π_old(a|s) of the policy that acted"""
    val: torch.Tensor
    """V(s) when the action was taken"""
    adv: torch.Tensor
    """GAE advantages (not normalized)"""
    ret: torch.Tensor
    """value targets, adv + val"""

    def __len__(self) -> int:
        return len(self.adv)


@dataclass
class Learner:
    """An on-policy algorithm's own part of the loop."""

    ac: ActorCritic
    """the policy and value networks that act in the rollouts and that evaluations use (greedy)"""
    update: Callable[[Batch, float, bool], None]
    """(batch, frac, row): learn from one rollout; `frac` is the share of the iterations still to
    run, this one included, `row` whether this iteration closes a metrics row (log the
    algorithm's own diagnostics then)"""
    state: dict[str, Any]
    """everything learned, by checkpoint key: the networks (`model`, which `load` reads) and the
    optimizers; each has `state_dict` and `load_state_dict`"""
    log_every: int = 1000
    """env steps between metrics rows when the run's `log_every` is 0"""
    window: bool = False
    """a row's rollout statistics cover every rollout since the last row (tiny rollouts),
    not only the one that closes it"""


class Rollouts:
    """The env side of an on-policy seed: `num_envs` env copies, their spaces, the observation
    normalizer and the reward scaler (with `norm_obs`, `scale_reward`), the storage of one
    rollout of `num_steps` steps and the episodes in progress. Made first: the networks' sizes
    come from the spaces."""

    def __init__(self, cfg, run: SeedRun):
        self.tel, self.device = run.tel, run.device
        self.envs = run.make_vec(cfg.num_envs)
        self.obs_space = self.envs.single_observation_space
        self.act_space = self.envs.single_action_space
        self.discrete = isinstance(self.act_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
        self.images = check_obs(self.obs_space, cfg.norm_obs, run.cfg.algo)
        N, T = cfg.num_envs, cfg.num_steps
        self.num_envs, self.num_steps = N, T
        self.sde_sample_freq = cfg.sde_sample_freq
        self.obs_norm = ObsNormalizer(self.obs_space.shape) if cfg.norm_obs else None
        self.rew_scaler = RewardScaler(N, cfg.gamma) if cfg.scale_reward else None

        # what the update reads (images stay uint8 until the CNN scales them: 4x less memory)
        shape, act_shape = self.obs_space.shape, self.act_space.shape
        self.obs = torch.zeros((T, N, *shape), dtype=obs_dtype(self.obs_space))
        self.obs_np = self.obs.numpy()  # the same memory: NumPy's writes cost less per step
        self.act = torch.zeros(
            (T, N, *act_shape), dtype=torch.long if self.discrete else torch.float32
        )
        self.logp = torch.zeros((T, N))
        self.val = torch.zeros((T + 1, N))  # val[T]: V of the observation after the rollout
        # NumPy views of the same memory: a step's writes through them cost less than torch's
        # indexing (a rollout of A2C's is 5 steps: the per-step overhead is a share of its time)
        self.act_np, self.logp_np, self.val_np = (
            x.numpy() for x in (self.act, self.logp, self.val)
        )
        # what the envs return; `valid[t]` is False on the autoreset step after an episode end
        self.rew = np.zeros((T, N), np.float32)  # scaled (with a reward scaler)
        self.raw_rew = np.zeros((T, N), np.float64)
        self.term, self.done, self.valid = (np.zeros((T, N), bool) for _ in range(3))
        # raw vector observations, for the row's statistics
        self.raw_obs = None
        if run.tel.enabled and not self.images:
            self.raw_obs = np.zeros((T, N, *shape), np.float32)
        self.adv = self.ret = None
        self.whole = False  # the last rollout had no autoreset step (`batch`)
        self.episodes = EpisodeTracker(N)
        self.next_obs, self.prev_done = None, np.zeros(N, bool)
        self._since_row: list[tuple] = []  # statistics of the rollouts since the last row

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """A sampled action -> what the envs are given (Box actions clipped to the bounds)."""
        return action if self.discrete else np.clip(action, self.act_space.low, self.act_space.high)

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "obs_norm": self.obs_norm.state_dict() if self.obs_norm else None,
            "reward_scaler": self.rew_scaler.state_dict() if self.rew_scaler else None,
            # the envs mid-episode and what the loop carries between rollouts: an exact resume
            "envs": snapshot_envs(self.envs),
            "loop": {
                "obs": self.next_obs,
                "prev_done": self.prev_done,
                "ep_ret": self.episodes.ret,
                "ep_len": self.episodes.len,
            },
        }

    def load_state_dict(self, saved: dict) -> None:
        """The normalizer's and the scaler's statistics; the envs come back in `start`."""
        if self.obs_norm:
            self.obs_norm.load_state_dict(saved["obs_norm"])
        if self.rew_scaler:
            self.rew_scaler.load_state_dict(saved["reward_scaler"])

    def start(self, saved: dict | None, reset_seed: int) -> None:
        """Continue the episodes in progress in a checkpoint's `saved` state, or (a fresh start,
        or a resume whose envs could not be saved) reset the envs with `reset_seed`."""
        if saved and saved.get("envs"):
            self.envs.close()
            self.envs = restore_envs(saved["envs"])
            loop = saved["loop"]
            self.next_obs, self.prev_done = loop["obs"], loop["prev_done"]
            self.episodes.ret, self.episodes.len = loop["ep_ret"], loop["ep_len"]
        else:
            self.next_obs, _ = self.envs.reset(seed=reset_seed)

    # -- one rollout -----------------------------------------------------------------------------

    def collect(self, ac: ActorCritic, step: int, gamma: float, lam: float, raw: bool) -> None:
        """`num_steps` steps of every env copy from env step `step` with `ac`'s policy, then the
        rollout's GAE advantages. Call it in inference mode. `raw`: keep the raw observations
        for the row's statistics."""
        N, T, tel, device = self.num_envs, self.num_steps, self.tel, self.device
        raw = raw and self.raw_obs is not None
        obs, prev_done = self.next_obs, self.prev_done
        for t in range(T):
            if ac.sde and t % (self.sde_sample_freq or T) == 0:
                ac.reset_noise(N)
            self.valid[t] = ~prev_done
            if raw:
                self.raw_obs[t] = obs
            self.obs_np[t] = self.obs_norm(obs) if self.obs_norm else obs
            out, value = ac(self.obs[t].to(device))
            action, logp = ac.sample(out)
            self.val_np[t], self.logp_np[t] = value.cpu().numpy(), logp.cpu().numpy()
            self.act_np[t] = action = action.cpu().numpy()
            obs, reward, term, trunc, _ = self.envs.step(self.env_action(action))
            prev_done = self.done[t] = term | trunc
            self.term[t], self.raw_rew[t] = term, reward
            if self.rew_scaler:
                self.rew[t] = self.rew_scaler(self.raw_rew[t], prev_done, self.valid[t])
            # episodes on raw rewards (the reset step belongs to none)
            self.episodes.update(step + (t + 1) * N, self.raw_rew[t], prev_done, self.valid[t], tel)
        self.next_obs, self.prev_done = obs, prev_done

        o = self.obs_norm(obs, update=False) if self.obs_norm else obs
        self.val[T] = ac.v(ac.trunk(torch.as_tensor(o, device=device))).squeeze(-1)
        rew = torch.as_tensor(self.rew if self.rew_scaler else self.raw_rew, dtype=torch.float32)
        term, done = torch.as_tensor(self.term), torch.as_tensor(self.done)
        self.adv, self.ret = gae(rew, self.val[:-1], self.val[1:], term, done, gamma, lam)

    def batch(self) -> Batch:
        """The last rollout's valid transitions (call it outside inference mode: the losses save
        these tensors for backward)."""
        n = self.num_steps * self.num_envs
        # no episode ended in the rollout: every transition, without a gather (on tiny rollouts
        # the gathers are a sizable part of an iteration); the batch then views the storage
        self.whole = bool(self.valid.all())
        keep = slice(None)
        if not self.whole:
            keep = torch.as_tensor(self.valid).reshape(-1).nonzero().squeeze(-1)
        obs = self.obs.reshape(n, *self.obs_space.shape)[keep].to(self.device)
        act = self.act.reshape(n, *self.act_space.shape)[keep].to(self.device)
        logp, val, adv, ret = (
            x.reshape(-1)[keep].to(self.device)
            for x in (self.logp, self.val[:-1], self.adv, self.ret)
        )
        if self.whole:  # GAE ran in inference mode: the losses need tensors autograd may save
            adv, ret = adv.clone(), ret.clone()
        return Batch(obs=obs, act=act, logp=logp, val=val, adv=adv, ret=ret)

    # -- the row's statistics --------------------------------------------------------------------

    def add_to_row(self, b: Batch) -> None:
        """Keep the last rollout's statistics (`b` is its batch) for the next row."""
        v = self.valid
        val, act = b.val, None if self.discrete else b.act
        if self.whole:  # views of the storage, which the next rollout overwrites
            val, act = val.clone(), None if act is None else act.clone()
        self._since_row.append(
            {
                "val": val,
                "ret": b.ret,
                "adv": b.adv,
                "rew": self.raw_rew[v],
                "obs": None if self.raw_obs is None else self.raw_obs[v],
                "act": act,
            }
        )

    def log_row(self) -> None:
        """Log the statistics of the rollouts kept since the last row: the value fit and the
        scale of values, advantages and targets; the raw observations' scale (vectors), the raw
        rewards' statistics, the reward scaler's scale and the share of Box actions outside the
        env's bounds (which the env is given clipped)."""
        kept, self._since_row, tel = self._since_row, [], self.tel

        def joined(key: str):
            parts = [k[key] for k in kept]
            if len(parts) == 1 or parts[0] is None:
                return parts[0]
            return torch.cat(parts) if torch.is_tensor(parts[0]) else np.concatenate(parts)

        log_rollout_health(tel, joined("val"), joined("ret"), joined("adv"))
        if self.raw_obs is not None:
            log_obs_stats(tel, joined("obs"))
        tel.log_stats("env/reward", joined("rew"))
        if self.rew_scaler:
            tel.log(**{"env/reward_scale": self.rew_scaler.scale})
        if not self.discrete:
            act = joined("act")
            low, high = (
                torch.as_tensor(x, device=act.device)
                for x in (self.act_space.low, self.act_space.high)
            )
            tel.log(**{"env/action_clip_frac": ((act < low) | (act > high)).float().mean()})


def train(cfg, run: SeedRun, ro: Rollouts, learner: Learner) -> None:
    """Run the loop until its iterations are done or the seed is asked to stop, then the final
    evaluation and checkpoint (the module docstring says what happens in each iteration).

    `cfg` is the algorithm's `Config`; the loop reads `num_envs`, `num_steps`, `gamma` and
    `gae_lambda` from it.
    """
    tel, ac = run.tel, learner.ac
    diag = tel.enabled  # the row's statistics cost a little; skipped when logging is off
    per_rollout = cfg.num_envs * cfg.num_steps
    agent = actor_critic_agent(ac, ro.obs_norm, ro.act_space, run.device)  # greedy, to evaluate
    it, step = 0, 0

    def state() -> dict:  # everything needed to continue training exactly (backflip resume)
        saved = {key: obj.state_dict() for key, obj in learner.state.items()}
        return {**saved, **ro.state_dict(), "iteration": it}

    if run.restored:  # set by `backflip resume`
        for key, obj in learner.state.items():
            obj.load_state_dict(run.restored[key])
        ro.load_state_dict(run.restored)
        it, step = run.restored["iteration"], run.start_step
        run.restore_rng()  # last: building the networks drew random numbers
    ro.start(run.restored, run.env_seed + step)

    iterations = rollouts(run.steps, cfg.num_envs, cfg.num_steps)  # the run states it (`budget`)
    while it < iterations and not run.stopping:
        it += 1
        frac = 1.0 - (it - 1) / iterations
        # does this iteration close a metrics row? (asked before the rollout, which keeps its
        # raw observations for the row's statistics)
        evaluate_now = run.eval_due(step + per_rollout)
        row = run.log_due(step + per_rollout, learner.log_every) or evaluate_now
        row = row or it == iterations
        keep = diag and (row or learner.window)

        with tel.timer("rollout"), torch.inference_mode():
            ro.collect(ac, step, cfg.gamma, cfg.gae_lambda, raw=keep)
        step += per_rollout
        batch = ro.batch()
        learner.update(batch, frac, row)
        if keep:
            ro.add_to_row(batch)
        if diag and row:
            ro.log_row()

        if evaluate_now:
            run.evaluate(step, agent.act)
        if row:
            run.log(step)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, state())

    run.finish(step, agent.act, state())
    ro.envs.close()
