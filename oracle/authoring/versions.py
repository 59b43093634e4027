"""Versions of everything that ran, and the digest of a task's code and seeds."""

from __future__ import annotations

import functools
import hashlib
import inspect
import platform
import sqlite3
import sys
import types
from importlib import metadata
from pathlib import Path
from typing import Any

from oracle.authoring.task import Task
from oracle.judging.llm.spec import Judge

_PACKAGES = ("oracle", "pydantic", "sqlalchemy", "deepdiff", "orjson")


@functools.cache
def runtime_versions() -> dict[str, str]:
    """Python, the platform, SQLite and the packages oracle's verdicts depend on."""
    out = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
    }
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _hash_path(h: Any, path: Path, base: Path) -> None:
    if path.is_file():
        h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    elif path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file() and not p.is_symlink():
                h.update(str(p.relative_to(base)).encode() + b"\0" + p.read_bytes() + b"\0")
            elif p.is_symlink():
                h.update(str(p.relative_to(base)).encode() + b"\0->" + str(p.readlink()).encode())


def _source(fn: Any) -> str:
    """A function's source, or failing that its compiled code: predicates and controls that
    live in helper modules count too."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code is not None else repr(fn)


def _reached(roots: list[Any]) -> list[Any]:
    """`roots` and every function they call by a global or closed-over name, outside oracle
    and the standard library (helpers in the task's own modules), each once, in order."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = list(reversed(roots))
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        out.append(fn)
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        names: set[str] = set()
        codes = [code]
        while codes:
            c = codes.pop()
            names.update(c.co_names)
            codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        found = [getattr(fn, "__globals__", {}).get(n) for n in sorted(names)]
        found += [
            cell.cell_contents
            for cell in (getattr(fn, "__closure__", None) or ())
            if _has_contents(cell)
        ]
        for g in found:
            module = getattr(g, "__module__", "") or ""
            if (
                isinstance(g, types.FunctionType)
                and not module.startswith("oracle.")
                and module.split(".")[0] not in sys.stdlib_module_names
            ):
                stack.append(g)
    return out


def _has_contents(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a closure cell not filled yet
        return False
    return True


def task_digest(task: Task) -> str:
    """sha256 over the task file, the source of every predicate and control, what each control
    promises, the declared secrets and expected reply, every seed file or template folder it
    names, and each sink's declaration: a changed predicate, control or fixture gives a new
    digest."""
    h = hashlib.sha256()
    base = task.base_dir
    if task.source is not None and task.source.is_file():
        h.update(task.source.read_bytes())
    functions = [fn for _, fn in getattr(task.utility_evaluator, "predicates", ())]
    functions += [fn for _, fn in getattr(task.security_evaluator, "predicates", ())]
    # A judge counts by its declaration (rubric, reads, model, examples) and the source of
    # the functions it reads through.
    judges = [fn for fn in functions if isinstance(fn, Judge)]
    functions = [fn for fn in functions if not isinstance(fn, Judge)]
    for judge in judges:
        h.update(repr(judge).encode())
        functions += judge.functions()
    functions += [c.run for c in task.controls]
    # What the controls promise and what the task declares for the derived ones count too:
    # a changed ``fires=`` or secret proves something else.
    for c in task.controls:
        h.update(repr((c.kind, c.name, c.fires, c.utility, c.undoes_utility)).encode())
    h.update(repr((tuple(task.secrets), task.expected_reply)).encode())
    for fn in _reached(functions):
        h.update(_source(fn).encode())
    for spec in task.sinks:
        h.update(repr(spec).encode())
        for attr in ("sql_file", "copy_of", "template"):
            value = getattr(spec, attr, None)
            if isinstance(value, str):
                _hash_path(h, (base / value), base)
    return "sha256:" + h.hexdigest()
