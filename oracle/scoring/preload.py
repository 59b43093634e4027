"""What a scorer zygote imports before it forks its first scorer, registered by the layer that
knows it: the package root registers the layers task files import from (``from oracle import
Task, sqlite, …`` resolves lazily into them). This module imports nothing, so the root
registering costs ``import oracle`` nothing.

The zygote (`oracle.scoring.worker`) is handed the names in ``ORACLE_SCORER_PRELOAD``
(`oracle.scoring.sealed.scorer_env`) and imports each; each scorer forked from it then pays
only for its own task file. The names are the modules registered, then the modules of the
registered layers that its task files use, no more:

- given the task files a zygote is started for, the layer modules their modules reach
  through their names (a class, function, module or value bound in the task module, then in
  each oracle module so reached): what importing the task file imports, less what oracle
  imports only inside a function;
- else every module of a registered layer that the harness has imported.

A harness has imported more than its task files use: the servers it provisions (the GitHub
world's web server and GraphQL, the SMTP server, database drivers) and, in a test suite,
everything. A zygote importing all of that took 0.8 s of CPU; one for a SQLite task file
needs 0.3 s (measured).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from types import ModuleType

ENV = "ORACLE_SCORER_PRELOAD"

_MODULES: list[str] = []
_LAYERS: list[str] = []


def register(module: str) -> None:
    """Have every zygote started from now on import `module`."""
    if module not in _MODULES:
        _MODULES.append(module)


def register_layer(package: str) -> None:
    """Have every zygote started from now on import the modules of `package` (and below) that
    this process has imported by then."""
    if package not in _LAYERS:
        _LAYERS.append(package)


def _in_layers(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in _LAYERS)


def modules(task_files: Iterable[str | os.PathLike[str]] | None = None) -> list[str]:
    """The modules a zygote started now imports: those registered, in the order they were,
    then, sorted, the modules of the registered layers that the modules of `task_files`
    reach (every one loaded here where `task_files` is None or none of them is loaded)."""
    roots = _task_modules(task_files) if task_files is not None else []
    names = _reached(roots) if roots else list(sys.modules)
    loaded = sorted(n for n in names if _in_layers(n) and n not in _MODULES)
    return [*_MODULES, *loaded]


def _task_modules(task_files: Iterable[str | os.PathLike[str]]) -> list[ModuleType]:
    """The modules loaded here from `task_files`."""
    wanted = {os.path.realpath(f) for f in task_files}
    names = {os.path.basename(f) for f in wanted}
    # A test suite's process holds thousands of modules: the file name is matched first, in C.
    tails = tuple(os.sep + name for name in names)
    found = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if (
            isinstance(file, str)
            and (file.endswith(tails) or file in names)
            and os.path.realpath(file) in wanted
        ):
            found.append(module)
    return found


def _bound_module(value: object) -> str | None:
    """The module that defines what a name is bound to: a module itself, a class or a
    function, or the class of any other value."""
    if isinstance(value, ModuleType):
        return value.__name__
    if isinstance(value, type) or callable(value):
        name = getattr(value, "__module__", None)
        return name if isinstance(name, str) else None
    return type(value).__module__


def _reached(roots: list[ModuleType]) -> set[str]:
    """The names of the oracle modules that `roots` reach through the names they bind,
    followed through each oracle module reached."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        for value in list(vars(module).values()):
            name = _bound_module(value)
            if name is None or name in seen or not (name == "oracle" or name.startswith("oracle.")):
                continue
            found = sys.modules.get(name)
            if found is None:
                continue
            seen.add(name)
            todo.append(found)
    return seen
