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
- by the sign of the true return (segments that gained reward, lost it, neither): how many, and
  the mean and standard deviation of their r̂ sums; `separation` is how far the mean of the
  gaining (losing) segments lies above (below) that of the neutral ones, in neutral standard
  deviations. Near 0 for gains, the model does not reward what the task rewards.

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
from backflip.prefs.pipeline import PrefsConfig, build_reward_model, policy_reward, seed_files
from backflip.runs.archive import load_checkpoint, load_run

GROUPS = (("gain", 1), ("none", 0), ("loss", -1))  # segments by the sign of their true return


def load_model(run_dir: Path, seed: int):
    """The saved reward model of `seed` of a preference run, and its settings."""
    path = seed_files(run_dir, seed) / "reward_model.pt"
    if not path.exists():
        raise UserError(f"no saved reward model in {path.parent} (the run has not trained one)")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        pcfg = PrefsConfig.from_dict(saved["prefs"])
    except Exception as e:  # noqa: BLE001 — a truncated or foreign file: one line
        raise UserError(f"cannot read reward model {path}: {type(e).__name__}: {e}") from None
    return saved, pcfg


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
    if "prefs" not in record.get("config", {}):
        raise UserError(f"run {record['id']} is not a preference run (backflip prefs train ...)")
    seed = record["config"]["seeds"][0] if seed is None else seed
    if seed not in record["config"]["seeds"]:
        raise UserError(f"run {record['id']} has seeds {record['config']['seeds']}, not {seed}")
    saved, pcfg = load_model(run_dir, seed)
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
    episodes, buf = [], []
    obs, _ = env.reset(seed=int(rng.integers(2**31)))
    env.action_space.seed(int(rng.integers(2**31)))
    for _ in range(steps):
        if rng.random() < epsilon:
            action = env.action_space.sample()
        else:
            action = agent.act(np.asarray(obs)[None])[0]
        nxt, reward, term, trunc, _ = env.step(action)
        buf.append((obs, action, float(reward), nxt))
        obs = nxt
        if term or trunc:
            episodes.append(buf)
            buf = []
            obs, _ = env.reset()
    ended = [True] * len(episodes) + [False]
    out = []
    for ep, done in zip([*episodes, buf], ended, strict=True):
        if ep:
            o, a, r, n = zip(*ep, strict=True)
            out.append((np.stack(o), np.stack(a), np.asarray(r), np.stack(n), done))
    return out


def summarize(pred: np.ndarray, true: np.ndarray, **about) -> dict:
    """Correlation and the r̂ sums of segments grouped by the sign of their true return."""
    out = {**about, "segments": len(pred)}
    finite = len(pred) >= 3 and pred.std() > 0 and true.std() > 0
    out["segment_corr"] = float(np.corrcoef(pred, true)[0, 1]) if finite else None
    groups = {}
    for name, sign in GROUPS:
        sel = pred[np.sign(true) == sign]
        groups[name] = {
            "segments": len(sel),
            "mean": float(sel.mean()) if len(sel) else None,
            "std": float(sel.std()) if len(sel) > 1 else None,
        }
    none = groups["none"]
    for name, _ in (GROUPS[0], GROUPS[2]):
        g = groups[name]
        ok = g["mean"] is not None and none["mean"] is not None and (none["std"] or 0) > 0
        g["separation"] = (g["mean"] - none["mean"]) / none["std"] if ok else None
    out["groups"] = groups
    return out


def format_check(c: dict) -> str:
    """The check as a few lines for a person."""

    def num(v, digits=2):
        return "-" if v is None else f"{v:+.{digits}f}"

    eps = c["episodes"]
    lines = [
        f"reward model of {c['run']} (seed {c['seed']}, {c['env_id']}) on the play of "
        f"{c['policy']} (seed {c['policy_seed']}, {Path(c['checkpoint']).name}, "
        f"epsilon {c['epsilon']}): {c['steps']:,} steps, {len(eps)} episodes"
        + (f" (true return {np.mean(eps):.1f} on average)" if eps else ""),
        f"{c['segments']} segments of {c['segment_length']} steps; r̂ sum vs true return: "
        f"correlation {num(c['segment_corr'])}",
    ]
    for name, label in (("gain", "gained reward"), ("none", "neither"), ("loss", "lost reward")):
        g = c["groups"][name]
        sep = "" if name == "none" else f"   {num(g.get('separation'), 1)} sd from neither"
        std = "-" if g["std"] is None else f"{g['std']:.2f}"
        lines.append(
            f"  {label:<14} {g['segments']:>6} segments   r̂ sum {num(g['mean'])} ± {std}{sep}"
        )
    gain = c["groups"]["gain"]
    if gain["segments"] and gain.get("separation") is not None and gain["separation"] < 0.5:
        lines.append(
            "the model barely rewards what gains true reward here: did its labels include such "
            "clips? (the clips it is asked about come from its own policy)"
        )
    return "\n".join(lines)
