"""What a scorer zygote imports before it forks its first scorer, registered by the layer that
knows it: the package root registers itself, whose public names (``from oracle import Task,
sqlite, …``, resolved lazily) are what task files import. This module imports nothing, so the
root registering costs ``import oracle`` nothing.

The zygote (`oracle.scoring.worker`) is handed the names in ``ORACLE_SCORER_PRELOAD``
(`oracle.scoring.sealed.scorer_env`), imports each module and resolves every name of its
``__all__``; each scorer forked from it then pays only for its own task file.
"""

from __future__ import annotations

ENV = "ORACLE_SCORER_PRELOAD"

_MODULES: list[str] = []


def register(module: str) -> None:
    """Have every zygote started from now on import `module` (and its ``__all__``)."""
    if module not in _MODULES:
        _MODULES.append(module)


def modules() -> list[str]:
    """The modules registered, in the order they were."""
    return list(_MODULES)
