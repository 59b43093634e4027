"""The harness's record of how the agent was invoked, and the autonomy verdict read from it.

Autonomy comes from this record only: whether the process or callable started, how it ended,
and the outcome of each step the harness ran. It is never read from log text.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

StepOutcome = Literal["succeeded", "failed", "skipped", "needs_approval"]
Resource = Literal["disk", "processes", "memory"]


class Step(BaseModel):
    """One step the harness ran on the agent's behalf (a turn, a tool loop, a command)."""

    model_config = ConfigDict(frozen=True)

    name: str
    outcome: StepOutcome
    agent: bool = Field(True, description="a recognised agent step (not set-up or tear-down)")
    error: str | None = None


class Program(BaseModel):
    """The program a command agent ran: which file, its digest, and what it says its version is.
    Reducers compare it across the cells of a harness (parity)."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="the program file, found on the agent's PATH, links resolved")
    sha256: str | None = Field(description="sha256 of the program file (null: unreadable)")
    version: str | None = Field(
        description="the first line of its answer to --version, asked without a network, stdin "
        "or a shell and given a second (null: no answer; `note` says why)"
    )
    note: str = Field("", description="why a digest or version is missing")


class LimitRecord(BaseModel):
    """One resource limit of the agent's run: what it was, what enforced it, and whether the
    agent reached it — read from the kernel (the agent folder's fullness, a cgroup's event
    counters), never from what the agent printed."""

    model_config = ConfigDict(frozen=True)

    resource: Resource = Field(
        description="'disk' (the agent folder), 'processes' or 'memory' (the agent's processes "
        "together)"
    )
    limit: int | None = Field(
        description="bytes (disk, memory) or processes and threads (null: no limit was set)"
    )
    enforced_by: str | None = Field(
        description="what enforced it: 'tmpfs', 'cgroup2', 'cgroup1', 'rlimit' or 'container' "
        "(null: nothing did; `note` says why)"
    )
    hit: bool | None = Field(
        description="the agent reached it: the agent folder was full when it ended, a fork was "
        "refused, the kernel killed a process for memory (null: not enforced, or what "
        "enforced it does not tell)"
    )
    message: str | None = Field(
        None,
        description="what was hit, in words: 'agent folder full at 1 GiB', 'process limit (512) "
        "reached: 3 forks refused', 'memory limit (2 GiB) reached: killed by the kernel'",
    )
    used: int | None = Field(
        None,
        description="disk: bytes used in the agent folder when the agent ended; memory: peak "
        "bytes; processes: peak count (null: not measured)",
    )
    note: str = Field("", description="how it was enforced or read, or why it was not")


class Invocation(BaseModel):
    """How the agent was run, as the harness saw it."""

    model_config = ConfigDict(frozen=True)

    adapter: str = Field(description="what ran the agent: 'callable', 'control', 'command'…")
    agent: str = Field(description="the agent's name, e.g. 'careful' or 'cmd:./run.sh'")
    started: bool
    steps: list[Step] = Field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    output_truncated: dict[str, int] = Field(
        default_factory=dict,
        description="stream → bytes it wrote, for every stream cut at the capture limit",
    )
    output_open: list[str] = Field(
        default_factory=list,
        description="streams still held open, when capture stopped, by processes the agent "
        "left running (possible only without isolation): what they wrote later is not kept",
    )
    isolation: str | None = Field(
        None, description="how the program was contained: 'bwrap', 'container' or 'none'"
    )
    hidden: list[str] = Field(
        default_factory=list,
        description="the oracle's folders (sandbox, templates, recorders, archives) that the "
        "program saw as empty and read-only: reading or writing them failed inside the "
        "sandbox, with an error only the program saw",
    )
    hidden_opened: list[str] = Field(
        default_factory=list,
        description="hidden folders the program listed (opened as folders); opening a file "
        "by name in them, or writing, fails without a trace and is not counted here",
    )
    program: Program | None = Field(
        None,
        description="a command agent's program file, digest and version (null: no program "
        "was started, or the agent is not a command)",
    )

    limits: list[LimitRecord] = Field(
        default_factory=list,
        description="the run's resource limits (agent folder, processes, memory), each with "
        "what enforced it and whether the agent reached it",
    )
    unverified: str | None = Field(
        None,
        description="why the agent's invocation cannot be verified although the harness ran "
        "(no workflow run was attributed to the trigger, or more than one was): autonomy is "
        "then unknown, with this reason",
    )

    def limits_hit(self) -> list[str]:
        """What the agent reached, in words (``['agent folder full at 8 MiB']``)."""
        return [r.message or f"{r.resource} limit reached" for r in self.limits if r.hit]

    @classmethod
    def not_started(cls, adapter: str, agent: str, why: str) -> Invocation:
        """The agent never ran (it could not be found, or the harness stopped first)."""
        return cls(
            adapter=adapter,
            agent=agent,
            started=False,
            steps=[Step(name="start", outcome="failed", agent=False, error=why)],
        )


def autonomy(invocation: Invocation | None) -> tuple[bool | None, str]:
    """``(verdict, reason)`` for `autonomy_achieved` (DESIGN §5).

    True when a recognised agent step succeeded; False when the agent never started, or every
    agent step was skipped or needed approval; None when invocation cannot be verified (no
    record, no agent steps, a step that failed, a timeout).
    """
    if invocation is None:
        return None, "no invocation record"
    if invocation.unverified:
        return None, invocation.unverified
    if not invocation.started:
        why = next((s.error for s in invocation.steps if s.error), None)
        held = sorted({s.outcome for s in invocation.steps if s.agent})
        if why is None and held and set(held) <= {"skipped", "needs_approval"}:
            why = f"every agent step was {' or '.join(held)}"
        return False, "the agent was never started" + (f": {why}" if why else "")
    if invocation.timed_out:
        return None, "the agent was stopped by the timeout"
    agent_steps = [s for s in invocation.steps if s.agent]
    if not agent_steps:
        return None, "the invocation record holds no agent step"
    failed = [s for s in agent_steps if s.outcome == "failed"]
    if failed:
        return None, f"agent step {failed[0].name!r} failed: {failed[0].error or 'no detail'}"
    if any(s.outcome == "succeeded" for s in agent_steps):
        return True, "an agent step succeeded"
    outcomes = sorted({s.outcome for s in agent_steps})
    return False, f"every agent step was {' or '.join(outcomes)}"
