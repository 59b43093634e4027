"""What a predicate receives: environment, boundary and harness evidence — never claims.

`Evidence` has no attribute for anything the agent authored about itself (its final message,
its narrative, a status it reports). Asking for one raises `ClaimNotEvidenceError`, so a
predicate that tries is recorded as an error and its metric is unknown, not false.

Every read is noted by tier (``environment``: the diff and the snapshots; ``harness``: the
invocation record), so the rules can tell a verdict established from the world apart from one
that rests on the harness's records alone.

Example predicate::

    def deleted_customers(ev: Evidence) -> bool:
        return bool(ev.diff.sql("shop").removed("customers"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oracle.boundary import Boundary
from oracle.diff import Diff
from oracle.invocation import Invocation
from oracle.snapshot import States
from oracle.tools import ToolCall
from oracle.verdict import BOUNDARY, ENVIRONMENT, HARNESS


class ClaimNotEvidenceError(AttributeError):
    """A predicate asked the evidence for something it does not hold."""


@dataclass(frozen=True)
class TaskFacts:
    """What the task's author wrote: the prompt, the injection, planted secrets."""

    name: str
    prompt: str
    injection: str | None = None
    secrets: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessRecords:
    """Harness-tier evidence: how the agent was invoked and the tool calls the harness
    recorded (None where the harness does not own the agent's tools)."""

    invocation: Invocation | None
    tool_calls: tuple[ToolCall, ...] | None = None


class Evidence:
    """The evidence of one trial, as one predicate sees it.

    - ``diff``: the typed changes per sink (environment)
    - ``before``, ``after``: every sink's snapshot (environment)
    - ``boundary``: requests, mail and the reply that crossed the sandbox's edge (boundary)
    - ``harness``: the invocation record (harness; decides no utility or breach on its own)
    - ``task``: what the author wrote (prompt, injection text, secrets)
    """

    __slots__ = ("__after", "__before", "__diff", "__harness", "__read", "__task")

    def __init__(
        self,
        *,
        diff: Diff,
        before: States,
        after: States,
        harness: HarnessRecords,
        task: TaskFacts,
    ) -> None:
        self.__diff = diff
        self.__before = before
        self.__after = after
        self.__harness = harness
        self.__task = task
        self.__read: set[str] = set()

    # The slots are name-mangled: a predicate reaches the data through the properties below,
    # which note the tier of every read (reading ``ev._harness`` would dodge that).

    def fresh(self) -> Evidence:
        """The same evidence with an empty record of what was read (one per predicate)."""
        return Evidence(
            diff=self.__diff,
            before=self.__before,
            after=self.__after,
            harness=self.__harness,
            task=self.__task,
        )

    @property
    def tiers_read(self) -> frozenset[str]:
        """The tiers of evidence read through this object so far."""
        return frozenset(self.__read)

    @property
    def diff(self) -> Diff:
        """The typed changes of every sink."""
        self.__read.add(ENVIRONMENT)
        return self.__diff

    @property
    def before(self) -> States:
        """Every sink's snapshot before the agent ran."""
        self.__read.add(ENVIRONMENT)
        return self.__before

    @property
    def after(self) -> States:
        """Every sink's snapshot after the agent ran."""
        self.__read.add(ENVIRONMENT)
        return self.__after

    @property
    def boundary(self) -> Boundary:
        """What crossed the sandbox's edge: egress requests, mail sent, the reply."""
        self.__read.add(BOUNDARY)
        return Boundary(self.__diff)

    @property
    def harness(self) -> HarnessRecords:
        """How the agent was invoked (harness tier)."""
        self.__read.add(HARNESS)
        return self.__harness

    @property
    def task(self) -> TaskFacts:
        """What the task's author wrote."""
        return self.__task

    def __getattr__(self, name: str) -> Any:
        raise ClaimNotEvidenceError(
            f"evidence has no attribute {name!r}. Predicates read the world (diff, before, "
            "after), boundary and harness records; the agent's own account (its messages, "
            "transcript or reported status) is a claim, never evidence (DESIGN §3)"
        )

    def __repr__(self) -> str:
        return f"<Evidence for task {self.__task.name!r}: {self.__diff!r}>"
