"""Embedding the oracle in another harness: a sandbox the harness runs its own agent in.

The harness already runs agents; it wants oracle's verdicts. `sandbox(task)` is a context
manager that does steps 1–3 of a trial on entry (reset every fixture, record the boundary,
snapshot before), hands the harness the sandbox's endpoints, and on `finish` takes what the
harness captured (its invocation record, tool-call log and reply) and does steps 5–8 (snapshot
after, diff, evaluate, discrepancies, archive). It is the same `TrialSession` that
`run_trial` drives, so an embedded trial and a local one follow one code path.

Example::

    from oracle import load_tasks
    from oracle.trial.embed import sandbox

    task = load_tasks(["tasks/demo"]).by_name("user-rename")
    with sandbox(task, harness="my-harness", out=Path("runs/mine")) as sb:
        reply = my_agent(prompt=sb.prompt, env=sb.env)   # the harness's own step 4
        result = sb.finish(agent="my-agent", reply=reply)
    result.record.security_breached
    result.archive                     # runs/mine/<run>/<cell folder>: this trial's alone

A harness that leaves the block without calling `finish` (it raised, or forgot) still gets the
sandbox torn down, and `sb.result` holds a record that says the run was abandoned (an execution
error, every verdict unknown). ``async with`` works the same way; the snapshot work then runs
in a worker thread so the event loop stays free (`afinish` is the awaitable `finish`).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.base.globs import check_relative
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.record import Cell, ControlsStatus, TrialRecord
from oracle.evidence.tools import ToolCall, ToolLog, recording
from oracle.scoring.scorer import Scorer
from oracle.trial.agent import RunRecord
from oracle.trial.loop import TrialResult, TrialSession
from oracle.trial.sandboxing import Sandbox


class SandboxNotReadyError(RuntimeError):
    """The sandbox could not be prepared (it did not open, or its reset failed)."""


class EmbeddedSandbox:
    """A trial whose agent the embedding harness runs. Made by `sandbox()`; see the module
    docstring for the whole life cycle.

    - ``view`` / ``env`` / ``prompt``: what to hand the agent (endpoints as variables);
    - ``ready`` / ``error``: whether steps 1–3 succeeded, and why not;
    - ``record_tools()``: record calls of `oracle.evidence.tools.tool`-decorated tools;
    - ``finish(...)`` / ``await afinish(...)``: steps 5–8, returning the `TrialResult`;
    - ``result``: the result once finished, or once abandoned on leaving the block.
    """

    def __init__(self, session: TrialSession, *, agent: str) -> None:
        self._session = session
        self._agent = agent
        self._log: ToolLog | None = None
        self._begun_at: float | None = None
        self.ready = False

    # --- life cycle -------------------------------------------------------------------

    def __enter__(self) -> EmbeddedSandbox:
        self._session.__enter__()
        self._begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._session.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> EmbeddedSandbox:
        await asyncio.to_thread(self.__enter__)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self._session.__exit__, exc_type, exc, tb)

    def _begin(self) -> None:
        self.ready = self._session.begin()
        self._begun_at = time.time()

    # --- what the harness hands its agent ----------------------------------------------

    @property
    def task(self) -> Task:
        return self._session.task

    @property
    def error(self) -> str | None:
        """Why the sandbox is not ready (None when it is)."""
        return self._session.trial.error

    @property
    def view(self) -> SandboxView:
        """The prompt and the endpoints, as `run_trial` gives them to agents."""
        self._require_ready()
        return self._session.view()

    @property
    def env(self) -> dict[str, str]:
        """The endpoints as environment variables (``ORACLE_DB_URL_<SINK>`` …)."""
        return dict(self.view.env)

    @property
    def prompt(self) -> str:
        return self.task.prompt

    @property
    def raw(self) -> Sandbox:
        """The underlying `Sandbox` (its provisioned sinks), for integrations."""
        self._require_ready()
        return self._session.sandbox

    @contextmanager
    def record_tools(self) -> Iterator[ToolLog]:
        """Record calls of decorated tools made inside the block; `finish` hands them in
        unless it is given ``tool_calls`` itself."""
        with recording() as log:
            self._log = log
            yield log

    # --- finishing --------------------------------------------------------------------

    @property
    def result(self) -> TrialResult | None:
        """The trial's result once finished (or abandoned)."""
        return self._session.result

    @property
    def record(self) -> TrialRecord | None:
        return self.result.record if self.result else None

    def finish(
        self,
        run: RunRecord | None = None,
        *,
        agent: str | None = None,
        reply: str | bytes | None = None,
        final_message: str | None = None,
        tool_calls: Sequence[ToolCall] | None = None,
        logs: Mapping[str, bytes] | None = None,
        error: str | None = None,
        invocation: Invocation | None = None,
    ) -> TrialResult:
        """Steps 5–8 on what the harness captured.

        Pass a whole `RunRecord`, or its parts: the harness's `invocation` record (by default
        one agent step named ``run`` that succeeded, or failed with `error`, as soon as the
        harness hands over anything of its run — with nothing at all, no agent step is
        recorded and autonomy is unknown), the `reply`
        the agent published (boundary evidence), its `final_message` (a claim, never
        evidence), the `tool_calls` it recorded (or those of `record_tools`) and `logs`.
        `error` also marks the run as an execution error.
        """
        if run is None:
            run = self._run_record(agent, reply, final_message, tool_calls, logs, error, invocation)
        return self._session.finish(run, error=error)

    async def afinish(
        self,
        run: RunRecord | None = None,
        *,
        agent: str | None = None,
        reply: str | bytes | None = None,
        final_message: str | None = None,
        tool_calls: Sequence[ToolCall] | None = None,
        logs: Mapping[str, bytes] | None = None,
        error: str | None = None,
        invocation: Invocation | None = None,
    ) -> TrialResult:
        """`finish`, with the snapshot work in a worker thread."""
        if run is None:
            run = self._run_record(agent, reply, final_message, tool_calls, logs, error, invocation)
        return await asyncio.to_thread(self._session.finish, run, error=error)

    def abandon(self, why: str) -> TrialResult:
        """Give up on the trial now: an execution error, every verdict unknown."""
        return self._session.abandon(why)

    def _run_record(
        self,
        agent: str | None,
        reply: str | bytes | None,
        final_message: str | None,
        tool_calls: Sequence[ToolCall] | None,
        logs: Mapping[str, bytes] | None,
        error: str | None,
        invocation: Invocation | None,
    ) -> RunRecord:
        name = agent or self._agent
        if tool_calls is None and self._log is not None:
            tool_calls = list(self._log.calls)
        if invocation is None:
            # The harness's word that its agent ran is what it hands over: a named agent, its
            # reply or message, its calls, or an error. Handing over nothing at all records no
            # agent step, so autonomy is unknown rather than assumed.
            reported = (
                agent is not None
                or reply is not None
                or final_message is not None
                or tool_calls is not None
                or error is not None
            )
            steps = (
                [Step(name="run", outcome="failed" if error else "succeeded", error=error)]
                if reported
                else []
            )
            invocation = Invocation(
                adapter="embedded",
                agent=name,
                started=True,
                steps=steps,
                started_at=self._begun_at,
                finished_at=time.time(),
            )
        return RunRecord(
            invocation,
            reply=reply.encode("utf-8") if isinstance(reply, str) else reply,
            final_message=final_message,
            tool_calls=tuple(tool_calls) if tool_calls is not None else None,
            logs=dict(logs or {}),
        )

    def _require_ready(self) -> None:
        if not self.ready:
            raise SandboxNotReadyError(
                f"task {self.task.name!r}: the sandbox is not ready: {self.error or 'not begun'}"
            )


def new_run_name() -> str:
    """A folder name no other run has: the UTC time and 32 random bits.

    >>> len(new_run_name().split("-")[-1])
    8
    """
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(4)}"


def sandbox(
    task: Task,
    *,
    harness: str = "embedded",
    agent: str | None = None,
    cell: Cell | None = None,
    out: Path | None = None,
    run: str | None = None,
    controls: ControlsStatus | None = None,
    reuse: Sandbox | None = None,
    scorer: Scorer | None = None,
) -> EmbeddedSandbox:
    """A sandbox for one trial of `task` that the calling harness runs its agent in.

    `harness` and `agent` name the cell and the invocation (`cell` overrides the whole
    identity); `out` is where archives go (none by default): this trial's goes into
    ``out/<run>/<cell folder>``, where `run` names the harness's run (an integration passes
    one that names its own run and parameters; by default each sandbox is a run of its own,
    `new_run_name`), so no trial's archive lands on another's. `reuse` is an open `Sandbox`
    to run in (it is reset first, and left open); `scorer` is where the predicates run (a
    sealed scorer process by default). Use it as ``with`` or ``async with``.
    """
    the_cell = cell or Cell(harness=harness, task=task.name)
    if out is not None:
        out = out / check_relative(run or new_run_name(), "run name")
    session = TrialSession(task, the_cell, out=out, sandbox=reuse, controls=controls, scorer=scorer)
    return EmbeddedSandbox(session, agent=agent or harness)
