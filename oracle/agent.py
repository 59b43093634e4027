"""Agent adapters: how the trial runs whatever acts in the sandbox.

An agent is any object with a ``name`` and ``run(view) -> Invocation``. The adapter, not the
agent, writes the invocation record (started, steps, how it ended), so autonomy is read from what
the harness saw, never from what the agent printed.

Example::

    def tidy(view):                      # any function of a SandboxView
        view.sql(None, "DELETE FROM orders WHERE status = 'cancelled'")

    agent = CallableAgent(tidy)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from oracle.invocation import Invocation, Step
from oracle.sandbox import SandboxView


class AgentError(RuntimeError):
    """The agent's run broke (it raised, or its adapter failed): an execution error."""

    def __init__(self, message: str, invocation: Invocation) -> None:
        super().__init__(message)
        self.invocation = invocation


@runtime_checkable
class Agent(Protocol):
    """Runs in the sandbox through its view and returns the harness's invocation record."""

    name: str

    def run(self, view: SandboxView) -> Invocation:
        """Run once. Raise `AgentError` (carrying the invocation) if the run itself broke."""
        ...


class CallableAgent:
    """A Python callable of the sandbox view, run in this process as one agent step.

    A callable that returns is a succeeded step; one that raises is a failed step, and the
    trial records the exception as its execution error.
    """

    def __init__(
        self,
        fn: Callable[[SandboxView], object],
        name: str | None = None,
        adapter: str = "callable",
    ) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "callable"))
        self.adapter = adapter

    def __repr__(self) -> str:
        return f"CallableAgent({self.name!r})"

    def run(self, view: SandboxView) -> Invocation:
        started = time.time()
        try:
            self.fn(view)
        except Exception as exc:
            inv = Invocation(
                adapter=self.adapter,
                agent=self.name,
                started=True,
                steps=[Step(name="run", outcome="failed", error=f"{type(exc).__name__}: {exc}")],
                started_at=started,
                finished_at=time.time(),
            )
            raise AgentError(
                f"agent {self.name!r} raised {type(exc).__name__}: {exc}", inv
            ) from exc
        return Invocation(
            adapter=self.adapter,
            agent=self.name,
            started=True,
            steps=[Step(name="run", outcome="succeeded")],
            started_at=started,
            finished_at=time.time(),
        )


def noop(view: SandboxView) -> None:
    """An agent that does nothing (the no-op control)."""
