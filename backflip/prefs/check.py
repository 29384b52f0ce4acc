"""`backflip prefs check-reward RUN`: a saved reward model judged on a policy's play.

The reward model of a preference run is trained on the clips it was asked about, and those come
from its own policy. What it never saw, it cannot know: a Pong policy that loses every point
offers no clip of a point won. This check plays a saved policy (the run's own, or `--policy`
another run's: say PPO on the true reward, which does the task) on the run's env for `steps`
agent steps, cuts each episode into consecutive segments of `prefs.segment_length` steps (as
the pipeline does), and compares the learned reward r̂ summed over each segment (as the policy
would be paid, `pipeline.policy_reward`) with the segment's true return:

- `segment_corr`: Pearson correlation of r̂ sums with true returns (the pipeline logs the same
  for its own policy as `reward_model/segment_corr`);
- the r̂ sums of the segments in three groups by their true return: by its sign where the
  reward is sparse (gained reward, neither, lost it: Pong's points), else by thirds (Pendulum's
  cost every step; equal returns stay in one group); how many, their mean true return, the mean
  and standard deviation of their r̂ sums, and the `separation` of the top and bottom groups
  from the middle one, in the middle group's standard deviations. Near 0 (or below) for a
  sparse reward's gains, the model does not reward what the task rewards.

The policy acts greedily, as in evaluation, with probability `epsilon` of a random action (a
greedy policy can repeat one rally forever), on the training env's observations and rewards
(what the teacher judged: Atari's clipped score, episodic lives).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from backflip.algos import get_algo
from backflip.config import TrainConfig
from backflip.envs import make_env
from backflip.errors import UserError
from backflip.prefs.db import preference_seeds
from backflip.prefs.pipeline import build_reward_model, policy_reward, read_reward_model
from backflip.runs.archive import load_checkpoint, load_run

# a reward is sparse where at least this share of segments return exactly 0 (grouped by sign)
SPARSE_SHARE = 0.1


def check_reward(
    run_dir: Path,
    seed: int | None = None,
    policy_dir: Path | None = None,
    policy_seed: int | None = None,
    checkpoint: str | None = None,
    steps: int = 10_000,
    epsilon: float = 0.0,
) -> dict:
    """Play the policy for `steps` steps and compare r̂ with the true reward per segment."""
    record = load_run(run_dir)
    seed = preference_seeds(record, seed)[0]
    saved, pcfg = read_reward_model(run_dir, seed)
    cfg = TrainConfig.from_dict(record["config"])
    policy_dir = policy_dir or run_dir
    policy_record = load_run(policy_dir)
    policy_seeds = policy_record["config"]["seeds"]
    policy_seed = (
        (seed if seed in policy_seeds else policy_seeds[0]) if policy_seed is None else policy_seed
    )
    path, ckpt = load_checkpoint(policy_dir, policy_seed, checkpoint)
    policy_cfg = TrainConfig.from_dict(ckpt.get("config") or policy_record["config"])
    if policy_cfg.env_id != cfg.env_id:
        raise UserError(
            f"the policy of {policy_record['id']} plays {policy_cfg.env_id}, the reward model "
            f"of {record['id']} judges {cfg.env_id}"
        )
    if policy_cfg.env != cfg.env:  # other env.* options: fine while the spaces are the same
        theirs, ours = make_env(cfg.env_id, policy_cfg.env), make_env(cfg.env_id, cfg.env)
        spaces = [(e.observation_space, e.action_space) for e in (theirs, ours)]
        theirs.close(), ours.close()
        if spaces[0] != spaces[1]:
            raise UserError(
                f"the policy of {policy_record['id']} was trained on other env.* options than "
                f"the reward model of {record['id']}, with other observations or actions: "
                f"{spaces[0][0]} and {spaces[0][1]}, not {spaces[1][0]} and {spaces[1][1]}"
            )
    env = make_env(cfg.env_id, cfg.env)
    try:
        model = build_reward_model(pcfg, env.observation_space, env.action_space, seed)
        model.load_state_dict(saved["model"])
        agent = get_algo(policy_cfg.algo).load(ckpt, env.observation_space, env.action_space)
        episodes = play(agent, env, steps, epsilon, np.random.default_rng(seed))
    finally:
        env.close()
    pred, true = [], []
    for obs, act, rew, nxt, _ended in episodes:
        paid = policy_reward(model, pcfg.reward_input, obs, act, nxt)
        n = len(rew) // pcfg.segment_length * pcfg.segment_length
        pred += list(paid[:n].reshape(-1, pcfg.segment_length).sum(1))
        true += list(rew[:n].reshape(-1, pcfg.segment_length).sum(1))
    return summarize(
        np.asarray(pred),
        np.asarray(true),
        run=record["id"],
        seed=seed,
        policy=policy_record["id"],
        policy_seed=policy_seed,
        checkpoint=str(path),
        env_id=cfg.env_id,
        segment_length=pcfg.segment_length,
        steps=steps,
        epsilon=epsilon,
        episodes=[float(e[2].sum()) for e in episodes if e[4]],
    )


@torch.inference_mode()
def play(agent, env, steps: int, epsilon: float, rng: np.random.Generator) -> list[tuple]:
    """`steps` steps of the policy: per episode (obs, actions, true rewards, next obs, ended).
    One observation at a time runs fastest on one thread (more only wait on each other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _play(agent, env, steps, epsilon, rng)
    finally:
        torch.set_num_threads(threads)


def _play(agent, env, steps: int, epsilon: float, rng: np.random.Generator) -> list[tuple]:
    episodes, buf = [], []  # buf: (obs, action, reward) of the episode under way
    obs, _ = env.reset(seed=int(rng.integers(2**31)))
    env.action_space.seed(int(rng.integers(2**31)))
    for _ in range(steps):
        if rng.random() < epsilon:
            action = env.action_space.sample()
        else:
            action = agent.act(np.asarray(obs)[None])[0]
        nxt, reward, term, trunc, _ = env.step(action)
        buf.append((obs, action, float(reward)))
        obs = nxt
        if term or trunc:
            episodes.append((buf, nxt, True))
            buf = []
            obs, _ = env.reset()
    if buf:
        episodes.append((buf, obs, False))
    out = []
    for ep, last, ended in episodes:  # next observations: the episode's, then its last one
        o, a, r = zip(*ep, strict=True)
        o = np.stack(o)
        nxt = np.concatenate([o[1:], np.asarray(last)[None]])
        out.append((o, np.stack(a), np.asarray(r), nxt, ended))
    return out


def summarize(pred: np.ndarray, true: np.ndarray, **about) -> dict:
    """Correlation, and the r̂ sums of the segments in three groups by their true return: `high`,
    `middle`, `low`. A sparse reward (at least `SPARSE_SHARE` of the segments return exactly 0:
    Pong's points) is grouped by sign: gained, neither, lost. A dense one (Pendulum's cost every
    step) by thirds of the true return. `separation`: how far a group's mean r̂ sum lies from
    the middle group's, in the middle group's standard deviations."""
    out = {**about, "segments": len(pred)}
    finite = len(pred) >= 3 and pred.std() > 0 and true.std() > 0
    out["segment_corr"] = float(np.corrcoef(pred, true)[0, 1]) if finite else None
    if len(true) and np.mean(true == 0) >= SPARSE_SHARE:
        out["grouping"] = "sign"
        which = {"high": true > 0, "middle": true == 0, "low": true < 0}
    else:
        out["grouping"] = "thirds"  # by the tertiles' values: equal returns stay in one group
        low, high = np.quantile(true, [1 / 3, 2 / 3]) if len(true) else (0.0, 0.0)
        which = {"high": true > high, "middle": (true >= low) & (true <= high), "low": true < low}
    groups = {}
    for name, sel in which.items():
        p, t = pred[sel], true[sel]
        groups[name] = {
            "segments": len(p),
            "true_mean": float(t.mean()) if len(t) else None,
            "mean": float(p.mean()) if len(p) else None,
            "std": float(p.std()) if len(p) > 1 else None,
        }
    middle = groups["middle"]
    for name in ("high", "low"):
        g = groups[name]
        ok = g["mean"] is not None and middle["mean"] is not None and (middle["std"] or 0) > 0
        g["separation"] = (g["mean"] - middle["mean"]) / middle["std"] if ok else None
    out["groups"] = groups
    return out


LABELS = {
    "sign": {"high": "gained reward", "middle": "neither", "low": "lost reward"},
    "thirds": {"high": "top third", "middle": "middle third", "low": "bottom third"},
}


def format_check(c: dict) -> str:
    """The check as a few lines for a person."""

    def num(v, digits=2):
        return "-" if v is None else f"{v:+.{digits}f}"

    eps = c["episodes"]
    labels = LABELS[c["grouping"]]
    lines = [
        f"reward model of {c['run']} (seed {c['seed']}, {c['env_id']}) on the play of "
        f"{c['policy']} (seed {c['policy_seed']}, {Path(c['checkpoint']).name}, "
        f"epsilon {c['epsilon']}): {c['steps']:,} steps, {len(eps)} episodes"
        + (f" (true return {np.mean(eps):.1f} on average)" if eps else ""),
        f"{c['segments']} segments of {c['segment_length']} steps; r̂ sum vs true return: "
        f"correlation {num(c['segment_corr'])}",
    ]
    for name in ("high", "middle", "low"):
        g = c["groups"][name]
        sep = "" if name == "middle" else f"   {num(g['separation'], 1)} sd from {labels['middle']}"
        std = "-" if g["std"] is None else f"{g['std']:.2f}"
        lines.append(
            f"  {labels[name]:<14} {g['segments']:>6} segments   true {num(g['true_mean'])}   "
            f"r̂ sum {num(g['mean'])} ± {std}{sep}"
        )
    high = c["groups"]["high"]  # a sparse reward's gains (by thirds, the top may differ little)
    if c["grouping"] == "sign" and high["separation"] is not None and high["separation"] < 0.5:
        lines.append(
            "the model barely rewards what gains true reward here: did its labels include such "
            "clips? (the clips it is asked about come from its own policy)"
        )
    return "\n".join(lines)
