"""The core imports none of the world: not at module level, not inside a function, not for
type checking. The world (sinks, fixtures, proxies, the concrete sandbox, agents that run
programs, integrations, the CLI, the package root that gathers them) imports the core, and the
core reaches the world's pieces only through what they register (`oracle.sandboxing`,
`oracle.agent.register_resolver`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "oracle"

#: Every module of the core: these, and all of scoring/ and isolation/.
CORE = [
    *(
        f"oracle.{m}"
        for m in [
            "trial",
            "task",
            "controls",
            "controls_record",
            "control_status",
            "matrix",
            "matrix_run",
            "matrix_forkserver",
            "cell_archive",
            "cell_intake",
            "signing",
            "run_id",
            "reduce",
            "stats",
            "aggregate",
            "report",
            "report_html",
            "report_markdown",
            "report_pages",
            "record",
            "agent",
            "tools",
            "invocation",
            "claims",
            "findings",
            "reach",
            "check",
            "evaluators",
            "verdict",
            "evidence",
            "embed",
            "rescore",
            "loader",
            "versions",
            "limits",
            "archive",
            "sandboxing",
            "sandbox_view",
            "errors",
            "attempt",
        ]
    ),
    *(
        f"oracle.{folder}" if p.stem == "__init__" else f"oracle.{folder}.{p.stem}"
        for folder in ("scoring", "isolation")
        for p in sorted((PACKAGE / folder).glob("*.py"))
    ),
]
WORLD = [
    "oracle.sinks",
    "oracle.fixtures",
    "oracle.proxies",
    "oracle.sandbox",
    "oracle.command",
    "oracle.program",
    "oracle.demo",
    "oracle.clients",
    "oracle.integrations",
    "oracle.cli",
    "oracle.cli_matrix",
    "oracle.render",
    "oracle.pytest_plugin",
    "oracle.agent_spec",
]


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:]) if module != "oracle" else Path()
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _file(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    path = (PACKAGE / rel).with_suffix(".py")
    return path if path.is_file() else PACKAGE / rel / "__init__.py"


def imports_of(source: str, package: list[str]) -> set[str]:
    """Every oracle module `source` imports anywhere (`package`: the package it lies in;
    ``from oracle import x`` counts as the module ``oracle.x`` where there is one, else as
    the package root)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "oracle")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            if base.split(".")[0] != "oracle":
                continue
            for a in node.names:
                found.add(f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base)
    return found


def imported(module: str) -> set[str]:
    path = _file(module)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    return imports_of(path.read_text(encoding="utf-8"), package)


def is_world(module: str) -> bool:
    return module == "oracle" or any(module == w or module.startswith(w + ".") for w in WORLD)


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_world_module(module):
    assert _file(module).is_file(), f"{module} is listed as core but does not exist"
    world = sorted(m for m in imported(module) if is_world(m))
    assert world == [], f"{module} imports {', '.join(world)}: inject it instead"


def test_the_check_sees_every_kind_of_import():
    source = """
from typing import TYPE_CHECKING
from oracle import Task
from oracle import demo
from . import render
if TYPE_CHECKING:
    from oracle.sandbox import Sandbox
def f():
    import oracle.cli
    from ..sinks.files import FileSink
"""
    found = imports_of(source, ["oracle", "scoring"])
    assert found == {
        "oracle",
        "oracle.demo",
        "oracle.scoring",
        "oracle.sandbox",
        "oracle.cli",
        "oracle.sinks.files",
    }
    assert all(is_world(m) for m in found - {"oracle.scoring"})
