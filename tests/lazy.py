"""A module that a test module names at its top and imports when a test first reads from it.

Every worker of a side-by-side run (`make test`) collects the whole suite, so whatever a test
module imports at its top, every worker imports. AgentDojo's pipelines, with the model SDKs
behind them, cost 3 s of CPU to import and Inspect 1.4 s (measured): named through `Lazy`,
they load only in the workers that run the tests using them. The AgentDojo pipeline tests are
one group (one worker); most of Inspect's share a module fixture, which groups them too.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


class Lazy:
    """Module `name`, imported at the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # what pytest probes each module-level name for, at collection
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"Lazy({self._name!r})"


def installed(name: str) -> bool:
    """Whether top-level package `name` can be imported, without importing it."""
    return importlib.util.find_spec(name) is not None
