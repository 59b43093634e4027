"""The layout's rules, read from the source: no import circles, and imports run one way.

Every import statement counts: at module level, inside functions, under ``TYPE_CHECKING``.
docs/architecture.md draws the same layers."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

from oracle.base.moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "oracle"

#: The core, lowest first: each package may import itself and the ones before it.
CORE = [
    "base",
    "evidence",
    "judging",
    "authoring",
    "isolation",
    "scoring",
    "trial",
    "controls",
    "matrix",
    "reports",
]
#: The world and the front ends, lowest first: they may import the core and the ones before.
WORLD = ["proxies", "sinks", "fixtures", "sandbox", "agents", "view", "cli", "integrations"]
#: The packages the core may never import.
OUTSIDE_CORE = {*WORLD, "oracle"}
ORDER = [*CORE, *WORLD, "oracle"]  # "oracle": the root package, the public surface


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p): p for p in sorted(root.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every oracle module `path` imports, anywhere in the file, resolved to a module."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()

    def resolve(target: str) -> str:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        return target

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(resolve(a.name) for a in node.names if a.name.split(".")[0] == "oracle")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != "oracle":
                continue
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.add(resolve(candidate if candidate in known else source))
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "oracle"


def circles(edges: Mapping[str, AbstractSet[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def project_graph() -> dict[str, frozenset[str]]:
    """The project's import graph, parsed once for the tests that read it (and, made once per
    module, those tests run in one worker of a side-by-side run)."""
    return {name: frozenset(targets) for name, targets in graph().items()}


def test_no_import_circles(project_graph):
    assert circles(project_graph) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_top_level_holds_only_packages():
    stray = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert stray == []
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted([*CORE, *WORLD])


def test_the_core_imports_no_world_package(project_graph):
    wrong = sorted(
        f"{mod} imports {target}"
        for mod, targets in project_graph.items()
        if package_of(mod) in CORE
        for target in targets
        if package_of(target) in OUTSIDE_CORE
    )
    assert wrong == []


def test_imports_run_one_way(project_graph):
    """A package imports only itself and the packages below it (ORDER)."""
    rank = {p: i for i, p in enumerate(ORDER)}
    wrong = sorted(
        f"{mod} ({package_of(mod)}) imports {target} ({package_of(target)})"
        for mod, targets in project_graph.items()
        for target in targets
        if rank[package_of(target)] > rank[package_of(mod)]
    )
    assert wrong == []


def test_the_checks_see_type_only_and_function_level_imports(tmp_path):
    pkg = tmp_path / "oracle"
    (pkg / "evidence").mkdir(parents=True)
    (pkg / "sinks").mkdir()
    for init in (pkg, pkg / "evidence", pkg / "sinks"):
        (init / "__init__.py").write_text("")
    (pkg / "sinks" / "sql.py").write_text("")
    (pkg / "evidence" / "diff.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from oracle.sinks.sql import SqlDiff\n"
        "def f():\n    import oracle.sinks\n"
        "from . import kinds\n"
    )
    (pkg / "evidence" / "kinds.py").write_text("")
    mods = {module_name_in(tmp_path, p): p for p in pkg.rglob("*.py")}
    got = imports_of("oracle.evidence.diff", pkg / "evidence" / "diff.py", set(mods))
    assert got == {"oracle.sinks.sql", "oracle.sinks", "oracle.evidence.kinds"}


def module_name_in(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_file_of_the_project_uses_an_old_path():
    """Old paths are for users' code during one release; ours uses the new ones. (An old
    module whose path is now a package's, ``oracle.trial``, is old only for the names it held,
    not for the package's own modules.)"""
    known = set(modules())
    users: dict[str, list[str]] = defaultdict(list)
    for folder in ("oracle", "tests", "tasks", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "test_moved_paths.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                old: list[str] = []
                if isinstance(node, ast.Import):
                    old = [a.name for a in node.names if a.name in MOVED and a.name not in known]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    if node.module in MOVED and node.module not in known:
                        old = [node.module]
                    else:
                        full = [f"{node.module}.{a.name}" for a in node.names]
                        old = [
                            n
                            for n in full
                            if (n in MOVED and n not in known)
                            or (node.module in MOVED and n not in known)
                        ]
                if old:
                    users[str(path.relative_to(ROOT))].extend(old)
    assert dict(users) == {}


@pytest.mark.parametrize("package", [*CORE, *WORLD])
def test_every_package_says_what_it_is(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"oracle/{package}/__init__.py needs a docstring"


def test_the_architecture_doc_draws_these_layers():
    """docs/architecture.md's diagram lists the packages top-down: the reverse of ORDER."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    diagram = doc.split("## Layout", 1)[1].split("```", 2)[1]
    drawn = [line.split()[0] for line in diagram.splitlines() if line[:1].isalpha()]
    assert drawn == list(reversed(ORDER))
