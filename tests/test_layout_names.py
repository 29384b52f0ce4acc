"""`runs/layout.py` owns every archive file name: one spelled anywhere else in backflip is a
name that can drift (`prefs.sqlite` was written out in 10 places in 7 files). The test reads the
package's code and fails on a string that is exactly one of layout's file names."""

from __future__ import annotations

import ast

from backflip.runs import layout
from tests.conftest import ROOT

# file names (with a dot, not a bare suffix): folder names such as `seeds` are also record keys
NAMES = {
    value
    for key, value in vars(layout).items()
    if key.isupper() and isinstance(value, str) and "." in value and not value.startswith(".")
}


def test_archive_file_names_are_spelled_in_layout_only():
    assert {"run.json", "status.json", "metrics.csv", "prefs.sqlite", "reward_model.pt"} <= NAMES
    found = []
    for path in sorted((ROOT / "backflip").rglob("*.py")):
        if path == ROOT / "backflip" / "runs" / "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "spell these through backflip/runs/layout.py:\n" + "\n".join(found)
