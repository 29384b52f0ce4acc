"""How long backflip makes you wait before it does anything (issue 23 part 6).

Two figures, each the median of `--repeats` runs, run by the `backflip` command of the Python
this script runs under (the console script a user types, not `python -m`):

- the fixed overhead of `backflip train`: from just before the command is started to the first
  env step of its seed, warm (the seed forked from the warm seed server a previous command
  started, as for every run after the first of a session) and new (the first command, which
  starts the server and waits for its imports: a fresh `BACKFLIP_WARM_DIR` each time), each
  repeat timing one of each. The step is marked by the env itself: the run trains on `Marker-v0`
  (CartPole-v1 whose first `step` anywhere writes `time.time()` to a file; a module in the
  working directory, also put on PYTHONPATH so the script measures code that cannot import
  from the working directory too), so nothing is guessed from output timing;
- the latency of `backflip runs`, `backflip show ID` and `backflip --help` on an archive of
  `--runs` runs, built by copying one real run folder (a short PPO run) with new ids and letting
  the index rebuild itself once (untimed, printed separately).

Targets: train overhead <= 1.5 s; runs, show and --help <= 0.5 s. The machine is shared: the
load average (`uptime`) is printed before and after; compare medians, and rerun when the load
moved. The CPU seconds of runs, show and --help (user + system, from the kernel's accounting of
the finished process) depend much less on the load than their wall time does.

    python benchmarks/cli_latency.py [--runs 200] [--repeats 7] [--keep DIR] [--baseline PYTHON]

`--baseline /path/to/other/.venv/bin/python` times another checkout's backflip too, each command
alternating between the two (before/after figures under the same load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backflip.runs.provenance import cpu_model

BACKFLIP = str(Path(sys.executable).parent / "backflip")

MARKER_MODULE = '''"""CartPole-v1 whose first step in any process writes time.time() to $BF_LATENCY_MARK."""
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class Marker(CartPoleEnv):
    def step(self, action):
        path = os.environ.get("BF_LATENCY_MARK")
        if path and not os.path.exists(path):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:  # another copy stepped first
                pass
            else:
                os.write(fd, repr(time.time()).encode())
                os.close(fd)
        return super().step(action)


gym.register("Marker-v0", entry_point=Marker, max_episode_steps=500)
'''


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(
    args: list[str], cwd: Path, env: dict, backflip: str = BACKFLIP
) -> tuple[float, subprocess.CompletedProcess, float]:
    """(wall seconds, the finished process, CPU seconds of it and its children)."""
    c0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run([backflip, *args], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - t0, children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"backflip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed, proc, cpu


def build_archive(home: Path, n: int, cwd: Path, env: dict) -> tuple[str, float]:
    """One real run, copied to `n` runs with fresh ids; then the index rebuilds itself once.
    Returns an id to `show` and the seconds of that first `backflip runs`."""
    run(
        ["train", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "2048",
         "--no-ask", "--no-progress", "--home", str(home)],
        cwd, env,
    )  # fmt: skip
    (original,) = [p for p in home.iterdir() if p.is_dir() and (p / "run.json").exists()]
    base = time.time() - n * 60
    for i in range(n - 1):
        new_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(base + 60 * i)) + f"-{i:04x}"
        target = home / new_id
        shutil.copytree(original, target)
        for f in [target / "run.json", target / "run.json.bak", *target.glob("seeds/*/*.json")]:
            if f.exists():
                f.write_text(f.read_text().replace(original.name, new_id))
    for f in home.glob("index.sqlite*"):
        f.unlink()
    first = run(["runs", "--home", str(home)], cwd, env)[0]
    return original.name, first


def median_line(name: str, times: list[float], target: float, cpu: list[float] | None) -> str:
    med = statistics.median(times)
    ok = "meets" if med <= target else "MISSES"
    spread = ", ".join(f"{t:.2f}" for t in sorted(times))
    used = f", CPU {statistics.median(cpu):.2f} s" if cpu else ""
    return f"{name:<28} median {med:6.2f} s  ({ok} <= {target} s{used})  all: {spread}"


def server_imports(
    python: str, env: dict, repeats: int, cwd: Path
) -> tuple[list[str], float, float]:
    """(the modules the seed server of `python`'s backflip preloads, median wall and CPU seconds
    of importing them in a fresh interpreter): the floor of train's overhead."""
    ask = (  # whatever the code under test preloads: its warm server's, or (older code)
        # multiprocessing's forkserver's
        "import json\n"
        "try:\n    from backflip.launch.warm import PRELOAD\n"
        "except ImportError:\n    from backflip.launch import local; local._context()\n"
        "    from multiprocessing import forkserver\n"
        "    PRELOAD = forkserver._forkserver._preload_modules\n"
        "print(json.dumps(PRELOAD))"
    )
    # run in `cwd`, a folder without backflip in it: `python -c` puts its folder on the path
    out = subprocess.run(
        [python, "-c", ask], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    preload = json.loads(out.stdout)
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = children_cpu(), time.perf_counter()
        subprocess.run([python, "-c", "import " + ", ".join(preload)], env=env, cwd=cwd, check=True)
        walls.append(time.perf_counter() - t0)
        cpus.append(children_cpu() - c0)
    return preload, statistics.median(walls), statistics.median(cpus)


def stop_servers(python: str, env: dict, cwd: Path) -> None:
    """Stop the warm seed servers of `env`'s BACKFLIP_WARM_DIR (older code has none)."""
    code = "from backflip.launch import warm\nfor s in warm.servers():\n    warm.stop(s['address'])"
    subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="runs in the archive (default 200)")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of each command")
    ap.add_argument("--keep", metavar="DIR", help="build the archive here and keep it")
    ap.add_argument(
        "--baseline",
        metavar="PYTHON",
        help="also time the backflip of this interpreter (another checkout's venv), each command "
        "alternating with this one's, so both see the same load",
    )
    args = ap.parse_args()

    work = Path(args.keep or tempfile.mkdtemp(prefix="bf-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "archive"
    (work / "bf_latency_marker.py").write_text(MARKER_MODULE)
    env = dict(os.environ)
    env.pop("BACKFLIP_HOME", None)
    # as installed: Python caches compiled modules (a shell that disables it recompiles every
    # changed module of backflip on every command)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH")]))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {load()}")  # fmt: skip
    pythons = {"this": sys.executable}
    if args.baseline:
        pythons["baseline"] = args.baseline
    for name, python in pythons.items():
        print(f"{name}: {Path(python).parent / 'backflip'}")

    floor = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t0)
    print(f"{'python -c pass (floor)':<28} median {statistics.median(floor):6.2f} s")

    show_id, first = build_archive(home, args.runs, work, env)
    n_runs = sum(1 for p in home.iterdir() if (p / "run.json").exists())
    print(f"archive: {n_runs} runs in {home}; first `backflip runs` (index rebuilt): {first:.2f} s")

    commands = {
        "runs": ["runs", "--home", str(home)],
        "show": ["show", show_id, "--home", str(home)],
        "help": ["--help"],
    }
    timings = {(w, c): [] for w in pythons for c in commands}
    cpu = {(w, c): [] for w in pythons for c in commands}
    for python in pythons.values():  # untimed: caches the compiled modules of every command
        run(["--help"], work, env, str(Path(python).parent / "backflip"))
    for _ in range(args.repeats):  # interleaved: a slow spell of the host hits them all
        for name, cmd in commands.items():
            for who, python in pythons.items():
                wall, _, used = run(cmd, work, env, str(Path(python).parent / "backflip"))
                timings[who, name].append(wall)
                cpu[who, name].append(used)

    overhead = {(w, k): [] for w in pythons for k in ("warm", "new")}
    total = {w: [] for w in pythons}
    for i in range(-1, args.repeats):  # -1: untimed, starts the warm servers
        for who, python in pythons.items():
            for kind in ("new", "warm"):
                mark = work / f"mark-{who}-{kind}-{i}"
                sockets = work / (f"sockets-{who}" if kind == "warm" else f"new-{who}-{i}")
                env_i = {**env, "BF_LATENCY_MARK": str(mark), "BACKFLIP_WARM_DIR": str(sockets)}
                t0 = time.time()
                elapsed, proc, _ = run(
                    ["train", "ppo", "--env", "bf_latency_marker:Marker-v0", "--seeds", "1",
                     "--steps", "256", "--no-ask", "--no-progress", "--json", "--home", str(home)],
                    work, env_i, str(Path(python).parent / "backflip"),
                )  # fmt: skip
                json.loads(proc.stdout)  # the run finished and said so
                if kind == "new":  # its server is not wanted again
                    stop_servers(python, env_i, work)
                if i >= 0:
                    overhead[who, kind].append(float(mark.read_text()) - t0)
                    if kind == "warm":
                        total[who].append(elapsed)
    for who, python in pythons.items():
        stop_servers(python, {**env, "BACKFLIP_WARM_DIR": str(work / f"sockets-{who}")}, work)
    servers = {w: server_imports(python, env, args.repeats, work) for w, python in pythons.items()}

    for who in pythons:
        print(f"--- {who}")
        print(median_line("backflip train: first step", overhead[who, "warm"], 1.5, None))
        print(median_line("  ... starting its server", overhead[who, "new"], 1.5, None))
        preload, wall, used = servers[who]
        print(
            f"{'  imports of the seed server':<28} median {wall:6.2f} s (CPU {used:.2f} s): "
            + ", ".join(preload)
        )
        print(f"{'backflip train: whole run':<28} median {statistics.median(total[who]):6.2f} s "
              "(256 steps, evaluation, doctor)")  # fmt: skip
        print(median_line("backflip runs", timings[who, "runs"], 0.5, cpu[who, "runs"]))
        print(median_line("backflip show ID", timings[who, "show"], 0.5, cpu[who, "show"]))
        print(median_line("backflip --help", timings[who, "help"], 0.5, cpu[who, "help"]))
    print(f"load average after: {load()}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
