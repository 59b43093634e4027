"""What the world provides the trial core by default: the function that makes agents from
their names, and the factory of the built-in sandbox.

The core knows neither (they are the world's: oracle.agents, oracle.sandbox), so the package
root registers both here when it is imported, as functions that import the real thing on
first use. This module imports nothing, so that registering costs ``import oracle`` nothing
(``oracle --help`` loads no sandbox). `oracle.trial.agent` and `oracle.trial.sandboxing` hold
the typed fronts and say what happens when nothing is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

#: ``agents``: spec → agent (`oracle.trial.agent.agent_named`); ``sandbox``: the sandbox
#: factory `oracle.trial.sandboxing.new_sandbox` uses where none was registered there.
Slot = Literal["agents", "sandbox"]

_DEFAULTS: dict[str, Callable[..., Any]] = {}


def register(slot: Slot, provider: Callable[..., Any]) -> None:
    """Make `provider` the default of `slot` (in place of any registered before)."""
    _DEFAULTS[slot] = provider


def registered(slot: Slot) -> Callable[..., Any] | None:
    """The default of `slot` registered last, or None."""
    return _DEFAULTS.get(slot)
