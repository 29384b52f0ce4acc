"""Which logged series is a run's return: the task's, or a learned reward's.

On most runs the algorithm trains on the task's reward, so `rollout/ep_return_*`, `env/reward_*`
and `episodes.csv` are the return people mean. A preference run (`backflip prefs train`, whose
run config's kind is `prefs`) trains the policy on a learned reward r̂ instead: there those
series and `episodes.csv` hold r̂, which is standardized on recent experience every reward-model
round and says little about the task. The task's (true) return of such a run is

- `prefs/true_return_mean`: the true return of the last 20 finished training episodes (the same
  window as `rollout/ep_return_mean`), logged by the preference pipeline;
- `eval/return_*`: greedy evaluation, always on the true reward.

Everything that asks "did the policy get better?" (the doctor, the web UI) takes these names
and this test from here, so one place decides what the return of a run is.
"""

from __future__ import annotations

from collections.abc import Iterable

from backflip.config import run_kind

TRAINING_RETURN = "rollout/ep_return_mean"
"""the return of recent training episodes, as the algorithm saw it"""
TRUE_RETURN = "prefs/true_return_mean"
"""a preference run's true return of recent training episodes"""
EVAL_RETURN = "eval/return_mean"
"""greedy evaluation on the task's reward (every run, preference runs included)"""
LEARNED_NOTE = "learned reward (r̂), not the task's"
"""how a series holding r̂ is labelled wherever it is shown"""

_LEARNED_PREFIXES = ("rollout/ep_return_", "env/reward_")


def is_preference_run(config: dict | None, metric_names: Iterable[str] = ()) -> bool:
    """Whether the policy trained on a learned reward: the run config's kind is `prefs`
    (`config.run_kind`), or (no config at hand: a live seed, a bare seed folder, a TensorBoard
    log) the preference pipeline's `prefs/*` metrics are among the logged names."""
    if config and run_kind(config) == "prefs":
        return True
    return any(name.startswith("prefs/") for name in metric_names)


def holds_learned_reward(name: str) -> bool:
    """Whether metric `name` measures the learned reward r̂ on a preference run: the training
    episodes' returns (`rollout/ep_return_*`) and per-step rewards (`env/reward_*`)."""
    return name.startswith(_LEARNED_PREFIXES)


def training_return(config: dict | None) -> str:
    """The series that shows a run's recent training return on the task: the true return on a
    preference run (its `rollout/ep_return_mean` is the learned reward's), else the training
    episodes' return."""
    return TRUE_RETURN if is_preference_run(config) else TRAINING_RETURN
