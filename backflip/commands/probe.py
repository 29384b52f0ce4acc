"""backflip probe ALGO [--json]"""

from __future__ import annotations

import time

from backflip.commands import print_json
from backflip.errors import UserError

# the library is imported inside functions: `backflip --help` imports every command module


def register(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="train ALGO on Jones's five probe environments and check what it learned",
        description="Each probe has a known answer (a value, an action); a failure points at "
        "one part of the algorithm (docs/doctor.md). Also audits backflip's normalizers. Exit "
        "status 0 when every probe passes, 1 when one fails.",
    )
    p.add_argument("algo", help="algorithm (ppo, ...)")
    p.add_argument(
        "--probe",
        type=int,
        action="append",
        choices=[1, 2, 3, 4, 5],
        help="run only this probe (repeatable)",
    )
    p.add_argument("--kind", choices=["discrete", "box"], help="only this action-space kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:

    from backflip.algos import get_algo
    from backflip.doctor.audits import audit_obs_normalizer, audit_reward_scaler
    from backflip.doctor.probes import probe_kinds, result_line, run_probes

    spec = get_algo(args.algo)
    kinds = probe_kinds(spec)
    if args.kind:
        if (args.kind == "box") not in kinds:
            raise UserError(f"{args.algo} does not take {args.kind} actions")
        kinds = [args.kind == "box"]
    t0 = time.perf_counter()
    show = None if args.json else (lambda r: print(result_line(r), flush=True))
    results = run_probes(args.algo, args.seed, args.probe, kinds, on_result=show)
    audits = audit_reward_scaler() + audit_obs_normalizer()
    seconds = time.perf_counter() - t0
    failed = [r for r in results if r.passed is False] + [a for a in audits if not a.passed]
    if args.json:
        print_json(
            {
                "algo": args.algo,
                "passed": not failed,
                "seconds": round(seconds, 1),
                "probes": [r.to_dict() for r in results],
                "audits": [
                    {"name": a.name, "passed": a.passed, "detail": a.detail} for a in audits
                ],
            }
        )
    else:
        for a in audits:
            print(f"{'pass' if a.passed else 'FAIL':4} normalizer audit: {a.name} — {a.detail}")
        verdict = "all passed" if not failed else f"{len(failed)} failed"
        print(
            f"{args.algo}: {len(results)} probes, {len(audits)} audits, {verdict} "
            f"in {seconds:.0f} s"
        )
    return 1 if failed else 0
