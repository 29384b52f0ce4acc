"""A run's configuration resolved against its env: the settings an algorithm takes from the
env's action space where it has no preset for the env (`ACTION_DEFAULTS`, PPO on a Box).

`config.resolve` is the one resolver and imports no env (it sits below `envs`); this module,
above both, makes the env once to see its actions and hands them to the resolver. Every
command that starts a run from an env id and `backflip show`'s reproduce line go through it.
"""

from __future__ import annotations

from backflip.algos import get_algo
from backflip.config import action_defaults, format_value, resolve

KIND_WORDS = {"box": "its Box actions", "discrete": "its Discrete actions", "atari": "Atari games"}


def _action(algo: str, env_id: str) -> str | None:
    """The env's action-space kind where `algo` has settings by action space and no preset for
    the env, else None. The env module (gymnasium) is imported only then: `backflip show` and
    `--help` stay light."""
    spec = get_algo(algo)
    if not spec.action_defaults or env_id in spec.presets:
        return None
    from backflip.envs import action_kind

    return action_kind(env_id)


def resolve_on_env(algo: str, env_id: str, *args, **kwargs):
    """`config.resolve` for a run on a user's env: where the algorithm has settings by action
    space and no preset for the env (`ACTION_DEFAULTS`: PPO on a Box gets the PPO paper's
    continuous-control settings), the env is made once to see its actions (`envs.action_kind`)
    and the config resolved with them. Every command that starts a run from an env id calls it,
    and `backflip show`'s reproduce line resolves through it, so both derive the same values."""
    return resolve(algo, env_id, *args, **kwargs, action=_action(algo, env_id))


def action_line(cfg) -> str | None:
    """What to say at launch (and keep in the run's record) when `cfg` took settings from its
    env's action space (`resolve_on_env`): the values each has in the run, one replaced by a
    config file or `--set` said as yours; None when none were taken."""
    action = _action(cfg.algo, cfg.env_id)
    taken = action_defaults(cfg.algo, cfg.env_id, action)
    if not taken:
        return None
    flat = cfg.flat()
    said = [
        f"{k}={format_value(flat[k])}" + ("" if flat[k] == v else f" (yours; {format_value(v)})")
        for k, v in taken.items()
    ]
    return (
        f"{cfg.env_id} has no {cfg.algo} preset: the settings for {KIND_WORDS.get(action, action)} "
        f"(algos/settings/{cfg.algo}.py: ACTION_DEFAULTS; --set overrides each): " + ", ".join(said)
    )
