"""Each doctor rule's stated threshold agrees with its code: every number its `threshold` text
states (outside parentheses, which hold commentary: what healthy runs showed, the sources'
figures) is a number the rule's function, or a helper of the doctor it calls, compares with.
A text that says 100× over code that checks > 50 fails here, not in a reader's head."""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap

import pytest

from backflip.doctor import RULES, SEED_RULES

NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?(?:e-?\d+)?)(%|th percentile)?")


def numbers_in(fn, depth: int = 2, seen=None) -> set[float]:
    """The numeric constants of `fn` and of the functions of its own module it calls (two
    levels: a rule's helpers, not the formatting and series helpers every rule shares), and
    the values of the module constants it reads."""
    seen = set() if seen is None else seen
    if fn in seen or depth < 0:
        return set()
    seen.add(fn)
    module = sys.modules[fn.__module__]
    out: set[float] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            out.add(float(node.value))
        elif isinstance(node, ast.Name) and hasattr(module, node.id):
            value = getattr(module, node.id)
            if isinstance(value, int | float):
                out.add(float(value))
            elif isinstance(value, tuple):
                out |= {float(x) for x in value if isinstance(x, int | float)}
            elif callable(value) and getattr(value, "__module__", None) == fn.__module__:
                try:
                    out |= numbers_in(value, depth - 1, seen)
                except (TypeError, OSError):
                    pass
    return out


def stated(text: str) -> list[tuple[float, bool]]:
    """(number, is a percentage or percentile) for each number the text states outside
    parentheses."""
    plain = re.sub(r"\([^)]*\)", "", text)
    return [(float(x.replace(",", "")), bool(pct)) for x, pct in NUMBER.findall(plain)]


@pytest.mark.parametrize("rule", [*RULES, *SEED_RULES], ids=lambda r: r.id)
def test_a_rule_s_stated_threshold_is_in_its_code(rule):
    code = numbers_in(rule.check)
    close = {round(c, 9) for c in code}

    def in_code(n: float, percent: bool) -> bool:
        forms = [n]
        if percent:  # "25%" may be 0.25, 1.25 or 0.75; "20%" a fifth (// 5)
            forms += [n / 100, 1 + n / 100, 1 - n / 100, 100 / n if n else n]
        return any(round(f, 9) in close for f in forms)

    missing = [n for n, pct in stated(rule.threshold) if not in_code(n, pct)]
    assert not missing, f"{rule.id}: the threshold states {missing}, its code never uses them"
