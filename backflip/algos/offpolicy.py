"""The one-env-step loop of the off-policy algorithms: DQN, DDPG, TD3 and SAC.

Each algorithm file keeps its networks, its losses and its `Config`, and hands its own pieces
to this loop, which is the same for all four:

    xp = Experience(cfg, run)       the training env (`run.make_vec(1)`), its spaces, the replay
                                    buffer (shown to `run.register_replay`), the exploration RNG
    ... networks, optimizers, explore(obs, step), update(step, n) ...
    train(cfg, run, xp, Learner(...))

and `train` runs, until the budget is spent or the seed is asked to stop:

    act        uniformly random before `learning_starts`, then `learner.explore(obs, step)`
    env step   the transition goes to the replay buffer; at an episode end the episode is
               logged (with the critic's Q(s0, a0) beside the discounted return observed from
               there, when the algorithm has a critic), and Gymnasium's NEXT_STEP autoreset
               spends one more `step` call on the reset, which is not a transition: it is
               neither stored nor counted
    learn      every `train_every` env steps from `learning_starts` on, `gradient_steps` calls
               of `learner.update(step, n)`, n numbering the gradient steps from 1
    row        every `log_every` env steps: the env statistics of the transitions since the
               last row, the algorithm's own values, `train/updates`, `train/replay_size`; then
               an evaluation and a checkpoint when due

Episode ends: only `terminated` cuts the bootstrap (`backflip/buffers.py`); a time-limit
truncation bootstraps from the episode's final observation, the one returned by the step that
ended it.

Resume: a checkpoint holds everything the loop carries from one env step to the next — the
learner's networks, optimizers and tensors, the replay buffer with its sampling RNG, the
exploration RNG, the gradient-step count, the envs mid-episode (`snapshot_envs`), the current
observation, the running episode's statistics, the step of the last row and whether the row's
update ratio is still to be measured — and the global RNG states go back last
(`run.restore_rng`), so a resumed seed continues exactly as if it had never stopped. Envs that
cannot be pickled (MuJoCo's re-create themselves from their constructor arguments) restart from a
reset seeded with `env_seed + step`: a valid continuation, not an identical one, which
`backflip resume` says before it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from backflip.algos.common import Agent, log_obs_stats
from backflip.buffers import ReplayBuffer
from backflip.envs import restore_envs, snapshot_envs
from backflip.nets import params_vector, to_bounds
from backflip.seedrun import SeedRun


class Experience:
    """The env side of an off-policy seed: one training env copy, its spaces, the replay buffer
    and the exploration RNG. Made first: the networks' sizes come from the spaces.

    The buffer stores image observations as uint8 and everything else as float32; actions as an
    index (Discrete) or in the actor's [-1, 1] units (Box), mapped onto the env's bounds by
    `env_action` when the env is stepped and when a learned reward judges the buffer.
    """

    def __init__(self, cfg, run: SeedRun):
        self.envs = run.make_vec(1)
        self.obs_space = self.envs.single_observation_space
        self.act_space = self.envs.single_action_space
        self.discrete = isinstance(self.act_space, gym.spaces.Discrete)
        self.act_dim = 1 if self.discrete else int(np.prod(self.act_space.shape))
        self.replay = ReplayBuffer(
            min(cfg.buffer_size, run.steps),
            self.obs_space.shape,
            () if self.discrete else (self.act_dim,),
            np.uint8 if self.obs_space.dtype == np.uint8 else np.float32,
            np.int64 if self.discrete else np.float32,
            seed=run.seed,
            device=run.device,
        )
        run.register_replay(self.replay, self.env_action)
        self.rng = np.random.default_rng(run.seed)

    def env_action(self, a: np.ndarray) -> np.ndarray:
        """Stored action(s) -> what the env is given."""
        if self.discrete:
            return np.asarray(a, np.int64)
        return to_bounds(a, self.act_space.low, self.act_space.high)

    def random_action(self) -> np.ndarray:
        """A uniformly random action, in the buffer's units."""
        if self.discrete:
            return self.rng.integers(self.act_space.n)
        return self.rng.uniform(-1.0, 1.0, self.act_dim).astype(np.float32)


class UpdateRatio:
    """`train/update_ratio`: the relative size ‖θ − θ0‖ / ‖θ0‖ of one optimizer step on `params`,
    measured on the first such step after each metrics row (it copies the parameters twice)."""

    def __init__(self, tel, params: list[torch.Tensor]):
        self.tel, self.params = tel, params
        self.due = tel.enabled  # set again by the loop at every row

    def before(self) -> torch.Tensor | None:
        """θ0 when a measurement is due, else None; call it before `opt.step()`."""
        return params_vector(self.params).detach() if self.due else None

    @torch.no_grad()
    def after(self, theta0: torch.Tensor | None) -> None:
        """Log the step's ratio (after `opt.step()`, with `before`'s result)."""
        if theta0 is None:
            return
        theta = params_vector(self.params)
        self.tel.log(**{"train/update_ratio": float((theta - theta0).norm() / theta0.norm())})
        self.due = False


@dataclass
class Learner:
    """An off-policy algorithm's own part of the loop: its maths as plain functions, and what it
    has learned, for checkpoints."""

    explore: Callable[[np.ndarray, int], np.ndarray]
    """the exploring action for a batch of one observation at env step `step`, in the buffer's
    units; called from `learning_starts` on (uniformly random actions before)"""
    update: Callable[[int, int], None]
    """one gradient step at env step `step`; the second argument numbers the gradient steps from
    1 (delayed actors and target updates count them)"""
    agent: Agent
    """the greedy policy, for evaluations and the final checkpoint"""
    state: dict[str, nn.Module | torch.optim.Optimizer | torch.Tensor]
    """everything learned, by checkpoint key: networks, target networks, optimizers, tensors (SAC's
    log α); `load` functions read the networks back from these keys"""
    update_ratio: UpdateRatio
    """the update whose size a metrics row reports (the loop re-arms it at each row)"""
    row: Callable[[int, int], dict] | None = None
    """(step, gradient steps so far) -> the algorithm's own values for the metrics row"""
    q_start: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    """Q(s0, a0) for an episode's first observation and action (batches of one): logged beside
    the discounted return observed from there (`rollout/q_overestimate`)"""


class EpisodeStats:
    """The running episode of the one-env loop: return, discounted return, length, and its first
    (observation, action) — so the critic's Q(s0, a0) can be compared with the discounted return
    that was actually observed from there."""

    def __init__(self, gamma: float):
        self.gamma = gamma
        self.reset()

    def reset(self) -> None:
        self.ret, self.disc_ret, self.length, self.discount = 0.0, 0.0, 0, 1.0
        self.first_obs = self.first_action = None

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float) -> None:
        if self.length == 0:
            self.first_obs, self.first_action = obs.copy(), np.array(action, copy=True)
        self.ret += reward
        self.disc_ret += self.discount * reward
        self.discount *= self.gamma
        self.length += 1

    def state_dict(self) -> dict:
        return dict(vars(self))

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)


def log_recent_env_stats(tel, rb: ReplayBuffer, n: int) -> None:
    """The `env/` diagnostics (raw observation scale, reward statistics) over the last `n`
    transitions in the replay buffer: what the loop saw since the last row."""
    obs, rewards = rb.recent(n)
    if len(rewards) == 0:
        return
    tel.log_stats("env/reward", rewards)
    if obs.ndim == 2:  # vector observations (image scales say little and cost much)
        log_obs_stats(tel, obs.astype(np.float64))


def box_agent(
    policy: Callable[[torch.Tensor], torch.Tensor], critic: nn.Module, act_space, device
) -> Agent:
    """DDPG's, TD3's or SAC's greedy agent: actions `policy(s)` (in [-1, 1]) mapped onto the
    env's bounds, values min_i Q_i(s, policy(s)) from `critic` (a `nets.QCritics`)."""
    low, high = act_space.low, act_space.high
    device = torch.device(device)

    @torch.inference_mode()
    def act(o: np.ndarray) -> np.ndarray:
        return to_bounds(policy(torch.as_tensor(o, device=device)).cpu().numpy(), low, high)

    @torch.inference_mode()
    def value(o: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(o, device=device)
        return critic(o, policy(o)).min(0).values.cpu().numpy()

    return Agent(act=act, value=value)


def load_networks(state: dict, **networks: nn.Module) -> None:
    """Fill networks from a checkpoint's `state` (keys as in `Learner.state`), for `load`."""
    for key, net in networks.items():
        _load(net, state[key])


def _saved(obj):
    return obj.detach().clone() if isinstance(obj, torch.Tensor) else obj.state_dict()


def _load(obj, saved) -> None:
    if isinstance(obj, torch.Tensor):
        with torch.no_grad():
            obj.copy_(saved)
    else:
        obj.load_state_dict(saved)


def train(cfg, run: SeedRun, xp: Experience, learner: Learner) -> None:
    """Run the loop until the budget is spent or the seed is asked to stop, then the final
    evaluation and checkpoint (the module docstring says what happens in each step).

    `cfg` is the algorithm's `Config`; the loop reads `learning_starts`, `train_every`,
    `gradient_steps` and `gamma` (the discounted return of an episode) from it.
    """
    tel, envs, rb, rng = run.tel, xp.envs, xp.replay, xp.rng
    diag = tel.enabled
    ep = EpisodeStats(cfg.gamma)
    step, updates, last_row, obs = 0, 0, 0, None

    def state() -> dict:  # everything needed to continue training exactly (backflip resume)
        return {
            **{key: _saved(obj) for key, obj in learner.state.items()},
            "buffer": rb.state_dict(),
            "rng": rng.bit_generator.state,
            "updates": updates,
            "envs": snapshot_envs(envs),
            "loop": {
                "obs": obs,
                "episode": ep.state_dict(),
                "last_row": last_row,
                "measure_ratio": learner.update_ratio.due,
            },
        }

    if run.restored:  # set by `backflip resume`
        saved = run.restored
        for key, obj in learner.state.items():
            _load(obj, saved[key])
        rb.load_state_dict(saved["buffer"])
        rng.bit_generator.state = saved["rng"]
        # (DQN's checkpoints from before this loop kept the count under "counters")
        updates = saved["updates"] if "updates" in saved else saved["counters"]["updates"]
        step = last_row = run.start_step
        if "loop" in saved:
            last_row = saved["loop"]["last_row"]
            learner.update_ratio.due = saved["loop"]["measure_ratio"]
        if saved.get("envs"):  # the episode in progress goes on
            envs.close()
            envs = restore_envs(saved["envs"])
            obs = saved["loop"]["obs"]
            ep.load_state_dict(saved["loop"]["episode"])
        else:
            run.warn(
                "resume: this checkpoint holds no snapshot of the envs; they restart from a "
                "reset, so this seed will not match an uninterrupted one"
            )
        run.restore_rng()  # last: building the networks drew random numbers
    if obs is None:
        obs, _ = envs.reset(seed=run.env_seed + step)

    def episode_end() -> None:
        """Log the episode, and the critic's Q(s0, a0) beside the discounted return observed."""
        tel.episode(step, ep.ret, ep.length)
        if diag and learner.q_start is not None:
            with torch.no_grad():
                s0 = torch.as_tensor(ep.first_obs, device=run.device)[None]
                a0 = torch.as_tensor(ep.first_action, device=run.device)[None]
                q0 = learner.q_start(s0, a0)
            tel.store(
                **{
                    "rollout/q_ep_start": q0,
                    "rollout/return_disc": ep.disc_ret,
                    "rollout/q_overestimate": q0 - ep.disc_ret,
                }
            )
        ep.reset()

    while step < run.steps and not run.stopping:
        # -- one env step ---------------------------------------------------------------------
        with tel.timer("rollout"):
            a = xp.random_action() if step < cfg.learning_starts else learner.explore(obs, step)
            env_action = xp.env_action(a)[None]
            next_obs, reward, term, trunc, _ = envs.step(env_action)
            rb.add(obs[0], a, reward[0], next_obs[0], term[0], trunc[0])
            ep.add(obs[0], a, float(reward[0]))
            step += 1
            obs = next_obs
            if term[0] or trunc[0]:
                episode_end()
                # NEXT_STEP autoreset: this call only resets (action ignored); not a transition
                obs, *_ = envs.step(env_action)

        # -- learn ------------------------------------------------------------------------------
        if step >= cfg.learning_starts and step % cfg.train_every == 0:
            with tel.timer("update"):
                for _ in range(cfg.gradient_steps):
                    updates += 1
                    learner.update(step, updates)

        # -- one metrics row per log interval ---------------------------------------------------
        if run.log_due(step):
            if diag:
                log_recent_env_stats(tel, rb, step - last_row)
                if learner.row is not None:
                    tel.log(**learner.row(step, updates))
                tel.log(**{"train/updates": updates, "train/replay_size": len(rb)})
                learner.update_ratio.due = True
            last_row = step
            if run.eval_due(step):
                run.evaluate(step, learner.agent.act)
            run.log(step)
            if run.checkpoint_due(step):
                run.save_checkpoint(step, state())

    run.finish(step, learner.agent.act, state())
    envs.close()
