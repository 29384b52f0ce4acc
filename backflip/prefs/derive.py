"""A preference run's settings from the env it is given, not from its id (docs/preferences.md,
"Your own env").

The presets (`presets.py`) hold what was tuned for the envs backflip was measured on. Any other
env gets settings derived from what can be seen of it before a run is created (`look`): its
observation and action spaces, its time limit, and whether a random policy's episodes end before
it (`EnvFacts`). `derived_settings` turns those into `prefs.*` (and `env.*`) values, each with a
reason; `backflip prefs train` states them at launch and `--list-keys` shows them. They are the
lowest layer of the resolver (`config.resolve`): a preset, a config file or `--set` overrides
any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# an env with no time limit gets this one (a fixed horizon needs one; said at launch)
DEFAULT_HORIZON = 1000
PROBE_EPISODES, PROBE_STEPS = 20, 5_000  # the random policy's look at the env's episodes
SEGMENT_LENGTH = 25  # the paper's Atari clips (1-2 s of play); shorter for short episodes
# a person's clip lasts this long at the env's real speed: the paper's continuous-control clips
# (1.5 s, 15-60 steps) and rl-teacher's; 25 steps of Hopper (125 a second) last 0.2 s
CLIP_SECONDS = 1.5
# random-policy copies that render for a person (64 Hoppers: 7.7 GB resident)
PERSON_RANDOM_ENVS = 8
LABELS_PER_STEP = 1 / 200  # 500 labels for 1e5 agent steps (the presets' budgets) ...
LABELS_MIN, LABELS_MAX = 100, 1000  # ... within these (the paper's MuJoCo runs: 700 and 1,400)
# the reward model's CNN on frames at least this large: keypoints (MovingDot84 and Pong learned
# from coordinates, not from the paper's flattened features); smaller ones get the small CNN
KEYPOINTS_FROM = 36
# an env whose end a random policy reaches in some but at most half of its episodes explores
# for this share of the budget first (`prefs.explore_steps`, prefs/explore.py)
EXPLORE_FRAC = 0.1


@dataclass
class EnvFacts:
    """What a preference run needs to know of an env before it starts."""

    obs_shape: tuple[int, ...]
    """observations as the networks see them (`envs.adapt_observations`)"""
    discrete: bool
    """Discrete actions (else Box)"""
    action_space: str
    """the action space, as Gymnasium prints it"""
    time_limit: int | None
    """the env's time limit (`env.max_episode_steps` included), None if it has none"""
    episodes: int
    """random-policy episodes seen by the probe (finished or cut at the probe's end)"""
    terminated: int
    """... of which the env terminated before the time limit"""
    mean_length: float
    """the mean length of the finished ones (nan: none finished)"""
    steps_per_s: float = 30.0
    """the env's real speed (`envs.steps_per_second`): what a person's clip plays at"""

    @property
    def image(self) -> bool:
        return len(self.obs_shape) == 3


def look(env_id: str, opts, seed: int = 0) -> EnvFacts:
    """Spaces, time limit and a random policy's episodes (up to `PROBE_EPISODES` of them, or
    `PROBE_STEPS` steps) on one copy of the env as the run will see it (an env without a time
    limit: its episodes cut at `DEFAULT_HORIZON`, the one the run will give it)."""
    from backflip.envs import check_api, episode_limit, make_env, probing, steps_per_second

    with probing():
        env = make_env(env_id, opts)
    try:
        check_api(env, env_id)
    except BaseException:
        env.close()
        raise
    limit = episode_limit(env_id, opts)
    cap = DEFAULT_HORIZON if limit is None else None  # as the run will cut its episodes
    try:
        obs_shape = tuple(env.observation_space.shape)
        action_space = env.action_space
        discrete = hasattr(action_space, "n")
        env.action_space.seed(seed)
        env.reset(seed=seed)
        episodes = terminated = steps = length = 0
        lengths = []
        while episodes < PROBE_EPISODES and steps < PROBE_STEPS:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            steps += 1
            length += 1
            if term or trunc or length == cap:
                episodes += 1
                terminated += bool(term)
                lengths.append(length)
                length = 0
                env.reset()
        if length:  # an episode the probe's step budget cut
            episodes += 1
    finally:
        env.close()
    return EnvFacts(
        obs_shape=obs_shape,
        discrete=discrete,
        action_space=str(action_space),
        time_limit=limit,
        episodes=episodes,
        terminated=terminated,
        mean_length=float(np.mean(lengths)) if lengths else math.nan,
        steps_per_s=steps_per_second(env),
    )


def derived_settings(
    facts: EnvFacts, steps: int, person: bool = False
) -> dict[str, tuple[object, str]]:
    """`{key: (value, why)}` for an env without a preset and a budget of `steps` agent steps;
    `person`: a person labels it (clips last `CLIP_SECONDS` at the env's real speed)."""
    out: dict[str, tuple[object, str]] = {}
    horizon = facts.time_limit
    if horizon is None:
        horizon = DEFAULT_HORIZON
        out["prefs.horizon_steps"] = (
            horizon,
            f"the env has no time limit; a fixed horizon needs one ({DEFAULT_HORIZON} steps, for "
            "training: evaluation plays the env's own episodes)",
        )
    if person:
        seconds = round(CLIP_SECONDS * facts.steps_per_s)
        segment = max(1, min(seconds, horizon // 4))
        out["prefs.segment_length"] = (
            segment,
            f"a person's clips of {CLIP_SECONDS:g} s (the paper's continuous control): "
            f"{seconds} steps at the env's {facts.steps_per_s:g} a second, at most a quarter "
            "of the horizon",
        )
    else:
        segment = max(1, min(SEGMENT_LENGTH, horizon // 4))
        out["prefs.segment_length"] = (
            segment,
            f"clips of {SEGMENT_LENGTH} steps as the paper's, at most a quarter of the horizon",
        )
    out["prefs.absorb_steps"] = (
        segment,
        "after the env ends an episode, one clip's length in the absorbing state (one clip can "
        "show it whole), then a restart (prefs.horizon=terminal: the end)",
    )
    labels = int(min(LABELS_MAX, max(LABELS_MIN, round(steps * LABELS_PER_STEP / 50) * 50)))
    out["prefs.labels"] = (
        labels,
        f"1 label per {round(1 / LABELS_PER_STEP)} agent steps, in [{LABELS_MIN}, {LABELS_MAX}]",
    )
    out["prefs.initial_frac"] = (0.5, "half the labels from random clips before the policy")
    if person:  # each copy renders: MuJoCo's software renderer holds ~100 MB a copy
        out["prefs.random_envs"] = (
            PERSON_RANDOM_ENVS,
            f"the first clips from {PERSON_RANDOM_ENVS} random-policy copies, as each renders "
            "frames for a person (MuJoCo's renderer without a GPU: ~100 MB a copy, 50 ms a frame)",
        )
    else:
        out["prefs.random_envs"] = (
            64,
            "the first clips from 64 random-policy copies, each from its own reset: spread over "
            "the state space",
        )
    out["prefs.selection"] = (
        "disagreement",
        "queries by the ensemble's disagreement (the presets' choice, docs/preferences.md)",
    )
    if 0 < facts.terminated <= facts.episodes / 2:
        out["prefs.explore_steps"] = (
            round(steps * EXPLORE_FRAC),
            f"a random policy reached the env's end in {facts.terminated} of {facts.episodes} "
            f"episodes: its clips would seldom show it (CliffWalking's goal); the first "
            f"{EXPLORE_FRAC:.0%} of the steps explore (paid for new observations) before the "
            "first labels",
        )
    if facts.image:
        side = min(facts.obs_shape[1:])
        cnn = "keypoints" if side >= KEYPOINTS_FROM else "small"
        out["prefs.cnn"] = (
            cnn,
            f"{facts.obs_shape[1]}x{facts.obs_shape[2]} frames: "
            + (
                "coordinates of what the convolutions find"
                if cnn == "keypoints"
                else "3x3 convolutions at full resolution"
            ),
        )
        if cnn == "keypoints":
            out.update(reward_cnn_budget(facts.obs_shape))
        if facts.discrete:
            out["prefs.action_input"] = (
                "heads",
                "frames and discrete actions: one output per action (what a CNN needs to "
                "learn a reward that depends on the action)",
            )
    return out


# what the reward CNN may cost on frames of `KEYPOINTS_FROM` pixels or more: the CPU Atari
# preset's budget (presets.py: CPU_ATARI), which kept a Pong run's reward model at a fraction
# of the policy's time; the vector defaults (every frame, 500 pretraining updates, 10 per 1,000
# steps) gave a 3,000-step look at ALE/Breakout-v5 an ETA of ~40 minutes of pretraining
FRAME_BUDGET = {
    "prefs.frame_stride": (4, "the reward CNN trained on every 4th frame of a clip"),
    "prefs.pretrain_updates": (150, "150 updates on the first labels before the policy"),
    "prefs.rm_updates_per_kstep": (1.0, "1 reward-model update per 1,000 agent steps"),
    "prefs.round_updates": (100, "rounds of up to 100 updates"),
    "prefs.tick_steps": (16384, "a tick (labels due, a round) every 16,384 agent steps"),
    "prefs.eval_pairs": (64, "64 held-out pairs validate each round"),
    "prefs.oversample": (4, "queries chosen among 4x as many candidate pairs"),
    "prefs.store_size": (400, "the 400 most recent clips kept for queries"),
}


def reward_cnn_budget(obs_shape: tuple[int, ...]) -> dict[str, tuple[object, str]]:
    """The reward CNN's training budget on large frames, each setting with its reason."""
    size = f"{obs_shape[1]}x{obs_shape[2]} frames"
    return {
        key: (value, f"{why}: {size} (the CPU Atari preset's budget)")
        for key, (value, why) in FRAME_BUDGET.items()
    }


def horizon_line(facts: EnvFacts, treatment: str, horizon: int, absorb_steps: int = 0) -> str:
    """One line for the launch and the run record: what the env's episodes do and what the run
    does about it."""
    seen = (
        f"{facts.terminated} of {facts.episodes} random episodes ended before the time limit"
        if facts.episodes
        else "no random episode finished"
    )
    if treatment == "variable":
        return (
            f"horizon: variable (prefs.horizon=variable): episodes end when the env ends them "
            f"({seen}); their length can carry the learned reward"
        )
    what = {
        "absorb": "an episode the env ends early goes on in an absorbing state (the last "
        "observation, reward 0, one learned value) until the time limit",
        "restart": f"an episode the env ends early goes on in an absorbing state (the last "
        f"observation, reward 0, one learned value) for {absorb_steps} steps, then the env "
        "restarts inside it",
        "terminal": f"an episode the env ends early goes on in an absorbing state (the last "
        f"observation, reward 0, one learned value) for {absorb_steps} steps, then ends for the "
        "learner, valued as that state for ever",
    }[treatment]
    return f"horizon: fixed at {horizon:,} steps (prefs.horizon={treatment}): {what} ({seen})"


# every key `derived_settings` may set (a reproduce line gives them all: `summary.py`)
DERIVED_KEYS = (
    "prefs.horizon_steps",
    "prefs.segment_length",
    "prefs.absorb_steps",
    "prefs.labels",
    "prefs.initial_frac",
    "prefs.random_envs",
    "prefs.selection",
    "prefs.explore_steps",
    "prefs.cnn",
    "prefs.action_input",
    *FRAME_BUDGET,
)


def check_action_input(pcfg, discrete: bool, action_space) -> None:
    """`prefs.action_input=heads` gives one output per action: discrete actions only."""
    from backflip.errors import UserError

    if pcfg.action_input == "heads" and not discrete:
        raise UserError(
            "prefs.action_input=heads needs discrete actions (one output per action); this "
            f"env's actions are {action_space}: use prefs.action_input=concat"
        )
