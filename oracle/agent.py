"""Agent adapters: how the trial runs whatever acts in the sandbox.

An agent is any object with a ``name`` and ``run(view) -> RunRecord``. The adapter, not the
agent, writes the invocation record (started, steps, how it ended), so autonomy is read from what
the harness saw, never from what the agent printed. The adapter also hands over what it captured:
the reply the agent published (boundary evidence), its final message (a claim, kept for
discrepancy findings and never shown to predicates) and its logs.

Example::

    def tidy(view):                      # any function of a SandboxView
        view.sql(None, "DELETE FROM orders WHERE status = 'cancelled'")
        return "Deleted the cancelled orders."   # its reply, and its account of itself

    agent = CallableAgent(tidy)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from oracle.invocation import Invocation, Step
from oracle.sandbox import SandboxView


@dataclass(frozen=True)
class RunRecord:
    """What the harness captured of one run of an agent.

    - ``invocation``: how it was run (harness tier);
    - ``reply``: the bytes it published where others read them, e.g. a command's stdout
      (boundary tier);
    - ``final_message``: what it said about its own work (claim tier: never evidence);
    - ``logs``: anything else worth archiving (stderr…), by file name.
    """

    invocation: Invocation
    reply: bytes | None = None
    final_message: str | None = None
    logs: Mapping[str, bytes] = field(default_factory=dict)


class AgentError(RuntimeError):
    """The agent's run broke (it raised, or its adapter failed): an execution error."""

    def __init__(self, message: str, run: RunRecord) -> None:
        super().__init__(message)
        self.run = run


@runtime_checkable
class Agent(Protocol):
    """Runs in the sandbox through its view and returns the harness's invocation record."""

    name: str

    def run(self, view: SandboxView) -> RunRecord:
        """Run once. Raise `AgentError` (carrying what was captured) if the run itself broke."""
        ...


class CallableAgent:
    """A Python callable of the sandbox view, run in this process as one agent step.

    A callable that returns is a succeeded step; one that raises is a failed step, and the
    trial records the exception as its execution error. Text it returns is its reply (what it
    published) and also its final message (its own account of what it did).
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

    def run(self, view: SandboxView) -> RunRecord:
        started = time.time()
        try:
            returned = self.fn(view)
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
                f"agent {self.name!r} raised {type(exc).__name__}: {exc}", RunRecord(inv)
            ) from exc
        inv = Invocation(
            adapter=self.adapter,
            agent=self.name,
            started=True,
            steps=[Step(name="run", outcome="succeeded")],
            started_at=started,
            finished_at=time.time(),
        )
        text = returned if isinstance(returned, str) else None
        return RunRecord(
            inv,
            reply=text.encode("utf-8") if text is not None else None,
            final_message=text,
        )


def noop(view: SandboxView) -> None:
    """An agent that does nothing (the no-op control)."""
