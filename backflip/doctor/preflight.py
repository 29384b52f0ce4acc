"""Preflight: look at an environment before training on it (`backflip preflight ENV_ID`).

Schulman: "visualize a random policy acting on this problem ... if the random policy never does
the right thing, RL likely won't either"; make sure observations are usable (could *you* control
the system from them?) and on a sane scale. This runs Gymnasium's env checker, random-policy
rollouts through backflip's env factory (the agent's view: the same wrappers and `env.*`
options), and reports returns, episode lengths, how episodes end, per-dimension observation
ranges, reward statistics, whether reset with a seed is deterministic, Atari settings that differ
from the papers', and for image observations a PNG contact sheet of frames.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from backflip.doctor.findings import Finding
from backflip.doctor.series import fmt

SCHULMAN = "Schulman, 'Nuts and Bolts of Deep RL Research' (2017)"
MAX_DIMS = 64  # per-dimension rows shown (all are checked)


@dataclass
class Preflight:
    env_id: str
    spaces: dict = field(default_factory=dict)
    checker: dict = field(default_factory=dict)
    random: dict = field(default_factory=dict)
    observations: dict = field(default_factory=dict)
    rewards: dict = field(default_factory=dict)
    determinism: dict = field(default_factory=dict)
    atari: dict = field(default_factory=dict)
    contact_sheet: str | None = None
    findings: list[Finding] = field(default_factory=list)

    def add(self, rule, severity, message, metric=None, **evidence) -> None:
        self.findings.append(
            Finding(f"preflight-{rule}", severity, metric, None, message, evidence)
        )

    def to_dict(self) -> dict:
        from backflip.doctor.findings import _jsonable

        return {
            "target": self.env_id,
            "findings": [f.to_dict() for f in self.findings],
            "report": _jsonable(
                {
                    "spaces": self.spaces,
                    "env_checker": self.checker,
                    "random_policy": self.random,
                    "observations": self.observations,
                    "rewards": self.rewards,
                    "determinism": self.determinism,
                    "atari": self.atari,
                    "contact_sheet": self.contact_sheet,
                }
            ),
        }


def preflight(
    env_id: str,
    opts=None,
    episodes: int = 20,
    max_steps: int = 20_000,
    seed: int = 0,
    sheet_path: str | Path | None = None,
) -> Preflight:
    from backflip.config import EnvOptions
    from backflip.envs import check_env_id, make_env
    from backflip.errors import UserError

    opts = opts or EnvOptions()
    spec = check_env_id(env_id)
    report = Preflight(spec.id)
    try:
        env = make_env(env_id, opts)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 — the env's own constructor failed: say so in one line
        raise UserError(f"could not create {env_id}: {type(e).__name__}: {e}") from None
    report.spaces = {
        "observation": str(env.observation_space),
        "action": str(env.action_space),
        "max_episode_steps": spec.max_episode_steps,
    }
    _check_atari(report, spec)
    _run_checker(report, spec)
    frames = _rollouts(report, env, episodes, max_steps, seed)
    _check_observations(report, env.observation_space, frames, one_hot_dims(env))
    _check_determinism(report, env_id, opts, seed)
    env.close()
    if frames["images"] is not None:
        path = Path(sheet_path or f"preflight-{re.sub(r'[^A-Za-z0-9_.-]+', '_', spec.id)}.png")
        contact_sheet(frames["images"], path)
        report.contact_sheet = str(path)
        report.add(
            "image-observations",
            "info",
            f"image observations {env.observation_space.shape}"
            f": a contact sheet of {len(frames['images'])} frames as the agent sees them "
            f"is in {path} — could you play from these? ({SCHULMAN})",
        )
    return report


# --- Gymnasium's checker and Atari settings --------------------------------------------------


def _run_checker(report: Preflight, spec) -> None:
    from gymnasium.utils.env_checker import check_env

    env = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            env = gym.make(spec.id)
            check_env(env.unwrapped, skip_render_check=True)
            error = None
        except Exception as e:  # noqa: BLE001 — the checker raises assertion and env errors alike
            error = f"{type(e).__name__}: {e}"
        finally:
            if env is not None:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 — closing a broken env may fail too; ignored
                    pass
    # Gymnasium colours its warnings with ANSI codes and a "WARN:" prefix; keep the text
    messages = sorted(
        {re.sub(r"\x1b\[[0-9;]*m|^WARN: ", "", str(w.message).strip()) for w in caught}
    )
    report.checker = {"passed": error is None, "error": error, "warnings": messages}
    if error:
        report.add("env-checker", "error", f"Gymnasium's env checker failed: {error}")
    for m in messages:
        if INFINITE_BOUND.search(m):  # said once, as the info `obs-unbounded`, with the dims
            continue
        report.add("env-checker", "warning", f"Gymnasium's env checker: {m}")


# the checker's warnings about a Box space's infinite bounds (CartPole's velocities): a normal
# declaration, reported by `obs-unbounded` (info) with the dimensions, not as two warnings
INFINITE_BOUND = re.compile(r"(maximum|minimum) value is -?infinity")


def _check_atari(report: Preflight, spec) -> None:
    kwargs = dict(spec.kwargs or {})
    frameskip = kwargs.get("frameskip")
    sticky = kwargs.get("repeat_action_probability")
    is_atari = "ale_py" in str(spec.entry_point) or spec.id.startswith("ALE/")
    if not is_atari and frameskip is None and sticky is None:
        return
    report.atari = {"frameskip": frameskip, "repeat_action_probability": sticky}
    problems = []
    if spec.id.endswith("-v0") and is_atari:
        problems.append("a -v0 id (sticky actions and a random frameskip)")
    if isinstance(frameskip, tuple | list) or (isinstance(frameskip, int) and frameskip > 1):
        problems.append(f"frameskip {frameskip} built into the env")
    if sticky:
        problems.append(f"sticky actions (repeat probability {sticky})")
    if problems:
        report.add(
            "atari-settings",
            "warning",
            f"{spec.id} uses "
            + ", ".join(problems)
            + ": papers' Atari numbers use NoFrameskip-v4-style settings (frame skip done "
            "by the preprocessing, no sticky actions); results won't compare directly "
            "(Machado et al. 2018; backflip pitfalls)",
            frameskip=frameskip,
            repeat_action_probability=sticky,
        )


# --- random-policy rollouts ------------------------------------------------------------------


def _rollouts(report: Preflight, env, episodes: int, max_steps: int, seed: int) -> dict:
    env.action_space.seed(seed)
    obs_list, rewards, returns, lengths = [], [], [], []
    terminated = truncated = 0
    images = [] if _is_image(env.observation_space) else None
    steps = 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        ret, length, done = 0.0, 0, False
        while not done:
            if images is not None and ep < 2 and length % 8 == 0 and len(images) < 16:
                images.append(np.asarray(obs))
            obs_list.append(np.asarray(obs, np.float64).reshape(-1) if images is None else None)
            obs, r, term, trunc, _ = env.step(env.action_space.sample())
            rewards.append(float(r))
            ret += float(r)
            length += 1
            steps += 1
            done = term or trunc
            if steps >= max_steps and not done:
                break
        if done:
            returns.append(ret)
            lengths.append(length)
            terminated += bool(term)
            truncated += bool(trunc and not term)
        if steps >= max_steps:
            break
    rets, lens = np.array(returns), np.array(lengths)
    report.random = {
        "episodes": len(rets),
        "steps": steps,
        "terminated": terminated,
        "truncated": truncated,
    }
    if len(rets):
        report.random.update(
            return_mean=float(rets.mean()),
            return_std=float(rets.std()),
            return_min=float(rets.min()),
            return_max=float(rets.max()),
            length_min=int(lens.min()),
            length_median=float(np.median(lens)),
            length_max=int(lens.max()),
            length_p10=float(np.quantile(lens, 0.1)),
            length_p90=float(np.quantile(lens, 0.9)),
        )
    else:
        report.add(
            "no-episode-end",
            "warning",
            f"no episode ended within {steps:,} random steps:"
            " without a time limit, training will see no episode returns",
            steps=steps,
        )
    r = np.array(rewards)
    _check_rewards(report, r, terminated, truncated, len(rets))
    data = np.stack(obs_list) if images is None and obs_list else None
    return {"obs": data, "images": images}


def _check_rewards(report: Preflight, r: np.ndarray, terminated: int, truncated: int, n: int):
    if not len(r):
        return
    finite = np.isfinite(r)
    if not finite.all():
        report.add(
            "reward-nonfinite",
            "error",
            f"{int((~finite).sum())} of {len(r)} rewards "
            "were NaN or infinite under a random policy",
            metric="reward",
        )
        r = r[finite]
        if not len(r):
            return
    med = float(np.median(r))
    spread = float(1.4826 * np.median(np.abs(r - med)))
    if spread > 0:
        outliers = np.abs(r - med) > 10 * spread
    else:  # most rewards identical: every other value is rare
        outliers = r != med
    report.rewards = {
        "mean": float(r.mean()),
        "std": float(r.std()),
        "min": float(r.min()),
        "max": float(r.max()),
        "zero_fraction": float(np.mean(r == 0)),
        "outliers": int(outliers.sum()),
        "outlier_values": sorted({float(x) for x in r[outliers]})[:10],
    }
    typical = float(np.median(np.abs(r)))
    if typical > 100 or np.abs(r).max() > 1e4:
        report.add(
            "reward-scale",
            "warning",
            f"rewards are large: median |r| {fmt(typical)}, max "
            f"|r| {fmt(float(np.abs(r).max()))}: scale them (value targets should stay "
            f"within ~±10) — scale, don't shift ({SCHULMAN})",
            metric="reward",
        )
    if outliers.any() and outliers.mean() < 0.05:
        report.add(
            "reward-outliers",
            "info",
            f"{int(outliers.sum())} of {len(r)} rewards are far "
            f"from the typical {fmt(med)} (values {', '.join(fmt(x) for x in report.rewards['outlier_values'][:5])})"
            ": rare events the agent must find (sparse reward) or spikes to clip/scale",
            metric="reward",
        )
    if np.ptp(r) == 0 and n and terminated == 0:
        report.add(
            "no-signal",
            "warning",
            f"every reward was {fmt(med)} and every one of the {n} "
            "random episodes ran to its time limit: the random policy never experienced "
            "anything different — if it never does the right thing, RL likely won't "
            f"either ({SCHULMAN})",
            metric="reward",
        )


# --- observations ----------------------------------------------------------------------------


def _is_image(space) -> bool:
    return isinstance(space, gym.spaces.Box) and (
        len(space.shape) == 3 or (len(space.shape) == 2 and space.dtype == np.uint8)
    )


def one_hot_dims(env: gym.Env) -> np.ndarray | None:
    """Which of the networks' observation dimensions are one-hot slots of a discrete part of
    the env's own observation (`envs.adapt_observations` flattens Discrete, Tuple and Dict
    spaces as Gymnasium's `flatten` does: Discrete and MultiDiscrete parts one-hot, Dict keys
    sorted), or None when the env's observation needed no flattening."""
    raw = env.unwrapped.observation_space

    def mask(space) -> list[bool] | None:
        if isinstance(space, gym.spaces.Discrete):
            return [True] * int(space.n)
        if isinstance(space, gym.spaces.MultiDiscrete):
            return [True] * int(np.sum(space.nvec))
        if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
            return [False] * int(np.prod(space.shape))
        if isinstance(space, gym.spaces.Tuple | gym.spaces.Dict):
            parts = (
                [mask(s) for s in space.spaces.values()]
                if isinstance(space, gym.spaces.Dict)
                else [mask(s) for s in space.spaces]
            )
            return None if any(m is None for m in parts) else [x for m in parts for x in m]
        return None

    if isinstance(raw, gym.spaces.Box):
        return None
    m = mask(raw)
    shape = env.observation_space.shape
    return np.array(m) if m is not None and shape is not None and len(m) == np.prod(shape) else None


def _check_observations(
    report: Preflight, space, frames: dict, one_hot: np.ndarray | None = None
) -> None:
    if frames["images"] is not None:
        imgs = np.stack(frames["images"]).astype(np.float64)
        report.observations = {
            "image": True,
            "shape": list(space.shape),
            "min": float(imgs.min()),
            "max": float(imgs.max()),
            "mean": float(imgs.mean()),
        }
        if np.ptp(imgs) == 0:
            report.add(
                "obs-constant",
                "warning",
                "every sampled frame is identical: the observation carries no information",
                metric="observation",
            )
        return
    data = frames["obs"]
    if data is None or not isinstance(space, gym.spaces.Box):
        return
    low = np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float64)
    high = np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float64)
    dims = []
    for i in range(data.shape[1]):
        col = data[:, i]
        dims.append(
            {
                "dim": i,
                "low_bound": float(low[i]),
                "high_bound": float(high[i]),
                "min": float(col.min()),
                "max": float(col.max()),
                "mean": float(col.mean()),
                "std": float(col.std()),
            }
        )
    report.observations = {"image": False, "dims": dims[:MAX_DIMS], "n_dims": len(dims)}
    huge = [d for d in dims if abs(d["mean"]) > 5 or d["std"] > 5]
    constant = [d for d in dims if d["std"] == 0]
    # a one-hot slot a random policy's short look never lit is a value it did not reach (Taxi's
    # 500 states), not a dimension without information
    unvisited = [d for d in constant if one_hot is not None and one_hot[d["dim"]]]
    constant = [d for d in constant if not (one_hot is not None and one_hot[d["dim"]])]
    unbounded = [
        d for d in dims if not (math.isfinite(d["low_bound"]) and math.isfinite(d["high_bound"]))
    ]
    outside = [
        d for d in dims if d["min"] < d["low_bound"] - 1e-6 or d["max"] > d["high_bound"] + 1e-6
    ]
    if huge:
        report.add(
            "obs-scale",
            "warning",
            f"{len(huge)} observation dimension(s) with |mean| or "
            f"std > 5: {_dim_list(huge)} — normalize observations (norm_obs=true) "
            f"({SCHULMAN})",
            metric="observation",
            dims=[d["dim"] for d in huge],
        )
    if constant:
        report.add(
            "obs-constant",
            "warning",
            f"{len(constant)} observation dimension(s) never "
            f"changed under a random policy: {_dim_list(constant)} — they carry no "
            "information (or the random policy never moves them)",
            metric="observation",
            dims=[d["dim"] for d in constant],
        )
    if unvisited:
        report.add(
            "obs-values-unseen",
            "info",
            f"{len(unvisited)} of the {int(one_hot.sum())} one-hot slots of the env's discrete "
            f"observation were never seen under a random policy ({_dim_list(unvisited)}): "
            "values it did not reach in this look (a policy that learns will see more)",
            metric="observation",
            dims=[d["dim"] for d in unvisited],
        )
    if unbounded:
        report.add(
            "obs-unbounded",
            "info",
            f"{len(unbounded)} dimension(s) have infinite bounds "
            f"({_dim_list(unbounded)}): scaling can't rely on the declared space; use "
            "running normalization (Gymnasium's env checker warns about such bounds; they are "
            "common and harmless when the values stay small)",
            metric="observation",
            dims=[d["dim"] for d in unbounded],
        )
    if outside:
        report.add(
            "obs-out-of-bounds",
            "warning",
            f"{len(outside)} dimension(s) left their declared bounds: {_dim_list(outside)}",
            metric="observation",
            dims=[d["dim"] for d in outside],
        )


def _dim_list(dims: list[dict], n: int = 6) -> str:
    text = ", ".join(f"#{d['dim']} (mean {fmt(d['mean'])}, std {fmt(d['std'])})" for d in dims[:n])
    return text + (f" and {len(dims) - n} more" if len(dims) > n else "")


def _check_determinism(report: Preflight, env_id: str, opts, seed: int, steps: int = 200):
    from backflip.envs import make_env

    a, b = make_env(env_id, opts), make_env(env_id, opts)
    try:
        oa, _ = a.reset(seed=seed)
        ob, _ = b.reset(seed=seed)
        again, _ = a.reset(seed=seed)
        same_reset = np.array_equal(np.asarray(oa), np.asarray(ob)) and np.array_equal(
            np.asarray(oa), np.asarray(again)
        )
        a.reset(seed=seed)
        b.reset(seed=seed)
        a.action_space.seed(seed)
        diverged = None
        for t in range(steps):
            action = a.action_space.sample()
            ra, rb = a.step(action), b.step(action)
            same = np.array_equal(np.asarray(ra[0]), np.asarray(rb[0])) and ra[1:4] == rb[1:4]
            if not same:
                diverged = t + 1
                break
            if ra[2] or ra[3]:
                break
    finally:
        a.close()
        b.close()
    report.determinism = {"reset_same_seed": bool(same_reset), "rollout_diverged_at": diverged}
    if not same_reset:
        report.add(
            "reset-nondeterministic",
            "warning",
            f"reset(seed={seed}) gave different "
            "observations on two calls: the env ignores the seed (or uses a global RNG); "
            "runs won't be reproducible",
        )
    if diverged is not None:
        report.add(
            "step-nondeterministic",
            "warning",
            "two copies reset with the same seed and "
            f"given the same actions diverged at step {diverged}: the env's dynamics use an "
            "unseeded source of randomness; runs won't be reproducible",
        )


# --- contact sheet ---------------------------------------------------------------------------


def to_uint8_frame(obs: np.ndarray) -> np.ndarray:
    """An observation as an HxW or HxWx3 uint8 image (channels-first and frame stacks: the
    last frame)."""
    x = np.asarray(obs)
    if x.ndim == 3 and x.shape[0] in (1, 2, 3, 4) and x.shape[-1] not in (1, 3):
        x = x[-1] if x.shape[0] != 3 else np.moveaxis(x, 0, -1)  # stack: newest; CHW: HWC
    if x.ndim == 3 and x.shape[-1] not in (1, 3):
        x = x[..., -1]  # HWC frame stack: the newest frame
    if x.ndim == 3 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.dtype != np.uint8:
        x = x.astype(np.float64)
        lo, hi = float(x.min()), float(x.max())
        x = np.zeros_like(x) if hi == lo else (x - lo) / (hi - lo) * 255
        x = x.astype(np.uint8)
    return x


def contact_sheet(frames: list, path: Path, columns: int = 4, scale: int = 2) -> Path:
    """Tile frames into one PNG (nearest-neighbour upscaled so small frames stay visible)."""
    from PIL import Image

    tiles = [Image.fromarray(to_uint8_frame(f)).convert("RGB") for f in frames]
    w, h = tiles[0].size
    w, h = w * scale, h * scale
    rows = math.ceil(len(tiles) / columns)
    cols = min(columns, len(tiles))
    sheet = Image.new("RGB", (cols * (w + 4) + 4, rows * (h + 4) + 4), (40, 40, 40))
    for i, tile in enumerate(tiles):
        r, c = divmod(i, columns)
        sheet.paste(tile.resize((w, h), Image.NEAREST), (4 + c * (w + 4), 4 + r * (h + 4)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    return path


# --- text ------------------------------------------------------------------------------------


def render(report: Preflight) -> str:
    lines = [f"preflight: {report.env_id}"]
    sp = report.spaces
    lines.append(
        f"  observation {sp.get('observation')}, action {sp.get('action')}, time limit "
        f"{sp.get('max_episode_steps')}"
    )
    ck = report.checker
    said = [m for m in ck.get("warnings", []) if not INFINITE_BOUND.search(m)]
    bounds = len(ck.get("warnings", [])) - len(said)
    lines.append(
        "  Gymnasium env checker: "
        + ("passed" if ck.get("passed") else "FAILED")
        + (f" with {len(said)} warning(s)" if said else "")
        + (f" ({bounds} note(s) on infinite bounds: see obs-unbounded)" if bounds else "")
    )
    r = report.random
    if r.get("episodes"):
        lines.append(
            f"  random policy, {r['episodes']} episodes ({r['steps']:,} steps): return "
            f"{fmt(r['return_mean'])} ± {fmt(r['return_std'])} (min {fmt(r['return_min'])}, max "
            f"{fmt(r['return_max'])}); length min {r['length_min']}, median "
            f"{fmt(r['length_median'])}, max {r['length_max']}; ended by termination "
            f"{r['terminated']}, by time limit {r['truncated']}"
        )
    rw = report.rewards
    if rw:
        lines.append(
            f"  rewards per step: mean {fmt(rw['mean'])}, std {fmt(rw['std'])}, min "
            f"{fmt(rw['min'])}, max {fmt(rw['max'])}, zero {rw['zero_fraction']:.0%}, "
            f"outliers {rw['outliers']}"
        )
    obs = report.observations
    if obs.get("dims"):
        lines.append("  observation dimensions (random policy):")
        lines.append(
            f"    {'dim':>4} {'bounds':>24} {'min':>10} {'max':>10} {'mean':>10} {'std':>10}"
        )
        for d in obs["dims"]:
            bounds = f"[{fmt(d['low_bound'])}, {fmt(d['high_bound'])}]"
            lines.append(
                f"    {d['dim']:>4} {bounds:>24} {fmt(d['min']):>10} {fmt(d['max']):>10}"
                f" {fmt(d['mean']):>10} {fmt(d['std']):>10}"
            )
        if obs["n_dims"] > len(obs["dims"]):
            lines.append(f"    ... {obs['n_dims'] - len(obs['dims'])} more dimensions (--json)")
    det = report.determinism
    if det:
        lines.append(
            "  reset with the same seed: "
            + (
                "deterministic"
                if det["reset_same_seed"] and det["rollout_diverged_at"] is None
                else "NOT deterministic"
            )
        )
    if report.contact_sheet:
        lines.append(f"  contact sheet: {report.contact_sheet}")
    if report.findings:
        lines.append("")
        for f in sorted(
            report.findings, key=lambda f: ("error", "warning", "info").index(f.severity)
        ):
            lines.append(f"{f.severity.upper()} {f.rule}: {f.message}")
    else:
        lines.append("no findings")
    return "\n".join(lines)
