"""What code, packages and machine produced a run.

Rahtz spent days establishing that a failing run used the same code as a working one. Every run
records: the git commit, branch, dirty flag and a patch of uncommitted changes (tracked files,
plus the content of untracked ones) of the repository it was launched from; the same for
backflip's own source (or a hash of it when it is not a git checkout); every installed package
version; Python, OS, CPU, and the thread settings that change numerics and speed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import backflip
from backflip.runs.layout import BACKFLIP_PATCH, CODE_PATCH, PACKAGES

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONHASHSEED",
)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(path: Path) -> dict | None:
    """Commit, branch, dirty flag and uncommitted patch of the repo holding `path`, or None."""
    top = _git(path, "rev-parse", "--show-toplevel")
    if not top:
        return None
    top_path = Path(top.strip())
    commit = (_git(top_path, "rev-parse", "HEAD") or "").strip() or None  # None: no commits yet
    branch = (_git(top_path, "rev-parse", "--abbrev-ref", "HEAD") or "").strip() or None
    diff = (
        _git(top_path, "diff", "HEAD", "--binary") if commit else _git(top_path, "diff", "--binary")
    )
    untracked = (_git(top_path, "ls-files", "--others", "--exclude-standard") or "").split()
    patch = diff or ""
    for name in untracked:  # include new files' content so the patch recreates the tree
        f = top_path / name
        if f.is_file() and f.stat().st_size < 1_000_000:
            # exits 1 when the files differ, which they always do here
            r = subprocess.run(
                ["git", "diff", "--no-index", "--binary", "/dev/null", name],
                cwd=top_path,
                capture_output=True,
                text=True,
            )
            patch += r.stdout
    return {
        "root": str(top_path),
        "commit": commit,
        "branch": branch,
        "dirty": bool(patch.strip()),
        "untracked": untracked,
        "patch": patch,
    }


def source_hash() -> str:
    """sha256 over backflip's own .py files (identifies the code when there is no git)."""
    root = Path(backflip.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def packages() -> dict[str, str]:
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name.lower()] = dist.version
    return dict(sorted(out.items()))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def capture(cwd: Path | None = None) -> tuple[dict, dict[str, str]]:
    """(provenance record, {file name: text}) — the patches go to files beside run.json."""
    cwd = Path(cwd or os.getcwd())
    files: dict[str, str] = {}
    record: dict = {}
    user = git_state(cwd)
    bf_root = Path(backflip.__file__).resolve().parent.parent
    own = git_state(bf_root)
    if user:
        files[CODE_PATCH] = user.pop("patch")
        record["git"] = user
    if own and (not user or own["root"] != user["root"]):
        files[BACKFLIP_PATCH] = own.pop("patch")
        record["backflip_git"] = own
    record["backflip"] = {
        "version": backflip.__version__,
        "source_sha256": source_hash(),
        "path": str(bf_root),
    }
    record["python"] = {"version": sys.version.split()[0], "executable": sys.executable}
    record["host"] = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "env": {k: os.environ.get(k) for k in THREAD_VARS},
    }
    pk = packages()
    record["packages"] = {
        k: pk[k] for k in ("torch", "gymnasium", "numpy", "scipy", "backflip") if k in pk
    }
    files[PACKAGES] = "".join(f"{k}=={v}\n" for k, v in pk.items())
    return record, files
