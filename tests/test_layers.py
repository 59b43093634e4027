"""Arrows point inward: the core modules import no sink, fixture or proxy — not for type
checking, not inside a function — so that a new sink kind needs no edit to them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ORACLE = Path(__file__).resolve().parent.parent / "oracle"
CORE = ["diff", "snapshot", "boundary", "evidence", "sink", "canary", "copies", "kinds"]
OUTER = ("oracle.sinks", "oracle.fixtures", "oracle.proxies")


def imported(tree: ast.Module) -> list[tuple[int, str]]:
    """Every module an import anywhere in `tree` names (``from oracle import sinks`` names
    ``oracle.sinks``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def outer(name: str) -> bool:
    return any(name == o or name.startswith(f"{o}.") for o in OUTER)


def test_the_check_sees_every_kind_of_import():
    tree = ast.parse(
        "import oracle.sinks.sql\n"
        "from oracle import fixtures\n"
        "if TYPE_CHECKING:\n    from oracle.proxies.smtp import SmtpCapture\n"
        "def f():\n    from oracle.sinks import sql\n"
    )
    assert [line for line, name in imported(tree) if outer(name)] == [1, 2, 4, 4, 6, 6]


@pytest.mark.parametrize("module", CORE)
def test_a_core_module_imports_no_sink_fixture_or_proxy(module):
    path = ORACLE / f"{module}.py"
    found = imported(ast.parse(path.read_text(), str(path)))
    assert [f"{path.name}:{line} imports {name}" for line, name in found if outer(name)] == []
