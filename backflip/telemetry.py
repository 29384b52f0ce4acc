"""Telemetry: cheap accumulation in hot loops, one reduction and one write per metrics row.

Two verbs, as in Spinning Up's logger:

    tel.store(policy_loss=loss.detach())   # inside minibatch loops: appends, no conversion
    tel.dump(step)                         # when a row is due: reduce, write, clear

`store` keeps tensors as they are; `dump` stacks each key once and converts once, so a hot loop
never pays for `.item()`. A key that gathers `REDUCE_AT` values before a row is due (a long
`log_every`) is reduced to a running sum, count and maximum, so memory stays bounded: holding
tens of thousands of small tensors until the end made PPO markedly slower. Every row goes to two sinks:

- `metrics.csv`, a long table (`step, wall, name, value`) that tolerates metrics which appear
  only sometimes (evaluation) and is readable after a crash up to the last flushed row;
- a TensorBoard event file (one `Event` per dump carrying every scalar), written in the calling
  thread and handed to the OS with each row, like the CSV (`EventFile`).

Names follow `group/name` (see docs/metrics.md): rollout/, env/, train/, eval/, time/, sys/.
`episodes.csv` keeps every finished episode (step, return, length) for exact learning curves.
"""

from __future__ import annotations

import collections
import csv
import io
import itertools
import math
import os
import resource
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import numpy as np
import psutil

from backflip.runs.layout import EPISODES, METRICS, TENSORBOARD, TRUE_EPISODES

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0  # /proc/self/statm's unit
REDUCE_AT = 256  # values stored per key before they are folded into a running (sum, count, max)


def _to_floats(lists: list[list]) -> list[np.ndarray]:
    """Each list of stored values as a float array. The tensors among all of them (PPO stores
    ~25 per key between rows, for 6 keys) go through one stack and one conversion."""
    tensor_lists = [values for values in lists if hasattr(values[0], "detach")]
    chunks = iter(())
    if tensor_lists:
        import torch  # readers of the archive import this module without torch

        tensors = [v for values in tensor_lists for v in values]
        with torch.no_grad():
            try:  # the usual 0-d tensors of one dtype: one kernel
                stacked = torch.stack(tensors)
            except RuntimeError:  # mixed shapes or dtypes, e.g. () and (1,)
                stacked = torch.stack([v.reshape(()).double() for v in tensors])
        ends = np.cumsum([len(values) for values in tensor_lists])[:-1]
        chunks = iter(np.split(stacked.reshape(-1).double().cpu().numpy(), ends))
    return [
        next(chunks) if hasattr(values[0], "detach") else np.asarray(values, np.float64)
        for values in lists
    ]


def _open_statm() -> int | None:
    """A descriptor on this process's /proc/self/statm (Linux), or None: see `Telemetry.rss`."""
    try:
        return os.open("/proc/self/statm", os.O_RDONLY) if PAGE_SIZE else None
    except OSError:
        return None


def _masked_crc(data: bytes) -> int:
    """A TFRecord's masked CRC-32C, in C (TensorBoard's own is pure Python, slow per row)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class AppendFile:
    """A file that only grows by whole records: what `add` gets is written by `write` in one
    go, and if that fails (a full disk) the file is cut back to its last whole record and the
    error raised, so a reader never sees half a row. Unbuffered: `write` is one `os.write`
    (rarely more), as a 64 KiB buffer flushed once per row was."""

    def __init__(self, path: Path, append: bool = False):
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        self.fd = os.open(path, flags, 0o644)
        self.good = os.lseek(self.fd, 0, os.SEEK_END)  # bytes of whole records
        self._pending: list[bytes] = []

    def add(self, data: bytes) -> None:
        self._pending.append(data)

    def write(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            os.ftruncate(self.fd, self.good)  # drop the torn tail (O_APPEND: writes go on here)
            raise
        self.good += len(data)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.write()
            finally:
                os.close(self.fd)
                self.fd = -1


def _csv_bytes(rows) -> bytes:
    """Rows as CSV (the csv module's quoting and \r\n line ends), encoded."""
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue().encode()


class EventFile:
    """A TensorBoard event file written synchronously, one record per `add`.

    TensorBoard's own EventFileWriter hands each event to a thread of its own, and waking it
    once per row cost PPO more than the thread's own work: the GIL changing hands while the loop
    calls torch (`benchmarks/telemetry_overhead.py`, docs/benchmarks.md). Each event
    is one TFRecord (length, masked CRC-32C of the length, data, masked CRC-32C of the data:
    the bytes TensorBoard's RecordWriter writes, with the CRC in C), and each row reaches the OS
    at once, so a killed process keeps its TensorBoard rows too.
    """

    _uid = itertools.count()  # two files opened in the same second by one process stay apart

    def __init__(self, folder: Path):
        # TensorBoard's protobuf classes: only where an event file is written, not for readers
        from tensorboard.compat.proto.event_pb2 import Event

        folder.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(self._uid)}"
        )
        self._file = AppendFile(folder / name)
        self.add(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crcs = struct.pack("<I", _masked_crc(header)), struct.pack("<I", _masked_crc(data))
        self._file.add(b"".join((header, crcs[0], data, crcs[1])))

    def flush(self) -> None:
        self._file.write()

    def close(self) -> None:
        self._file.close()


class Timer:
    """`with tel.timer("update"):` adds the elapsed seconds to `time/update_s` of this row."""

    __slots__ = ("name", "sink", "t0")

    def __init__(self, name: str, sink: dict):
        self.name, self.sink = name, sink

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        key = f"time/{self.name}_s"
        self.sink[key] = self.sink.get(key, 0.0) + time.perf_counter() - self.t0


def cpu_seconds() -> float:
    """CPU time of this process and of its children it has waited for (a pipelined preference
    round's forked process, env worker processes): the seed's compute, wherever it ran."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Telemetry:
    """Metrics writer for one seed. With `out_dir=None` it keeps rows in memory only."""

    def __init__(
        self,
        out_dir: str | Path | None,
        enabled: bool = True,
        tensorboard: bool = True,
        episode_window: int = 20,
        on_row: Callable[[int, dict], None] | None = None,
        append: bool = False,
    ):
        self.enabled = enabled
        self.on_row = on_row
        self._stored: dict[str, list] = collections.defaultdict(list)
        self._partial: dict[str, list[float]] = {}  # key -> [sum, count, max] of folded values
        self._max_keys: set[str] = set()  # stored keys reduced by max, not mean
        self._scalars: dict[str, float] = {}
        self._timers: dict[str, float] = {}
        self._statm, self._statm_pid = _open_statm(), os.getpid()  # see `rss`
        self._proc = psutil.Process()
        self._t_start = self._t_last = time.perf_counter()
        self._cpu_last = cpu_seconds()
        self._step_last = 0
        self.episodes: collections.deque = collections.deque(maxlen=episode_window)
        self.n_episodes = 0
        self.last_row: dict[str, float] = {}
        self.last_row_step = 0  # step of the last row written
        self.rows_written = 0
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._csv = self._episodes_csv = self._tb = None
        self._true_csv: AppendFile | None = None  # a preference run's, at its first episode
        self._append = append
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            # whole rows only, even on a full disk (AppendFile)
            self._csv = AppendFile(self.out_dir / METRICS, append)
            if self._csv.good == 0:
                self._csv.add(b"step,wall,name,value\r\n")
            self._episodes_csv = AppendFile(self.out_dir / EPISODES, append)
            if self._episodes_csv.good == 0:
                self._episodes_csv.add(b"step,return,length\r\n")
            if tensorboard and enabled:
                self._tb = EventFile(self.out_dir / TENSORBOARD)
        self._last_flush = time.monotonic()

    # -- accumulation ------------------------------------------------------------------------

    def store(self, **values) -> None:
        """Append values (floats or 0-d tensors); `dump` reports their mean."""
        if self.enabled:
            for k, v in values.items():
                stored = self._stored[k]
                stored.append(v)
                if len(stored) >= REDUCE_AT:
                    self._fold(k)

    def _fold(self, key: str, a: np.ndarray | None = None) -> None:
        """Fold the values stored under `key` (or `a`, them as floats) into its (sum, count, max)."""
        a = _to_floats([self._stored[key]])[0] if a is None else a
        acc = self._partial.setdefault(key, [0.0, 0, -math.inf])
        acc[0] += float(a.sum())
        acc[1] += len(a)
        acc[2] = max(acc[2], float(a.max()))
        self._stored[key].clear()

    def extend(self, **values) -> None:
        """`store` a sequence of values per key at once."""
        if self.enabled:
            for k, v in values.items():
                stored = self._stored[k]
                stored.extend(v)
                if len(stored) >= REDUCE_AT:
                    self._fold(k)

    def store_max(self, **values) -> None:
        """As `store`, but `dump` reports the largest value (a spike must not be averaged away)."""
        self.store(**values)
        if self.enabled:
            self._max_keys.update(values)

    def pending(self) -> bool:
        """Whether values were stored or set since the last row."""
        return any(self._stored.values()) or bool(self._partial) or bool(self._scalars)

    def log(self, **values) -> None:
        """Set scalars for this row directly (last value wins): floats, or 0-d tensors, which
        `dump` converts together with the stored values (no `.item()` round-trip each)."""
        if self.enabled:
            self._scalars.update(values)

    def log_stats(self, prefix: str, values, minmax: bool = True) -> None:
        """`prefix_mean`, `prefix_std` (and `_min`, `_max`) of an array of values."""
        if not self.enabled or len(values) == 0:
            return
        a = np.asarray(values, dtype=np.float64)
        self._scalars[f"{prefix}_mean"] = float(a.mean())
        self._scalars[f"{prefix}_std"] = float(a.std())
        if minmax:
            self._scalars[f"{prefix}_min"] = float(a.min())
            self._scalars[f"{prefix}_max"] = float(a.max())

    def timer(self, name: str) -> Timer:
        return Timer(name, self._timers)

    def episode(self, step: int, ret: float, length: int) -> None:
        """Record one finished episode (always, even with telemetry off: it is the result)."""
        self.episodes.append((ret, length))
        self.n_episodes += 1
        if self._episodes_csv is not None:  # written with the next metrics row
            self._episodes_csv.add(f"{step},{float(ret)!r},{int(length)}\r\n".encode())

    def true_episode(self, step: int, ret: float, length: int) -> None:
        """Record one finished training episode's return on the task's reward, where the
        algorithm trains on another (a preference run: `episodes.csv` holds r̂ there)."""
        if self.out_dir is None:
            return
        if self._true_csv is None:
            self._true_csv = AppendFile(self.out_dir / TRUE_EPISODES, self._append)
            if self._true_csv.good == 0:
                self._true_csv.add(b"step,return,length\r\n")
        self._true_csv.add(f"{step},{float(ret)!r},{int(length)}\r\n".encode())

    # -- resume ------------------------------------------------------------------------------

    def state(self) -> dict:
        """What a checkpoint needs to continue the rows exactly (rolling episode window, wall)."""
        return {
            "episodes": list(self.episodes),
            "n_episodes": self.n_episodes,
            "wall_s": time.perf_counter() - self._t_start,
            # values stored since the last row (algorithms that write a row every few iterations)
            "stored": {k: list(v) for k, v in self._stored.items()},
            "partial": {k: list(v) for k, v in self._partial.items()},
            "max_keys": sorted(self._max_keys),
            "scalars": dict(self._scalars),
        }

    def restore(self, state: dict | None, step: int, rows_until: int | None = None) -> None:
        """Continue after a checkpoint at `step` (`backflip resume`): the episode window, the
        wall clock and the steps/s baseline carry on; TensorBoard drops its events after
        `rows_until` (default `step`; a SessionLog START at rows_until + 1 makes it purge the
        orphaned steps >= rows_until + 1)."""
        rows_until = step if rows_until is None else rows_until
        if state:
            self.episodes.extend(state["episodes"])
            self.n_episodes = state["n_episodes"]
            self._t_start -= state.get("wall_s", 0.0)
            for k, values in state.get("stored", {}).items():
                self._stored[k].extend(values)
            self._partial.update({k: list(v) for k, v in state.get("partial", {}).items()})
            self._max_keys.update(state.get("max_keys", []))
            self._scalars.update(state.get("scalars", {}))
        self._step_last = step
        self.last_row_step = rows_until
        if self._tb is not None:
            from tensorboard.compat.proto.event_pb2 import Event, SessionLog

            self._tb.add(
                Event(
                    wall_time=time.time(),
                    step=rows_until + 1,
                    session_log=SessionLog(status=SessionLog.START),
                )
            )

    # -- reduction ---------------------------------------------------------------------------

    def dump(self, step: int) -> dict[str, float]:
        """Reduce everything stored since the last dump into one row and write it."""
        now = time.perf_counter()
        row: dict[str, float] = {}
        if self.enabled:
            # every tensor stored or logged since the last row: one stack, one conversion
            keys = [k for k, values in self._stored.items() if values]
            logged = [k for k, v in self._scalars.items() if hasattr(v, "detach")]
            arrays = _to_floats(
                [self._stored[k] for k in keys] + [[self._scalars[k]] for k in logged]
            )
            for k, a in zip(keys, arrays, strict=False):
                if k not in self._partial:  # the usual case: one row's values, reduced at once
                    row[k] = float(a.max() if k in self._max_keys else a.mean())
                else:
                    self._fold(k, a)
            for k, (total, count, largest) in self._partial.items():
                row[k] = largest if k in self._max_keys else total / count
            converted = {k: float(a[0]) for k, a in zip(logged, arrays[len(keys) :], strict=True)}
            row.update(
                {k: converted[k] if k in converted else float(v) for k, v in self._scalars.items()}
            )
            if self.episodes:
                rets = np.array([e[0] for e in self.episodes])
                lens = np.array([e[1] for e in self.episodes])
                row.update(
                    {
                        "rollout/ep_return_mean": float(rets.mean()),
                        "rollout/ep_return_std": float(rets.std()),
                        "rollout/ep_return_min": float(rets.min()),
                        "rollout/ep_return_max": float(rets.max()),
                        "rollout/ep_len_mean": float(lens.mean()),
                        "rollout/ep_len_min": float(lens.min()),
                        "rollout/ep_len_max": float(lens.max()),
                        "rollout/episodes": float(self.n_episodes),
                    }
                )
            row.update(self._timers)
            row["sys/rss_mb"] = self.rss() / 2**20
            row["sys/load_avg"] = os.getloadavg()[0]
        dt = now - self._t_last
        row["time/sps"] = (step - self._step_last) / dt if dt > 0 else 0.0
        # Steps per second of the seed's own CPU time: unlike `time/sps` it does not fall when
        # other processes compete for the CPU, so a decline means growing work per step.
        cpu = cpu_seconds()
        dcpu = cpu - self._cpu_last
        row["time/sps_cpu"] = (step - self._step_last) / dcpu if dcpu > 0 else 0.0
        self._cpu_last = cpu
        row["time/wall_s"] = now - self._t_start
        self._stored.clear()
        self._partial.clear()
        self._scalars.clear()
        self._timers.clear()
        self._t_last, self._step_last = now, step
        self.last_row_step = step
        self._write(step, row)
        # what reducing and writing this row cost, reported in the next row (docs/metrics.md)
        self._timers["time/log_s"] = time.perf_counter() - now
        self.last_row = row
        if self.on_row is not None:
            self.on_row(step, row)
        return row

    def _write(self, step: int, row: dict[str, float]) -> None:
        if self._csv is None:
            return
        wall = time.time()
        wall_str = f"{wall:.3f}"
        self._csv.add(_csv_bytes([step, wall_str, k, repr(v)] for k, v in row.items()))
        self.rows_written += 1
        if self._tb is not None:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary

            values = [
                Summary.Value(tag=k, simple_value=v) for k, v in row.items() if math.isfinite(v)
            ]
            self._tb.add(Event(wall_time=wall, step=step, summary=Summary(value=values)))
            self._tb.flush()
        # hand every row to the OS at once (survives the process being killed); fsync now and then
        self._csv.write()
        self._episodes_csv.write()
        if self._true_csv is not None:
            self._true_csv.write()
        if time.monotonic() - self._last_flush > 5.0:
            self.flush()

    def flush(self) -> None:
        if self._csv is None:
            return
        self._csv.write()
        self._episodes_csv.write()
        if self._true_csv is not None:
            self._true_csv.write()
        self._csv.fsync()
        if self._tb is not None:
            self._tb.flush()
        self._last_flush = time.monotonic()

    def rss(self) -> int:
        """This process's resident set size in bytes: on Linux one `pread` of /proc/self/statm
        (psutil's call costs many times more between two PPO rows than in a tight loop), psutil
        elsewhere or in a forked child (the descriptor would read its parent)."""
        if self._statm is not None and os.getpid() == self._statm_pid:
            return int(os.pread(self._statm, 64, 0).split()[1]) * PAGE_SIZE
        return self._proc.memory_info().rss

    def close(self) -> None:
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
        if self._csv is None:
            return
        files = [
            f for f in (self._csv, self._episodes_csv, self._true_csv, self._tb) if f is not None
        ]
        self._csv = None
        try:
            for f in files:  # metrics first: a row with its episodes
                f.write() if isinstance(f, AppendFile) else f.flush()
        finally:  # every descriptor is closed, even when the disk is full
            for f in files:
                try:
                    f.close()
                except OSError:
                    pass


# --- reading back -----------------------------------------------------------------------------


def read_metrics(path: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`metrics.csv` -> {name: (steps, values)}; a truncated last line (crash) is skipped."""
    series: dict[str, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        for rec in reader:
            if len(rec) != 4:
                continue
            try:
                step, value = int(rec[0]), float(rec[3])
            except ValueError:
                continue
            s, v = series[rec[2]]
            s.append(step)
            v.append(value)
    return {k: (np.asarray(s), np.asarray(v)) for k, (s, v) in series.items()}


def read_episodes(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`episodes.csv` -> (steps, returns, lengths)."""
    steps, rets, lens = [], [], []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        for rec in reader:
            try:
                steps.append(int(rec[0]))
                rets.append(float(rec[1]))
                lens.append(int(rec[2]))
            except (ValueError, IndexError):
                continue
    return np.asarray(steps), np.asarray(rets), np.asarray(lens)


def truncate_logs(folder: str | Path, step: int, rows_until: int | None = None) -> None:
    """Drop rows after `step` from a seed's metrics.csv and episodes.csv (before resuming from a
    checkpoint at `step`: what was logged after it will be logged again). Atomic per file.

    `rows_until` (default `step`) keeps fewer metric rows: an interrupted seed flushes what it
    stored since its last regular row as one extra row, which its checkpoint keeps un-flushed;
    the resumed seed writes that row again on its regular schedule."""
    limits = {
        METRICS: step if rows_until is None else rows_until,
        EPISODES: step,
        TRUE_EPISODES: step,
    }
    for name, limit in limits.items():
        path = Path(folder) / name
        if not path.exists():
            continue
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        kept = rows[:1] + [r for r in rows[1:] if _step_of(r) is not None and _step_of(r) <= limit]
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w", newline="") as f:
                csv.writer(f).writerows(kept)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def last_logged(folder: str | Path, tail_bytes: int = 1 << 16) -> tuple[int, float | None]:
    """(step, wall time) of the last complete row of a seed's metrics.csv, read from its tail;
    (0, None) when it has none (how far a seed that was killed got)."""
    path = Path(folder) / METRICS
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return 0, None
    for line in reversed(lines[1:] if len(lines) > 1 else lines):
        rec = line.split(",")
        if len(rec) == 4 and _step_of(rec) is not None:
            try:
                return int(rec[0]), float(rec[1])
            except ValueError:
                continue
    return 0, None


def _step_of(rec: list[str]) -> int | None:
    """The step of a complete row, or None for a truncated one (a crash mid-write)."""
    try:
        return int(rec[0]) if len(rec) in (3, 4) else None
    except (ValueError, IndexError):
        return None
