"""The warm seed server: seeds fork from a process that has already imported torch.

A seed needs torch, Gymnasium, SciPy and backflip's training code: 2-6 s of imports on a small
CPU before its first env step, paid again by every command. So the first local run starts a
server (`main`, then `serve`: `_spawn` starts it) that imports them once and listens on a Unix
socket; each seed of this and later commands is a fork of it (`WarmProcess`), ready in
milliseconds. The server exits after `BACKFLIP_WARM_IDLE` seconds (default 600) with no seed
running; `BACKFLIP_WARM=0` gives each command a server of its own that ends with it.

What a seed sees is what the command would have given it:
- **never stale code**: before each fork the server checks that every file it has imported is
  unchanged on disk (size and mtime); if one changed (an edited backflip, an upgraded package) it
  refuses, removes its socket and exits once its seeds end, and the command starts a new one.
  What it has not imported (an env module, an algorithm the seed loads) the seed reads from disk;
- **the command's world**: the seed takes the command's environment variables, working directory
  and `sys.path` before it runs;
- **one server per interpreter and import-time setting**: the socket's name hashes the Python,
  where it finds the preloaded packages (`ORIGINS`: another checkout of backflip is another
  server), Python's flags and the environment variables read when the server imported its
  libraries (`IMPORT_ENV`: thread counts, `PYTHONHASHSEED`, torch's and the BLAS's); at most `MAX_SERVERS` live in the socket folder (`BACKFLIP_WARM_DIR`, default a private folder
  under `$XDG_RUNTIME_DIR` or the temp folder): a new one asks the least recently used to exit.

Protocol, one connection per request: the client sends one byte with the file descriptor the seed
reports on (SCM_RIGHTS), then a length-prefixed pickle {"kind": "seed", ...} | {"kind": "stop"} |
{"kind": "ping"}; the server answers with pickles: {"pid": n} when the seed is forked (or
{"refused": why}), then {"exitcode": n} when it ends (negative: killed by that signal).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from backflip.errors import UserError
from backflip.runs.archive import pid_alive

# What the server imports before it listens: torch (imported by every seed), the seed's own code
# (the seed run, the live doctor, the spine, the commonest algorithm) and what their first use
# imports (torch._dynamo by the first optimizer, scipy.stats by the live doctor's rules).
PRELOAD = [
    "torch",
    "torch._dynamo",
    "gymnasium",
    "scipy.stats",
    "backflip.launch.seed",
    "backflip.launch.local",
    "backflip.algos.ppo",
]
# environment variables whose value at import time can change what the server's imports did
# (the seed takes the command's whole environment, but after those imports)
IMPORT_ENV = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO", "TORCH", "PYTORCH", "CUDA")
IMPORT_ENV += ("NVIDIA", "LD_", "GYM", "NUMPY", "SCIPY", "BACKFLIP_WARM_IDLE", "CUBLAS", "XLA")
# ... but for these: the seed's own `sys.path` is the command's, and ORIGINS checks what the
# server's imports found
NOT_IMPORT_ENV = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
ORIGINS = ("backflip", "torch", "gymnasium", "scipy", "numpy")
MAX_SERVERS = 3
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
START_TIMEOUT_S = 300.0  # torch's import on a loaded 2-core machine: seconds, not minutes
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    """Whether servers outlive their command (`BACKFLIP_WARM=0`: each command has its own)."""
    return os.environ.get("BACKFLIP_WARM", "1").strip().lower() not in ("0", "no", "false", "off")


def idle_seconds() -> float:
    text = os.environ.get("BACKFLIP_WARM_IDLE", "600")
    try:
        return float(text)
    except ValueError:
        raise UserError(f"BACKFLIP_WARM_IDLE must be a number of seconds, got {text!r}") from None


def folder() -> Path:
    """The socket folder: private to this user (mode 0700), like an ssh-agent's; a long one is
    replaced by a short folder named after it in the temp folder."""
    base = os.environ.get("BACKFLIP_WARM_DIR")
    if base:
        path = Path(base)
    else:
        root = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        path = Path(root) / f"backflip-warm-{os.getuid()}"
    if len(str(path)) > 60:  # a socket's path has ~100 bytes (AF_UNIX): a short alias
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"backflip-warm-{os.getuid()}-{digest}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise UserError(
            f"{path} (the warm seed servers' sockets) must belong to this user alone, mode 0700: "
            "fix it, or set BACKFLIP_WARM_DIR to another folder"
        )
    return path


def origins() -> list[str]:
    """Where this command's Python finds the packages the server preloads (found, not imported:
    torch's import is what the server is for). A server started with another `sys.path` that
    finds them elsewhere (another checkout of backflip) is another server."""
    import importlib.util

    out = []
    for name in ORIGINS:
        spec = importlib.util.find_spec(name)
        out.append(str(spec.origin) if spec is not None else "")
    return out


def identity() -> str:
    """What a server must share with a command to fork its seeds (see the module's docstring)."""
    env = sorted(
        (k, v)
        for k, v in os.environ.items()
        if k.startswith(IMPORT_ENV) and k not in NOT_IMPORT_ENV
    )
    parts = [sys.executable, repr(origins()), repr(sys.flags), repr(env)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


# --- the client: the launcher's side -----------------------------------------------------------


def _send(sock: socket.socket, msg: dict) -> None:
    data = pickle.dumps(msg)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv(sock: socket.socket) -> dict | None:
    """One message, or None at the end of the stream."""
    head = _read_exact(sock, _HEADER.size)
    if head is None:
        return None
    data = _read_exact(sock, _HEADER.unpack(head)[0])
    return None if data is None else pickle.loads(data)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class Server:
    """A server as the launcher knows it: where it listens, and the pid of its process while it
    may still be importing (`wait_ready`)."""

    def __init__(self, address: str, pid: int | None = None, proc=None):
        self.address, self.pid, self.proc = address, pid, proc
        self.ready, self.announce = pid is None, False

    def connect(self, timeout: float | None = None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.address)
        except OSError:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    def wait_ready(self) -> None:
        """Until the server accepts connections (it binds its socket once its imports are done)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready:
            try:
                self.connect(timeout=5).close()
                self.ready = True
                return
            except OSError:
                pass
            gone = self.proc.poll() is not None if self.proc else not pid_alive(self.pid)
            if gone:
                log = Path(self.address).with_suffix(".log")
                tail = log.read_text()[-3000:] if log.exists() else "(no log)"
                raise RuntimeError(f"the warm seed server ended at start; its log:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm seed server did not start in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.02)


_current: Server | None = None


def ensure() -> Server:
    """The server this command's seeds fork from: a running one of the same identity, or one
    started now without waiting for it (its imports then overlap the launcher's own work; the
    first `WarmProcess` waits)."""
    global _current
    if _current is not None and _current.proc is not None:
        _current.proc.poll()  # a server this process started that has exited: reaped
    where, ident = folder(), identity()
    private = not enabled()
    name = f"private-{os.getpid()}-{ident}" if private else f"warm-{ident}"
    address = str(where / f"{name}.sock")
    if _current is not None and _current.address == address and not _current.ready:
        starting = _current.proc.poll() is None if _current.proc else pid_alive(_current.pid)
        if starting:
            return _current
        _current = None  # one that ended before it was ready (an earlier launch that failed)
    with open(where / f"{name}.lock", "w") as lock:  # one start at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _alive(address):
            with contextlib.suppress(OSError):
                os.utime(address)  # recently used: not the one asked to go
            _current = Server(address)
            return _current
        pidfile = where / f"{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text())
            if pid_alive(pid):  # another command started it; it is still importing
                _current = Server(address, pid)
                return _current
        if not private:
            _retire_extra(where, keep=MAX_SERVERS - 1)
        proc = _spawn(address, idle=0.0 if private else idle_seconds(), private=private)
        pidfile.write_text(str(proc.pid))
        _current = Server(address, proc.pid, proc)
        _current.announce = not private  # said with its first seed (not before an error line)
    return _current


def _alive(address: str) -> bool:
    """Whether a server answers on `address` (a socket left by a dead one is removed)."""
    if not os.path.exists(address):
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(address)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(address)
        return False
    finally:
        sock.close()


def _spawn(address: str, idle: float, private: bool) -> subprocess.Popen:
    """Start a server in its own session (a Ctrl-C at the terminal is the launcher's to handle),
    with this command's `sys.path`, its output in a log beside its socket."""
    path = [_absolute(p) for p in sys.path]
    code = f"import sys; sys.path[:] = {path!r}; from backflip.launch.warm import main; main()"
    args = [address, str(idle), repr(origins()), str(os.getpid() if private else 0)]
    log_path = Path(address).with_suffix(".log")
    with contextlib.suppress(OSError):  # a new file, not the old one truncated: a server this
        log_path.unlink()  # one replaces (same name, code changed) tidies only its own (`tidy`)
    log = open(log_path, "w")
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd="/",  # holds no folder of the command's (a test's temporary folder)
        )
    finally:
        log.close()


def _absolute(entry: str) -> str:
    """A `sys.path` entry for a process in another folder: relative folders made absolute ('' is
    the current one); other entries (an editable install's path hook) as they are."""
    if entry == "":
        return os.getcwd()
    return os.path.abspath(entry) if os.path.isdir(entry) else entry


def _retire_extra(where: Path, keep: int) -> None:
    """Ask the least recently used servers to exit (once their seeds end) beyond `keep`."""
    socks = sorted(where.glob("warm-*.sock"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in socks[keep:]:
        stop(str(path))


def stop(address: str) -> bool:
    """Ask a server to stop taking seeds and exit when those it has end; whether one answered."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(address)
        sock.sendall(b"\0")
        _send(sock, {"kind": "stop"})
        _recv(sock)
        sock.close()
        return True
    except OSError:
        return False


def servers() -> list[dict]:
    """Every server in the socket folder that answers: its pid, seeds running, Python."""
    out = []
    for path in sorted(folder().glob("*.sock")):
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(str(path))
            sock.sendall(b"\0")
            _send(sock, {"kind": "ping"})
            info = _recv(sock)
            sock.close()
        except OSError:
            continue
        if info:
            out.append({"address": str(path), **info})
    return out


class WarmProcess:
    """One seed forked by the server: the launcher's handle, shaped like multiprocessing's
    Process (`pid`, `is_alive`, `join`, `exitcode`). `conn_fd` is the write end of the pipe the
    seed reports on; `target(job, conn)` runs in the fork (a module-level function)."""

    def __init__(self, server: Server, target, job, conn_fd: int):
        self.exitcode: int | None = None
        self.pid, self._sock, self._gone = None, None, False
        self._polling = False  # a poll under way (a signal handler may poll inside it)
        request = {
            "kind": "seed",
            "target": (target.__module__, target.__qualname__),
            "job": job,
            "environ": dict(os.environ),
            "cwd": os.getcwd(),
            "sys_path": list(sys.path),
        }
        for attempt in range(2):
            try:
                server.wait_ready()
                sock = server.connect()
            except OSError as e:  # the server went between `ensure` and now
                reply = {"refused": f"{type(e).__name__}: {e}"}
            else:
                try:
                    socket.send_fds(sock, [b"\0"], [conn_fd])
                    _send(sock, request)
                    reply = _recv(sock)
                except OSError:
                    reply = None
                if reply is not None and "pid" in reply:
                    self.pid, self._sock = reply["pid"], sock
                    if server.announce:
                        server.announce = False
                        print(
                            f"started a warm seed server (pid {server.pid}): later runs skip "
                            f"torch's import; it exits after {idle_seconds():.0f} s without "
                            "seeds (backflip server --stop; BACKFLIP_WARM=0: off)",
                            file=sys.stderr,
                            flush=True,
                        )
                    return
                sock.close()
            why = (reply or {}).get("refused", "the server closed the connection")
            if attempt:
                raise RuntimeError(f"the warm seed server would not start a seed: {why}")
            server = ensure()  # stale code, or a server that died: a new one, once

    def _poll(self, timeout: float) -> None:
        """Take the exit code if the server sent it within `timeout` seconds. If the server is
        gone (killed), the seed is followed by its pid: alive while it exists (its exit code is
        then unknown; its status.json has its outcome). A poll inside a poll — Ctrl-C's handler
        asking `is_alive` while the launcher's loop reads or closes the socket — returns at once:
        the outer one finishes the read (the CI once saw the inner one select on the socket
        being closed)."""
        if self.exitcode is not None or self._gone or self._polling:
            return
        self._polling = True
        try:
            self._poll_once(timeout)
        finally:
            self._polling = False

    def _poll_once(self, timeout: float) -> None:
        if self._sock is None:
            if not pid_alive(self.pid):
                self._gone = True
            else:
                time.sleep(min(timeout, 0.2))
            return
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return
        sock = self._sock
        sock.settimeout(10)
        try:
            msg = _recv(sock)
        except OSError:
            msg = None
        if msg is not None and "exitcode" in msg:
            self.exitcode = msg["exitcode"]
        self._sock = None
        sock.close()

    def is_alive(self) -> bool:
        self._poll(0.0)
        return self.exitcode is None and not self._gone

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive():
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return
            self._poll(min(left, 1.0))


# --- the server ----------------------------------------------------------------------------


def _snapshot(seen: dict[str, tuple[int, int] | None]) -> str | None:
    """Record the files of modules imported since the last call; the first recorded file that
    changed on disk since, or None."""
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or path in seen:
            continue
        try:
            st = os.stat(path)
            seen[path] = (st.st_mtime_ns, st.st_size)
        except OSError:
            seen[path] = None
    for path, was in seen.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = None
        if now != was:
            return path
    return None


def serve(address: str, idle: float, owner: int = 0) -> None:
    """Import PRELOAD, listen on `address`, fork a seed per request; exit after `idle` seconds
    without a seed, or (`owner`, a private server's command) once that process is gone and its
    seeds have ended."""
    if _alive(address):  # another command's server won the start
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):
        os.unlink(address)
    listener.bind(address)
    listener.listen(64)
    inode = os.stat(address).st_ino
    pidfile = Path(address).with_suffix(".pid")

    def forget_pidfile() -> None:  # the pid file marks a server still importing
        with contextlib.suppress(OSError, ValueError):
            if int(pidfile.read_text()) == os.getpid():
                pidfile.unlink()

    forget_pidfile()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "listen")
    children: dict[int, tuple[socket.socket, int | None]] = {}  # pid -> (client, pidfd)
    seen: dict[str, tuple[int, int] | None] = {}
    _snapshot(seen)
    accepting, last = True, time.monotonic()

    def retire() -> None:  # take no more seeds; remove the socket if it is still ours
        nonlocal accepting
        if accepting:
            accepting = False
            sel.unregister(listener)
            listener.close()
            forget_pidfile()
            with contextlib.suppress(OSError):
                if os.stat(address).st_ino == inode:
                    os.unlink(address)

    while accepting or children:
        if owner and not pid_alive(owner):
            retire()
        if accepting and not children and idle > 0 and time.monotonic() - last > idle:
            retire()
        polling = 0.2 if children and not hasattr(os, "pidfd_open") else 1.0
        for key, _ in sel.select(timeout=polling) if accepting or children else []:
            if key.data == "listen" and accepting:
                with contextlib.suppress(OSError):
                    client, _ = listener.accept()
                    _handle(client, seen, children, sel, retire)
        for pid in list(children):  # seeds that ended: their exit codes to their commands
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                client, pidfd = children.pop(pid)
                if pidfd is not None:
                    sel.unregister(pidfd)
                    os.close(pidfd)
                with contextlib.suppress(OSError):
                    _send(client, {"exitcode": os.waitstatus_to_exitcode(status)})
                client.close()
                last = time.monotonic()
    sel.close()
    tidy(address, private=bool(owner))


def tidy(address: str, private: bool) -> None:
    """What a server leaves in the socket folder when it exits: nothing of a private one (its
    command's: `BACKFLIP_WARM=0` would leave a lock and a log per command), and of a shared one
    its log when nothing was written to it (its lock serializes the next start: kept). Only its
    own log: a server that replaced it under the same name (code changed) has a new one, still
    empty while it imports."""
    base, own_log = Path(address), None
    with contextlib.suppress(OSError, ValueError):
        own_log = os.fstat(sys.stderr.fileno()).st_ino  # the server writes to its log
    for suffix in (".log", ".lock") if private else (".log",):
        path = base.with_suffix(suffix)
        with contextlib.suppress(OSError):
            if suffix == ".log" and path.stat().st_ino != own_log:
                continue
            if private or path.stat().st_size == 0:
                path.unlink()


def _handle(client, seen, children, sel, retire) -> None:
    """One request (see the module's docstring)."""
    client.settimeout(10)  # a client that stops talking does not hold the server
    fd = None
    try:
        _, fds, _, _ = socket.recv_fds(client, 1, 1)
        fd = fds[0] if fds else None
        msg = _recv(client) or {}
        kind = msg.get("kind")
        if kind == "seed" and fd is not None:
            changed = _snapshot(seen)
            if changed is not None:
                retire()
                _send(client, {"refused": f"{changed} changed since the server imported it"})
                return
            client.settimeout(None)
            # the seed is born with stop requests blocked, and unblocks them once its handler
            # is in place (`seed.run_seed`): a SIGTERM right after the fork is delivered late,
            # not fatal (it ended seeds `failed: killed by SIGTERM`)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            pid = os.fork()
            if pid == 0:
                _child_main(msg, fd, sel, client)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            pidfd = None
            if hasattr(os, "pidfd_open"):
                pidfd = os.pidfd_open(pid)
                sel.register(pidfd, selectors.EVENT_READ, "seed")
            children[pid] = (client, pidfd)
            client = None  # kept open: the seed's exit code goes back on it
            _send(children[pid][0], {"pid": pid})
        elif kind == "ping":
            _send(client, {"pid": os.getpid(), "seeds": len(children), "python": sys.executable})
        elif kind == "stop":
            retire()
            _send(client, {"stopping": True, "seeds": len(children)})
    except (OSError, pickle.UnpicklingError, EOFError):
        pass
    finally:
        if fd is not None:
            os.close(fd)
        if client is not None:
            client.close()


def _child_main(msg: dict, fd: int, sel, client) -> None:
    """In the forked seed: drop the server's sockets, take the command's world, run the target."""
    code = 1
    try:
        for key in list(sel.get_map().values()):  # the listener, other seeds' pidfds
            with contextlib.suppress(OSError):
                os.close(key.fd)
        sel.close()
        client.close()
        os.environ.clear()
        os.environ.update(msg["environ"])
        os.chdir(msg["cwd"])
        sys.path[:] = msg["sys_path"]
        from multiprocessing.connection import Connection

        module, name = msg["target"]
        target = getattr(sys.modules[module], name)
        target(msg["job"], Connection(fd, readable=False))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 — as multiprocessing's Process: printed, exit code 1
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main() -> None:
    """`python -c ... main() ADDRESS IDLE ORIGINS OWNER` (see `_spawn`): import, check, serve."""
    import ast
    import importlib

    address, idle, expected, owner = sys.argv[1:5]
    for name in PRELOAD:
        importlib.import_module(name)
    if origins() != ast.literal_eval(expected):  # never serve other code than the command's
        sys.exit(f"the server found other packages than its command: {origins()} != {expected}")
    serve(address, float(idle), int(owner))
