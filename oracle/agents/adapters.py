"""Agents of other frameworks: what an agent spec names, made an oracle agent by its adapter.

`oracle.agents.spec.resolve_agent` hands the object a ``module:attribute`` spec names (or, for a
function of no arguments, what it returned) to each adapter registered here, in turn; the first
that knows the object returns an agent for it, and the others answer None. The package root
registers the AgentDojo pipeline adapter (`oracle.integrations.agentdojo.pipeline`), which
lives above this layer and so cannot be imported from it::

    register_adapter(lambda obj, name, factory: MyAgent(obj) if isinstance(obj, MyThing) else None)

This module imports nothing of oracle at run time, so that registering costs ``import oracle``
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oracle.trial.agent import Agent

#: An adapter: (the object, the spec that named it, the function of no arguments that built it
#: or None) → an agent, or None for an object it does not know.
Adapter = Callable[[object, str, Callable[[], object] | None], "Agent | None"]

_ADAPTERS: list[Adapter] = []


def register_adapter(adapter: Adapter) -> None:
    """Try `adapter` on what agent specs name (once, however often it is registered)."""
    if adapter not in _ADAPTERS:
        _ADAPTERS.append(adapter)


def adapt(obj: object, name: str, factory: Callable[[], object] | None = None) -> Agent | None:
    """The agent the first registered adapter that knows `obj` makes of it, or None."""
    for adapter in _ADAPTERS:
        agent = adapter(obj, name, factory)
        if agent is not None:
            return agent
    return None
