"""Wall time of `backflip probe ALGO` (target: under 60 s per algorithm on 2 cores).

    python benchmarks/probe_time.py [ALGO ...]      # default: every registered algorithm

Prints each probe's result and seconds, then one line per algorithm with the total. Timings
depend on machine load: run it on a quiet machine and note the load average it prints.
"""

from __future__ import annotations

import os
import sys
import time

from backflip.algos import ALGOS
from backflip.doctor.probes import result_line, run_probes


def main(algos: list[str]) -> None:
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    totals = {}
    for algo in algos:
        t0 = time.perf_counter()
        results = run_probes(algo, on_result=lambda r, a=algo: print(f"{a:5} {result_line(r)}"))
        totals[algo] = (
            time.perf_counter() - t0,
            sum(r.passed is False for r in results),
            len(results),
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    for algo, (seconds, failed, n) in totals.items():
        print(f"{algo}: {n} probes, {failed} failed, {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:] or list(ALGOS))
