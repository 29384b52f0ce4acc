"""How fast `backflip ui` serves its runs index with a large archive.

Builds a throwaway archive of N runs (real run.json files and index rows, the shape
`backflip train` writes; 2% still running), serves it with the real server on a free loopback
port, and times full HTTP GETs of the index page (the HTML with every row). Target: < 300 ms for
1,000 runs.

    python benchmarks/ui_index.py [--runs 1000] [--requests 30]
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from backflip.config import resolve
from backflip.runs import index
from backflip.runs.archive import write_json


def make_archive(home: Path, n: int) -> None:
    rng = random.Random(0)
    envs = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"]
    config = resolve("ppo", "CartPole-v1", [0, 1, 2, 3, 4], 100_000).to_dict()
    for i in range(n):
        run_id = f"20261101-{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:04x}"
        running = i % 50 == 0
        finals = [rng.uniform(0, 500) for _ in range(5)]
        record = {
            "id": run_id,
            "created": f"2026-11-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
            "status": "running" if running else rng.choice(["finished"] * 8 + ["failed"]),
            "argv": ["backflip", "train", "ppo", "--env", envs[i % 5], "--seeds", "5"],
            "message": f"does setting {i} help? lr sweep point {rng.random():.4f}",
            "algo": rng.choice(["ppo", "a2c", "dqn", "sac"]),
            "env": envs[i % 5],
            "config": {**config, "env_id": envs[i % 5]},
            "tags": rng.sample(["sweep", "baseline", "ablation", "nightly"], k=rng.randint(0, 2)),
            "rerun_of": None,
            "pid": os.getpid() if running else 1,
            "host": socket.gethostname(),
            "provenance": {"host": {"hostname": socket.gethostname()}},
            "duration_s": None if running else rng.uniform(10, 5000),
            "results": None
            if running
            else {
                "n": 5,
                "iqm": sum(sorted(finals)[1:4]) / 3,
                "ci_low": min(finals),
                "ci_high": max(finals),
                "mean": sum(finals) / 5,
                "min": min(finals),
                "max": max(finals),
            },
        }
        d = home / run_id
        d.mkdir(parents=True)
        write_json(d / "run.json", record)
        record["seeds"] = [
            {"seed": s, "status": "finished", "final_eval_return": f, "steps": 100_000, "sps": 2e3}
            for s, f in enumerate(finals)
        ]
        index.upsert(home, record)


def timed_get(port: int, path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    con.request("GET", path)
    resp = con.getresponse()
    body = resp.read()
    con.close()
    assert resp.status == 200, (path, resp.status)
    return time.perf_counter() - t0, len(body)


def serve_in_thread(home: Path):
    """The real app on a free loopback port, served from a thread: (server, port)."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    from backflip.ui.app import LOOPBACK_NAMES, create_app

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args):
            pass

    app = create_app(home, allowed_hosts=LOOPBACK_NAMES)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_port


def measure(port: int, path: str, requests: int) -> tuple[list[float], int]:
    """Milliseconds of `requests` GETs of `path` (after 3 warm-up requests), and the body size."""
    for _ in range(3):  # warm-up: imports, SQLite page cache
        timed_get(port, path)
    times, size = [], 0
    for _ in range(requests):
        dt, size = timed_get(port, path)
        times.append(dt * 1000)
    return sorted(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "archive"
        t0 = time.perf_counter()
        make_archive(home, args.runs)
        print(f"archive of {args.runs} runs built in {time.perf_counter() - t0:.1f} s")
        server, port = serve_in_thread(home)
        try:
            for path in ("/", "/?status=finished&q=sweep", "/api/runs"):
                times, size = measure(port, path, args.requests)
                p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
                print(
                    f"GET {path:<28} median {statistics.median(times):6.1f} ms  p95 {p95:6.1f} ms  "
                    f"max {times[-1]:6.1f} ms  ({size / 1024:,.0f} KiB, {args.requests} requests)"
                )
        finally:
            server.shutdown()
    load = os.getloadavg()
    print(f"load average during the run: {load[0]:.1f} (1 min) on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
