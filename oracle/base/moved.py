"""Old import paths, kept for one release: each one warns and hands back the module or name at
its new place.

The modules of oracle moved into subpackages that name the architecture (docs/architecture.md).
``import oracle.diff`` still works and gives the module now at ``oracle.evidence.diff``, with a
`DeprecationWarning` naming the new path; where an old module's name is now a package's
(``oracle.trial``), the package hands out the old module's names the same way
(`forward_names`). Nothing here imports oracle's modules until an old path is asked for, so it
adds no edge to the import graph.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: Old module path → its new path.
MOVED: dict[str, str] = {
    "oracle.agent": "oracle.trial.agent",
    "oracle.agent_folder": "oracle.sandbox.agent_folder",
    "oracle.aggregate": "oracle.reports.aggregate",
    "oracle.archive": "oracle.evidence.archive",
    "oracle.boundary": "oracle.evidence.boundary",
    "oracle.canary": "oracle.evidence.canary",
    "oracle.canonical": "oracle.base.canonical",
    "oracle.cell_archive": "oracle.matrix.cell_archive",
    "oracle.cell_intake": "oracle.matrix.cell_intake",
    "oracle.check": "oracle.authoring.check",
    "oracle.claims": "oracle.evidence.claims",
    "oracle.cli": "oracle.cli.app",
    "oracle.cli_matrix": "oracle.cli.matrix",
    "oracle.clients": "oracle.sandbox.clients",
    "oracle.command": "oracle.agents.command",
    "oracle.control_status": "oracle.authoring.control_status",
    "oracle.controls": "oracle.controls.run",
    "oracle.controls_record": "oracle.matrix.controls_record",
    "oracle.copies": "oracle.evidence.copies",
    "oracle.demo": "oracle.agents.demo",
    "oracle.diff": "oracle.evidence.diff",
    "oracle.embed": "oracle.trial.embed",
    "oracle.evaluators": "oracle.judging.evaluators",
    "oracle.evidence": "oracle.evidence.evidence",
    "oracle.findings": "oracle.trial.findings",
    "oracle.frozen": "oracle.base.frozen",
    "oracle.fsops": "oracle.base.fsops",
    "oracle.globs": "oracle.base.globs",
    "oracle.invocation": "oracle.evidence.invocation",
    "oracle.lifeline": "oracle.base.lifeline",
    "oracle.limits": "oracle.authoring.limits",
    "oracle.loader": "oracle.authoring.loader",
    "oracle.matrix": "oracle.matrix.spec",
    "oracle.matrix_forkserver": "oracle.matrix.forkserver",
    "oracle.matrix_run": "oracle.matrix.run",
    "oracle.program": "oracle.agents.program",
    "oracle.proxies.allowlist": "oracle.isolation.allowlist",
    "oracle.proxies.bwrap": "oracle.isolation.bwrap",
    "oracle.proxies.cgroup": "oracle.isolation.cgroup",
    "oracle.proxies.container": "oracle.agents.container",
    "oracle.pytest_plugin": "oracle.integrations.pytest_plugin",
    "oracle.query": "oracle.base.query",
    "oracle.reach": "oracle.judging.reach",
    "oracle.record": "oracle.evidence.record",
    "oracle.reduce": "oracle.matrix.reduce",
    "oracle.render": "oracle.cli.render",
    "oracle.report": "oracle.reports.model",
    "oracle.report_html": "oracle.reports.html",
    "oracle.report_markdown": "oracle.reports.markdown",
    "oracle.report_pages": "oracle.reports.pages",
    "oracle.rescore": "oracle.matrix.rescore",
    "oracle.run_id": "oracle.matrix.run_id",
    "oracle.sandbox": "oracle.sandbox.sandbox",
    "oracle.server_limits": "oracle.sinks.server_limits",
    "oracle.services": "oracle.fixtures.services",
    "oracle.signing": "oracle.base.signing",
    "oracle.sink": "oracle.evidence.sink",
    "oracle.snapshot": "oracle.evidence.snapshot",
    "oracle.stats": "oracle.reports.stats",
    "oracle.task": "oracle.authoring.task",
    "oracle.tools": "oracle.evidence.tools",
    "oracle.trial": "oracle.trial.loop",
    "oracle.verdict": "oracle.judging.verdict",
    "oracle.versions": "oracle.authoring.versions",
}

# Frames to skip when a warning points at the code that used an old path.
_SKIP = (os.path.dirname(__file__), "<frozen importlib")


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old path goes away in the next release",
        DeprecationWarning,
        skip_file_prefixes=_SKIP,
    )


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module at its new path is already executed


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths in `MOVED` that no module answers any more."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder last on `sys.meta_path` (once): it answers only what nothing else does."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())


def forward_names(package: str, module: str) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that hands out the names of `module`, the old module whose
    path the package now holds, with a deprecation warning."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        # ``from package import submodule`` asks here first: the package's own module, not
        # the old module's name for it (importing the old module costs what it imports).
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        target = importlib.import_module(module)
        try:
            value = getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        _warn(f"{package}.{name}", f"{module}.{name}")
        return value

    return __getattr__
