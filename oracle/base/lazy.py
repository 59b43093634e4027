"""Names a package hands out on first use (PEP 562): ``import oracle`` and a command that needs
one kind of sink do not pay for the modules behind every other name.

    __getattr__, __dir__ = lazy_names(__name__, {"sqlite": "oracle.fixtures.sqlite"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, sources: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of `package`, whose public names are defined in the
    modules `sources` maps them to: each is imported when the name is first asked for, and the
    name is kept in the package after (the next lookup is an ordinary attribute)."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        module.__dict__[name] = value  # past a package's own __setattr__, if it has one
        return value

    def __dir__() -> list[str]:
        return sorted({*module.__dict__, *sources})

    return __getattr__, __dir__
