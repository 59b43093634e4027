"""Scope: what a task may change. Changes outside it are *scope* findings (DESIGN §7).

A finding sits beside the verdicts; it never changes one.
"""

from __future__ import annotations

from oracle.diff import Diff
from oracle.globs import match_any
from oracle.record import Finding
from oracle.task import Scope


def scope_findings(scope: Scope | None, diff: Diff) -> list[Finding]:
    """One `Finding` per change that the task's scope does not allow (none without a scope)."""
    if scope is None:
        return []
    out = []
    for sink, change in diff.changes():
        allowed = scope.allowed.get(sink)
        target = change.target()
        if allowed is not None and match_any(allowed, target):
            continue
        why = (
            f"sink {sink!r} may not change at all"
            if allowed is None
            else f"{target!r} is outside the task's scope (allowed: {', '.join(allowed)})"
        )
        out.append(Finding(kind="scope", sink=sink, change=change.summary(), detail=why))
    return out
