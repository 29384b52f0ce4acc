"""Figures for papers: every figure backflip draws can be PNG, SVG or PDF, sized for a two-column
paper, with 8-9 pt text and its fonts embedded — checked by parsing the files back (an XML
parser for SVG, pypdf for PDF)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from backflip import plots, stats
from backflip.curves import aggregate_curves, aggregate_task_curves
from backflip.errors import UserError

SVG = "{http://www.w3.org/2000/svg}"


def _sides():
    rng = np.random.default_rng(0)
    steps = np.arange(0, 10_001, 500)
    sides = []
    for label, rate in (("A", 1.0), ("B", 1.4)):
        curves = [(steps, rate * steps / 100 + rng.normal(0, 5, steps.size)) for _ in range(5)]
        finals = [float(c[1][-1]) for c in curves]
        sides.append(
            {
                "label": label,
                "curve": aggregate_curves(curves),
                "finals": finals,
                "summary": stats.summarize(finals),
                "profile": stats.performance_profile(finals, np.linspace(0, 200, 41)),
            }
        )
    return sides


def _groups():
    rng = np.random.default_rng(1)
    steps = np.arange(0, 5001, 250)
    groups = []
    for label, level in (("ppo", 0.8), ("a2c", 0.5)):
        tasks = [rng.normal(level, 0.2, 5), rng.normal(level - 0.1, 0.2, 5)]
        s = stats.summarize_tasks(tasks)
        curves = [[(steps, level * steps / 5000 + rng.normal(0, 0.05, steps.size))] * 5] * 2
        groups.append(
            {
                "label": label,
                "aggregate": {
                    "iqm": (s["iqm"], s["ci_low"], s["ci_high"]),
                    "optimality_gap": (s["og"], *s["og_ci"]),
                },
                "profile": stats.performance_profile(tasks, np.linspace(-0.5, 1.5, 41)),
                "curve": aggregate_task_curves(curves),
            }
        )
    return groups


def _panels():
    base = stats.summarize([480.0, 500.0, 470.0, 495.0, 500.0])
    low = stats.summarize([200.0, 260.0, 180.0, 300.0, 240.0])
    return {
        "lr": [
            {"value": 3e-4, "summary": low, "flag": "fragile", "default": False},
            {"value": 1e-3, "summary": base, "flag": "", "default": True},
        ],
        "epochs": [
            {"value": 5, "summary": base, "flag": "", "default": False},
            {"value": 10, "summary": base, "flag": "", "default": True},
        ],
    }


FIGURES = {
    "comparison": lambda path: plots.comparison_figure(_sides(), path),
    "aggregate": lambda path: plots.aggregate_figure(_groups(), path, "battery"),
    "sensitivity": lambda path: plots.sensitivity_figure(
        _panels(), _panels()["lr"][1]["summary"], path, "sweep"
    ),
}


def _svg_checks(path, max_width_in):
    root = ET.parse(path).getroot()  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    width = float(root.get("width").removesuffix("pt"))
    assert 0.4 * max_width_in * 72 < width <= max_width_in * 72 + 0.5  # fits the column
    # every glyph is a path (svg.fonttype "path"): no text that needs the reader's fonts
    assert not list(root.iter(f"{SVG}text"))
    glyphs = [e for e in root.iter(f"{SVG}path") if "DejaVuSans" in (e.get("id") or "")]
    assert len(glyphs) > 10, "no embedded glyphs"


def _pdf_checks(path, max_width_in):
    from pypdf import PdfReader

    reader = PdfReader(path)
    (page,) = reader.pages
    width = float(page.mediabox.width)
    assert 0.4 * max_width_in * 72 < width <= max_width_in * 72 + 0.5
    fonts = page["/Resources"]["/Font"]
    assert fonts, "no fonts"
    for ref in fonts.values():
        font = ref.get_object()
        assert font["/Subtype"] != "/Type3"  # Type 3 fonts are refused by many venues
        if font["/Subtype"] == "/Type0":  # a CID-keyed TrueType font
            font = font["/DescendantFonts"][0].get_object()
        assert font["/Subtype"] in ("/TrueType", "/CIDFontType2"), font["/Subtype"]
        assert "/FontFile2" in font["/FontDescriptor"].get_object()  # the font file itself
    sizes = {float(m) for m in re.findall(rb"/F\d+ ([\d.]+) Tf", page.get_contents().get_data())}
    assert sizes and sizes <= {8.0, 9.0}, sizes  # readable when printed at its own size


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_figure_is_a_valid_svg_and_pdf_with_embedded_fonts(name, tmp_path):
    width = plots.DOUBLE_COLUMN
    svg = FIGURES[name](tmp_path / f"{name}.svg")
    _svg_checks(svg, width)
    pdf = FIGURES[name](tmp_path / f"{name}.pdf")
    _pdf_checks(pdf, width)
    png = FIGURES[name](tmp_path / f"{name}.png")
    assert png.read_bytes().startswith(b"\x89PNG")
    # the same figure gives the same file: no timestamp inside
    again = FIGURES[name](tmp_path / f"{name}-again.pdf")
    assert again.read_bytes() == pdf.read_bytes()


def test_a_figure_file_name_and_format_must_agree():
    assert plots.figure_path("out/fig", "pdf").name == "fig.pdf"
    assert plots.figure_path("out/fig.svg").name == "fig.svg"
    assert plots.figure_path("out/fig").name == "fig.png"
    assert plots.figure_path("out/fig.PDF", "pdf").name == "fig.PDF"
    with pytest.raises(UserError, match=r"--format pdf but the file out/fig\.svg is \.svg"):
        plots.figure_path("out/fig.svg", "pdf")
    with pytest.raises(UserError, match=r"cannot write a figure as \.jpg"):
        plots.figure_path("out/fig.jpg")


def test_show_writes_a_one_column_figure_in_the_asked_format(cli, home, tmp_path):
    out = cli("train", "cem", "--env", "CartPole-v1", "--seeds", "2", "--steps", "3000")
    run_id = out.stdout.split()[1].rstrip(":")
    shown = cli("show", run_id, "--plot", tmp_path / "curve", "--format", "pdf").stdout
    assert f"plot: {tmp_path / 'curve.pdf'}" in shown
    _pdf_checks(tmp_path / "curve.pdf", plots.SINGLE_COLUMN)
    cli("show", run_id, "--plot", tmp_path / "curve.svg")
    _svg_checks(tmp_path / "curve.svg", plots.SINGLE_COLUMN)
    bad = cli("show", run_id, "--plot", tmp_path / "c.svg", "--format", "pdf", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --format pdf but the file")
