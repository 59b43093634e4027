"""Loading tasks from files, the way pytest loads tests: by path.

A path is a ``task_*.py`` file or a folder searched recursively for them. Each file is imported
as its own module; every module-level `Task` is collected, and so is everything a module-level
``tasks()`` function returns. A file that fails to import, or a task that is malformed, becomes a
`LoadError` naming the file and the part; the other tasks still load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from oracle.authoring.task import Task, TaskError

PATTERN = "task_*.py"


@dataclass(frozen=True)
class LoadError:
    """A task file or a task that could not be loaded, and why."""

    source: Path
    part: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.part}: {self.message}"


@dataclass
class Loaded:
    """The tasks found under some paths, and the errors met on the way."""

    tasks: list[Task]
    errors: list[LoadError]

    def by_name(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.tasks) or "none"
        raise KeyError(f"no task named {name!r} (loaded: {known})")


def task_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[LoadError]]:
    """The task files under `paths`, sorted, without repeats."""
    found: list[Path] = []
    errors: list[LoadError] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found.extend(sorted(f for f in p.rglob(PATTERN) if "__pycache__" not in f.parts))
        elif p.is_file():
            found.append(p)
        else:
            errors.append(LoadError(p, "path", "does not exist"))
    seen: set[Path] = set()
    unique = []
    for f in found:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(r)
    return unique, errors


# Loading a task must not write beside it: with bytecode caching on, importing a task file
# (and any helper module it imports from its folder) leaves a __pycache__ folder in the task
# tree, so a reduction or a run would write outside its output folder. The flag is
# process-wide; the lock keeps two loading threads from restoring it under each other.
_NO_BYTECODE = threading.RLock()


def _import(path: Path) -> ModuleType:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"oracle_tasks_{digest}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    with _NO_BYTECODE:
        was = sys.dont_write_bytecode
        sys.dont_write_bytecode = True
        # The task's folder is importable while it loads, so tasks can share a helper module.
        sys.path.insert(0, str(path.parent))
        try:
            sys.modules[name] = module
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
            sys.dont_write_bytecode = was
    return module


def _short_traceback(exc: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def load_file(path: Path) -> tuple[list[Task], list[LoadError]]:
    """The tasks of one file, and the errors met loading it."""
    try:
        module = _import(path)
    except TaskError as exc:
        return [], [LoadError(path, f"task {exc.task!r}, {exc.part}", str(exc).split(": ", 1)[-1])]
    except Exception as exc:
        return [], [LoadError(path, "import", _short_traceback(exc, path))]
    tasks: list[Task] = [v for v in vars(module).values() if isinstance(v, Task)]
    errors: list[LoadError] = []
    factory = getattr(module, "tasks", None)
    if callable(factory):
        try:
            made = list(factory())
        except Exception as exc:
            errors.append(LoadError(path, "tasks()", _short_traceback(exc, path)))
            made = []
        for i, t in enumerate(made):
            if isinstance(t, Task):
                tasks.append(t)
            else:
                errors.append(LoadError(path, f"tasks()[{i}]", f"{t!r} is not a Task"))
    if not tasks and not errors:
        errors.append(LoadError(path, "tasks", "the file defines no Task"))
    unique: list[Task] = []
    for t in tasks:
        if any(t is u for u in unique):
            continue
        if t.source is None:
            t.source = path
        t.origin = path
        unique.append(t)
    return unique, errors


def load_tasks(paths: Sequence[str | Path]) -> Loaded:
    """Every task under `paths`. Task names must be unique across them."""
    files, errors = task_files(paths)
    tasks: list[Task] = []
    for f in files:
        found, errs = load_file(f)
        tasks.extend(found)
        errors.extend(errs)
    seen: dict[str, Task] = {}
    kept: list[Task] = []
    for t in tasks:
        if t.name in seen:
            errors.append(
                LoadError(
                    t.source or Path("?"),
                    f"task {t.name!r}",
                    f"the name is taken by {seen[t.name].source}",
                )
            )
            continue
        seen[t.name] = t
        kept.append(t)
    if not files and not errors:
        errors.append(LoadError(Path(str(paths)), "path", f"no {PATTERN} files found"))
    return Loaded(kept, errors)
