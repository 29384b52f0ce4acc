"""`backflip report`: a static HTML report that needs no server (opened in Chromium in
test_browser.py)."""

from __future__ import annotations

import html
import json
import re

import pytest

pytest.importorskip("jinja2")

from tests.ui.support import backflip


def test_report_writes_self_contained_pages(ui_archive, tmp_path):
    home, a, b = ui_archive["home"], ui_archive["a"], ui_archive["b"]
    out = tmp_path / "report"
    printed = backflip(home, "report", a, b, "--out", out).stdout.strip()
    assert printed == str(out / "index.html")
    index = (out / "index.html").read_text()
    run_page = (out / "runs" / f"{a}.html").read_text()
    assert (out / "runs" / f"{b}.html").exists()
    for name in ("style.css", "app.js", "vendor/uPlot.iife.min.js", "vendor/uPlot.LICENSE"):
        assert (out / "assets" / name).exists(), name
    # no server needed: nothing points at the server's routes or at an http URL
    for page in (index, run_page):
        assert not re.search(r"(src|href)=\"(/|https?:)", page)  # only relative or file:// links
    boot = json.loads(
        re.search(
            r'<script type="application/json" id="boot">(.*?)</script>', run_page, re.S
        ).group(1)
    )
    assert "eval/return_mean" in boot["curves"]["curves"]
    assert html.escape(ui_archive["finding"]["message"][:40]) in run_page
    assert "question A" in run_page
    # videos are copied next to the pages; checkpoints stay in the archive, linked on disk
    videos = list((out / "files" / a).rglob("*.mp4"))
    assert videos and f'src="../files/{a}/seeds/0/videos/' in run_page
    assert "file://" in run_page and "final.pt" in run_page
    assert "P(" in index and f"runs/{a}.html" in index
    assert not list((out / "files").rglob("*.pt"))


def test_report_also_writes_paper_figures_in_the_asked_format(ui_archive, tmp_path):
    import xml.etree.ElementTree as ET

    home, a, b = ui_archive["home"], ui_archive["a"], ui_archive["b"]
    out = tmp_path / "report"
    printed = backflip(home, "report", a, b, "--out", out, "--format", "svg").stdout
    assert f"figures: {out / 'figures'}" in printed
    names = sorted(p.name for p in (out / "figures").iterdir())
    assert names == sorted([f"{a}.svg", f"{b}.svg", "compare.svg"])
    for path in (out / "figures").iterdir():
        root = ET.parse(path).getroot()  # well-formed SVG
        assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_report_bad_input_is_one_line(ui_archive, tmp_path):
    proc = backflip(
        ui_archive["home"], "report", "no-such-run", "--out", tmp_path / "r", check=False
    )
    assert proc.returncode == 2 and "no run 'no-such-run'" in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = backflip(
        ui_archive["home"], "report", ui_archive["a"], "--out", blocker / "r", check=False
    )
    assert (
        proc.returncode == 2 and "cannot create" in proc.stderr and "Traceback" not in proc.stderr
    )
