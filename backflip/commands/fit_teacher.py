"""backflip prefs fit-teacher RUN: each labeler of a preference run as a B-Pref teacher (β, ε, γ)."""

from __future__ import annotations

from backflip.commands import add_home, print_json
from backflip.errors import UserError
from backflip.runs.layout import PREFS_DB, seed_dir

# the library is imported inside functions: `backflip --help` imports every command module


def register(stages) -> None:
    f = stages.add_parser(
        "fit-teacher",
        help="estimate each labeler's β, ε (and γ) from its answers against the true returns",
        description="Maximum-likelihood estimates, with 95% profile-likelihood intervals, of "
        "the rationality β, mistake rate ε and myopia γ of each labeler of RUN (each person by "
        "name, each simulated teacher by its parameters), from its answers against the true "
        "rewards stored with each segment: for a person, the settings that simulate them "
        "(docs/preferences.md, 'Fitting a teacher').",
    )
    f.add_argument("run", metavar="RUN", help="run id, unique prefix, `last`, or a path")
    f.add_argument("--seed", type=int, metavar="S", help="only this seed (default: all, pooled)")
    f.add_argument("--no-gamma", action="store_true", help="fit β and ε at γ = 1 only (faster)")
    f.add_argument("--json", action="store_true")
    add_home(f)
    f.set_defaults(func=run)


def run(args) -> int:
    from backflip.prefs.db import preference_seeds
    from backflip.prefs.teacher_fit import fit_run, format_fit
    from backflip.runs.archive import home_dir, load_run
    from backflip.runs.index import resolve_run

    run_dir = resolve_run(home_dir(args.home), args.run)
    record = load_run(run_dir)
    seeds = [
        s for s in preference_seeds(record, args.seed) if (seed_dir(run_dir, s) / PREFS_DB).exists()
    ]
    if not seeds:
        raise UserError(f"run {record['id']} has no preference database yet")
    fits = fit_run(run_dir, seeds, gamma=not args.no_gamma)
    if not fits:
        raise UserError(f"run {record['id']} has no answered queries (seeds {seeds})")
    if all("reason" in f for f in fits):
        raise UserError(
            f"run {record['id']}: no labeler can be fit — "
            + "; ".join(f"{f['who'] or 'unnamed'}: {f['reason']}" for f in fits)
        )
    if args.json:  # infinite bounds (a rational β, an open interval) become null
        print_json({"run": record["id"], "seeds": seeds, "labelers": fits})
        return 0
    print(
        f"run {record['id']} ({record['config']['env_id']}), seeds {', '.join(map(str, seeds))}: "
        "each labeler's answers against the true returns, P(left) = ε + (1 − 2ε) σ(β Δ_γ), "
        "95% profile-likelihood intervals"
    )
    for fit in fits:
        print(format_fit(fit))
    return 0
