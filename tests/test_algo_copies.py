"""No block of six or more lines repeats between algorithm files, neither the same lines nor the
same shape with other names: what two algorithms share is written once, in a module they call.

Checked for every file in `backflip/algos/`: the algorithms, the loops they share
(`offpolicy.py`, `onpolicy.py`), `common.py` and the registry; a new algorithm file is checked as
soon as it exists. Likewise for what they accept, `backflip/algos/settings/`: settings two
algorithms share with one meaning are written once (`settings/onpolicy.py: Settings`).
"""

import ast
import io
import keyword
import tokenize
from collections import defaultdict

from tests.conftest import ROOT

ALGOS = ROOT / "backflip" / "algos"
CHECKED = {path.name for path in ALGOS.glob("*.py")}
BLOCK = 6


def shape(path) -> list[tuple[int, str]]:
    """(line number, tokens with every name written `N`) for each line of code, leaving out
    blank lines, comments and imports."""
    src = path.read_text()
    imports = {
        n
        for node in ast.walk(ast.parse(src))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for n in range(node.lineno, node.end_lineno + 1)
    }
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines = defaultdict(list)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in skip or tok.type == tokenize.ENDMARKER or tok.start[0] in imports:
            continue
        named = tok.type == tokenize.NAME and not keyword.iskeyword(tok.string)
        lines[tok.start[0]].append("N" if named else tok.string)
    return [(n, " ".join(toks)) for n, toks in sorted(lines.items())]


def repeated_blocks(folder, checked) -> list[str]:
    """Each block of `BLOCK` lines that two files in `folder` share, one of them in `checked`."""
    where = defaultdict(list)
    for path in sorted(folder.glob("*.py")):
        lines = shape(path)
        for i in range(len(lines) - BLOCK + 1):
            block = tuple(text for _, text in lines[i : i + BLOCK])
            if sum(len(text) > 12 for text in block) >= 2:  # not just brackets and bare names
                where[block].append(f"{path.name}:{lines[i][0]}-{lines[i + BLOCK - 1][0]}")
    found = []
    for places in where.values():
        files = {p.split(":")[0] for p in places}
        if len(files) > 1 and files & checked:
            found.append(" = ".join(places))
    return found


def test_no_block_repeats_between_algorithm_files():
    found = repeated_blocks(ALGOS, CHECKED)
    assert not found, "blocks repeated between algorithm files:\n" + "\n".join(found)


def test_no_block_repeats_between_settings_files():
    settings = ALGOS / "settings"
    found = repeated_blocks(settings, {path.name for path in settings.glob("*.py")})
    assert not found, "blocks repeated between settings files:\n" + "\n".join(found)


def test_a_copy_with_other_names_is_found(tmp_path):
    td3 = (ALGOS / "td3.py").read_text()
    (tmp_path / "td3.py").write_text(td3)
    (tmp_path / "copy.py").write_text(td3.replace("critic", "q").replace("actor", "policy"))
    assert len(repeated_blocks(tmp_path, {"copy.py"})) > 10
    assert repeated_blocks(tmp_path, {"other.py"}) == []
