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

import contextlib
import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from oracle.authoring.sandbox_view import SandboxView
from oracle.base.interrupts import shielded
from oracle.base.lifeline import die_with_parent
from oracle.evidence.attempt import Attempt
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.tools import ToolCall, recording
from oracle.trial.defaults import register, registered


@dataclass(frozen=True)
class RunRecord:
    """What the harness captured of one run of an agent.

    - ``invocation``: how it was run (harness tier);
    - ``reply``: the bytes it published where others read them, e.g. a command's stdout
      (boundary tier);
    - ``final_message``: what it said about its own work (claim tier: never evidence);
    - ``tool_calls``: the calls the harness recorded (harness tier), or None where the harness
      does not own the agent's tools;
    - ``logs``: anything else worth archiving (stderr…), by file name;
    - ``network_attempts``: connections the agent tried past the sandbox's network, and
      logins the gates refused (None where it did not run in a network namespace);
    - ``login_gates``: the endpoints (``host:port``) it reached only through a login gate, as
      the sandbox's account (None where it did not run in a network namespace).
    """

    invocation: Invocation
    reply: bytes | None = None
    final_message: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    logs: Mapping[str, bytes] = field(default_factory=dict)
    network_attempts: tuple[Attempt, ...] | None = None
    login_gates: tuple[str, ...] | None = None


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
    """A Python callable of the sandbox view, run as one agent step.

    A callable that returns is a succeeded step; one that raises is a failed step, and the
    trial records the exception as its execution error. Text it returns is its reply (what it
    published) and also its final message (its own account of what it did). Calls of tools
    decorated with `oracle.evidence.tools.tool` are recorded.

    With a `timeout` it runs in a forked child process in its own process group, which is
    killed with everything it started when the time is up: the run is then an execution error
    with ``timed_out`` set. Without one it runs in this process.

    `owns_tools` says whether the agent acts only through decorated tools, so that a change no
    recorded call declares is a finding: by default that is assumed as soon as it made one
    recorded call (an agent that made none hands over no call log at all).
    """

    def __init__(
        self,
        fn: Callable[[SandboxView], object],
        name: str | None = None,
        adapter: str = "callable",
        timeout: float | None = None,
        owns_tools: bool | None = None,
    ) -> None:
        self.fn = fn
        self.owns_tools = owns_tools
        self.name: str = name or str(getattr(fn, "__name__", "callable"))
        self.adapter = adapter
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"CallableAgent({self.name!r})"

    def run(self, view: SandboxView) -> RunRecord:
        started = time.time()
        if self.timeout is None:
            outcome = _call_here(self.fn, view)
        else:
            outcome = _call_forked(self.fn, view, self.timeout)
        inv = Invocation(
            adapter=self.adapter,
            agent=self.name,
            started=True,
            steps=[
                Step(
                    name="run",
                    outcome="succeeded" if outcome.error is None else "failed",
                    error=outcome.error,
                )
            ],
            timed_out=outcome.timed_out,
            started_at=started,
            finished_at=time.time(),
        )
        text = outcome.text
        run = RunRecord(
            inv,
            reply=text.encode("utf-8") if text is not None else None,
            final_message=text,
            tool_calls=tuple(outcome.calls) if self._owns_tools(outcome.calls) else None,
        )
        if outcome.error is not None:
            raise AgentError(f"agent {self.name!r} {outcome.error}", run)
        return run

    def _owns_tools(self, calls: list[ToolCall]) -> bool:
        return self.owns_tools if self.owns_tools is not None else bool(calls)


@dataclass
class _Outcome:
    text: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False


def _call_here(fn: Callable[[SandboxView], object], view: SandboxView) -> _Outcome:
    with recording() as log:
        try:
            value = fn(view)
        except Exception as exc:
            return _Outcome(calls=log.calls, error=f"raised {type(exc).__name__}: {exc}")
    return _Outcome(text=value if isinstance(value, str) else None, calls=log.calls)


def _call_forked(
    fn: Callable[[SandboxView], object], view: SandboxView, timeout: float
) -> _Outcome:
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        # It dies with this process, however this process ends (killed included), and is
        # its own process group, so a timeout kills what it started too.
        die_with_parent()
        os.setsid()
        outcome = _call_here(fn, view)
        send.send((outcome.text, [c.model_dump() for c in outcome.calls], outcome.error))

    proc = ctx.Process(target=child, daemon=False)
    try:
        # A Ctrl-C during the fork would leave a child that nothing here knows of.
        with shielded(), warnings.catch_warnings():
            # The harness may run server threads (the egress recorder's reader, the SMTP
            # loop). The child only runs the callable against the sandbox's endpoints and
            # never touches those threads' objects, so fork's warning about threads does
            # not apply to it.
            warnings.simplefilter("ignore", DeprecationWarning)
            proc.start()
        send.close()
        if not receive.poll(timeout):
            _kill_group(proc.pid)
            proc.join()
            return _Outcome(error=f"timed out after {timeout:g} s and was killed", timed_out=True)
        try:
            text, calls, error = receive.recv()
        except EOFError:
            proc.join()
            return _Outcome(error=f"exited with code {proc.exitcode} before it returned")
        proc.join(timeout=5)
        _kill_group(proc.pid)  # anything it left running in the background
        return _Outcome(text, [ToolCall.model_validate(c) for c in calls], error)
    except BaseException:
        # Ctrl-C (or anything else) while it runs: it goes too, with what it started, also
        # before it made its own session; else this process would wait for it at exit. A
        # second Ctrl-C must not cut this short.
        if proc.pid is not None:
            with shielded():
                _kill_group(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.join()
        raise
    finally:
        receive.close()


def _kill_group(pid: int | None) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def noop(view: SandboxView) -> str:
    """An agent that does nothing (the no-op control): it publishes an empty reply."""
    return ""


#: Makes an agent from its name: ``careful``, ``cmd:./agent.sh``, ``package.module:function``.
AgentResolver = Callable[[str], Agent]


class NoAgentResolverError(RuntimeError):
    """No way to resolve agents by name is registered (``import oracle`` registers one)."""


def register_resolver(resolve: AgentResolver) -> None:
    """Make `resolve` what `agent_named` calls (in place of any registered before). The
    package registers `oracle.agents.spec.resolve_agent` when imported (through
    `oracle.trial.defaults`, which it can import without this module)."""
    register("agents", resolve)


def agent_named(spec: str) -> Agent:
    """The agent `spec` names, as ``oracle trial --agent`` resolves it (a `UsageError` where
    it names none). Raises `NoAgentResolverError` where no resolver is registered.

    >>> agent_named("noop").name
    'noop'
    """
    resolve = registered("agents")
    if resolve is None:
        raise NoAgentResolverError(
            f"agent {spec!r}: no agent resolver is registered; import oracle (which registers "
            "oracle.agents.spec.resolve_agent), or call oracle.trial.agent.register_resolver"
        )
    agent: Agent = resolve(spec)
    return agent
