"""Seeds of an Atari game at equal agent steps, from preferences and on the true reward: what
`atari_prefs.py --stop-steps N` runs leave in an archive, read back and set side by side.

For every run under `--home` on `--env` (one seed each, as `atari_prefs.py` makes them), grouped
into "from preferences" and "PPO on the true reward" by the run's config:

- each seed's final greedy evaluation (`run.max_steps` evaluates where it stops: the same agent
  steps for every seed), its training true return at that step (the last 20 episodes: the game's
  score, which a preference run's policy never sees), the labels used, its wall time;
- per group the IQM of the final greedy returns with its 95% bootstrap CI (`backflip.stats`);
- a figure (`--figure`): the true return's IQM over steps with its 95% band per group
  (`backflip.curves`), and every seed's final greedy return with the group's IQM and CI.

    python benchmarks/atari_seeds.py --home runs --env PongNoFrameskip-v4 \
        --figure docs/img/pong-seeds.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from backflip.curves import aggregate_curves, run_seed_curves
from backflip.returns import is_preference_run
from backflip.runs.archive import load_run
from backflip.stats import summarize

GROUPS = ("from preferences", "PPO on the true reward")


def runs_of(home: Path, env_id: str) -> dict[str, list[dict]]:
    """{group: [one dict per seed]} for the finished runs on `env_id` under `home`."""
    out = {g: [] for g in GROUPS}
    for run_json in sorted(home.glob("*/run.json")):
        try:
            record = load_run(run_json.parent)
        except Exception:  # noqa: BLE001 — a run being written, or not a run
            continue
        config = record.get("config") or {}
        if config.get("env_id") != env_id or record.get("status") != "finished":
            continue
        group = GROUPS[0] if is_preference_run(config) else GROUPS[1]
        for seed in record.get("seeds", []):
            curves = run_seed_curves(run_json.parent, [seed["seed"]])
            steps, values, _end = curves.get(seed["seed"], (np.array([]), np.array([]), 0))
            out[group].append(
                {
                    "run": record["id"],
                    "seed": seed["seed"],
                    "steps": seed.get("steps"),
                    "greedy": seed.get("final_eval_return"),
                    "greedy_games": seed.get("final_eval_returns"),
                    "true_return": float(values[-1]) if len(values) else None,
                    "labels": seed.get("labels"),
                    "wall_min": (seed.get("wall_s") or 0) / 60,
                    "curve": (steps, values),
                }
            )
    return out


def figure(groups: dict[str, list[dict]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(
        1, 2, figsize=(6.9, 2.6), width_ratios=[2, 1], layout="constrained"
    )
    colors = {GROUPS[0]: "#d62728", GROUPS[1]: "#1f77b4"}
    for x, (name, seeds) in enumerate(groups.items()):
        if not seeds:
            continue
        curve = aggregate_curves([s["curve"] for s in seeds if len(s["curve"][0])])
        f = lambda k, c=curve: np.array([np.nan if v is None else v for v in c[k]], float)  # noqa: E731
        ax.plot(
            curve["step"],
            f("iqm"),
            color=colors[name],
            label=f"{name} ({len(seeds)} seed{'s' * (len(seeds) != 1)})",
        )
        ax.fill_between(curve["step"], f("low"), f("high"), color=colors[name], alpha=0.2, lw=0)
        finals = [s["greedy"] for s in seeds if s["greedy"] is not None]
        bx.scatter(np.full(len(finals), x) + np.linspace(-0.1, 0.1, len(finals)), finals,
                   color=colors[name], s=12)  # fmt: skip
        agg = summarize(finals)
        if agg["n"] >= 2:
            bx.errorbar(x + 0.25, agg["iqm"], [[agg["iqm"] - agg["ci_low"]], [agg["ci_high"] - agg["iqm"]]],
                        color=colors[name], fmt="s", capsize=3, ms=4)  # fmt: skip
    ax.set_xlabel("agent steps")
    ax.set_ylabel("true return (last 20 episodes)")
    ax.set_title("training: IQM across seeds, 95% band")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    bx.set_xticks(range(len(groups)), ["prefs", "true reward"])
    bx.set_ylabel("final greedy return")
    bx.set_title("each seed; IQM, 95% CI")
    bx.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=200)
    print(f"figure: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--home", type=Path, default=Path("runs"))
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--figure", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the table as JSON")
    args = ap.parse_args()
    groups = runs_of(args.home, args.env)
    for name, seeds in groups.items():
        print(f"\n{args.env}, {name}:")
        print(f"  {'seed':>4} {'steps':>10} {'greedy':>7} {'games':24} {'true (20)':>9} "
              f"{'labels':>6} {'wall':>8}  run")  # fmt: skip
        for s in sorted(seeds, key=lambda s: s["seed"]):
            games = ", ".join(f"{g:.0f}" for g in s["greedy_games"] or [])
            true = "-" if s["true_return"] is None else f"{s['true_return']:.1f}"
            greedy = "-" if s["greedy"] is None else f"{s['greedy']:.1f}"
            print(f"  {s['seed']:>4} {s['steps'] or 0:>10,} {greedy:>7} {games:24} {true:>9} "
                  f"{s['labels'] or '-':>6} {s['wall_min']:6.1f} min  {s['run']}")  # fmt: skip
        agg = summarize([s["greedy"] for s in seeds])
        if agg["n"] >= 2:
            print(f"  final greedy IQM {agg['iqm']:.1f} [95% CI {agg['ci_low']:.1f}, "
                  f"{agg['ci_high']:.1f}], n = {agg['n']}")  # fmt: skip
        elif agg["n"]:
            print(f"  final greedy {agg['iqm']:.1f} (one seed: no interval)")
    if args.figure:
        figure(groups, args.figure, f"{args.env}: seeds at equal agent steps")
    if args.json:
        clean = {g: [{k: v for k, v in s.items() if k != "curve"} for s in seeds]
                 for g, seeds in groups.items()}  # fmt: skip
        args.json.write_text(json.dumps(clean, indent=2))


if __name__ == "__main__":
    main()
