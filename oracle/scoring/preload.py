"""What a scorer zygote imports before it forks its first scorer, registered by the layer that
knows it: the package root registers the layers task files import from (``from oracle import
Task, sqlite, …`` resolves lazily into them). This module imports nothing, so the root
registering costs ``import oracle`` nothing.

The zygote (`oracle.scoring.worker`) is handed the names in ``ORACLE_SCORER_PRELOAD``
(`oracle.scoring.sealed.scorer_env`) and imports each; each scorer forked from it then pays
only for its own task file. The names are the modules registered, and every module of a
registered layer that the harness has imported when it starts the zygote: what its task files
use, no more. A harness whose tasks have only a SQLite sink does not make its zygote import
the clients of every other server (0.6 s a zygote with everything; measured).
"""

from __future__ import annotations

import sys

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


def modules() -> list[str]:
    """The modules a zygote started now imports: those registered, in the order they were,
    then those of the registered layers loaded here, sorted."""
    loaded = sorted(
        name
        for name in list(sys.modules)
        if any(name == layer or name.startswith(layer + ".") for layer in _LAYERS)
        and name not in _MODULES
    )
    return [*_MODULES, *loaded]
