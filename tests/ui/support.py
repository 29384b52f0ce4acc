"""Helpers for the UI tests: the real CLI, a `backflip ui` process, screenshot checks."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env

ARTIFACTS = ROOT / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)


@contextlib.contextmanager
def chromium():
    """Debian's headless Chromium driven by Playwright (the test is skipped, with the reason,
    when Playwright is missing)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="browser tests need Playwright: pip install -e '.[test]'"
    )
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def backflip(
    home: Path, *args, timeout: float = 600, check: bool = True, env: dict | None = None, **kwargs
):
    """The real CLI against `home`; `env` adds (or, with None values, removes) variables."""
    full_env = cli_env(home)
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    proc = subprocess.run(
        [sys.executable, "-m", "backflip", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=ROOT,
        **kwargs,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"backflip {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def run_id_of(stdout: str) -> str:
    return stdout.splitlines()[0].split()[1].rstrip(":")


def real_finding(run_dir: Path, rule: str) -> dict:
    """The first finding of `rule` in the findings.json the doctor wrote after training."""
    data = json.loads((run_dir / "findings.json").read_text())
    return next(f for f in data["findings"] if f["rule"] == rule and f["step"] is not None)


def anchor(metric: str) -> str:
    """The element id of a metric's chart (as `backflip.ui.render` makes it)."""
    return "m-" + "".join(c if c.isalnum() or c in "_-" else "-" for c in metric)


class Server:
    def __init__(self, home: Path, *args: str):
        env = cli_env(home)
        env.pop("BACKFLIP_UI_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backflip", "ui", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if "serving" in line or not line:
                break
        m = re.search(r"(http://\S+)", line)
        if not m:
            self.stop()
            raise AssertionError(f"backflip ui did not start: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)
        self.base = re.sub(r"/\?token=.*$", "", self.url).rstrip("/")
        self.token = m.group(1).split("token=")[1] if "token=" in self.url else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def screenshot_ok(path: Path) -> None:
    """A screenshot exists and is not blank: many distinct colours and enough non-white pixels."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    small = img.resize((max(1, img.width // 4), max(1, img.height // 4)))
    colors = small.getcolors(maxcolors=1 << 20) or []
    non_white = sum(n for n, c in colors if sum(c) < 3 * 245)
    assert len(colors) > 20, f"{path.name}: only {len(colors)} colours: blank?"
    assert non_white / (small.width * small.height) > 0.01, f"{path.name}: almost all white"
