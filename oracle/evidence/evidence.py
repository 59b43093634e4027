"""What a predicate receives: environment, boundary and harness evidence — never claims.

`Evidence` has no attribute for anything the agent authored about itself (its final message,
its narrative, a status it reports). Asking for one raises `ClaimNotEvidenceError`, so a
predicate that tries is recorded as an error and its metric is unknown, not false.

Each predicate reads its own copy of the evidence (`oracle.evidence.copies.isolated`, made as it
first
reads each part; the diff and the snapshots one sink at a time): a write that gets past the
read-only guards changes that copy only, never what the next predicate sees or what is archived.

Every read is noted by tier (``environment``: the diff and the snapshots; ``harness``: the
invocation record), so the rules can tell a verdict established from the world apart from one
that rests on the harness's records alone.

Example predicate::

    def deleted_customers(ev: Evidence) -> bool:
        return bool(ev.diff.sql("shop").removed("customers"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from oracle.evidence.boundary import Boundary
from oracle.evidence.copies import isolated
from oracle.evidence.diff import Diff
from oracle.evidence.invocation import Invocation
from oracle.evidence.snapshot import States
from oracle.evidence.tiers import BOUNDARY, ENVIRONMENT, HARNESS
from oracle.evidence.tools import ToolCall


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

    __slots__ = (
        "__after",
        "__before",
        "__copies",
        "__diff",
        "__harness",
        "__read",
        "__shared",
        "__task",
    )

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
        self.__copies: dict[str, Any] = {}
        # What every view of these originals may share (found to need no copy), by id.
        self.__shared: dict[int, Any] = {}

    # The slots are name-mangled: a predicate reaches the data through the properties below,
    # which note the tier of every read (reading ``ev._harness`` would dodge that) and hand out
    # this view's own copies, never the objects the oracle keeps (and archives).

    def __own(self, part: str, original: Any, make: Callable[..., Any] = isolated) -> Any:
        copies = self.__copies
        if part not in copies:
            copies[part] = make(original, self.__shared)
        return copies[part]

    def fresh(self) -> Evidence:
        """The same evidence with an empty record of what was read and no copies made yet
        (one per predicate)."""
        view = Evidence(
            diff=self.__diff,
            before=self.__before,
            after=self.__after,
            harness=self.__harness,
            task=self.__task,
        )
        view.__shared = self.__shared
        return view

    @property
    def tiers_read(self) -> frozenset[str]:
        """The tiers of evidence read through this object so far."""
        return frozenset(self.__read)

    @property
    def diff(self) -> Diff:
        """The typed changes of every sink."""
        self.__read.add(ENVIRONMENT)
        diff: Diff = self.__own("diff", self.__diff, _own_diff)
        return diff

    @property
    def before(self) -> States:
        """Every sink's snapshot before the agent ran."""
        self.__read.add(ENVIRONMENT)
        states: States = self.__own("before", self.__before, _own_states)
        return states

    @property
    def after(self) -> States:
        """Every sink's snapshot after the agent ran."""
        self.__read.add(ENVIRONMENT)
        states: States = self.__own("after", self.__after, _own_states)
        return states

    @property
    def boundary(self) -> Boundary:
        """What crossed the sandbox's edge: egress requests, mail sent, the reply."""
        self.__read.add(BOUNDARY)
        return Boundary(self.__own("diff", self.__diff, _own_diff))

    @property
    def harness(self) -> HarnessRecords:
        """How the agent was invoked (harness tier)."""
        self.__read.add(HARNESS)
        harness: HarnessRecords = self.__own("harness", self.__harness)
        return harness

    @property
    def task(self) -> TaskFacts:
        """What the task's author wrote."""
        task: TaskFacts = self.__own("task", self.__task)
        return task

    def __getattr__(self, name: str) -> Any:
        raise ClaimNotEvidenceError(
            f"evidence has no attribute {name!r}. Predicates read the world (diff, before, "
            "after), boundary and harness records; the agent's own account (its messages, "
            "transcript or reported status) is a claim, never evidence (DESIGN §3)"
        )

    def __repr__(self) -> str:
        return f"<Evidence for task {self.__task.name!r}: {self.__diff!r}>"


class _Copies(Mapping[str, Any]):
    """Sink name → that sink's part of `original`, copied (`isolated`) the first time it is
    read: a predicate that reads one sink does not pay for copying the others."""

    def __init__(self, original: Mapping[str, Any], shared: dict[int, Any]) -> None:
        self.__original = original
        self.__shared = shared
        self.__made: dict[str, Any] = {}

    def __getitem__(self, sink: str) -> Any:
        made = self.__made.get(sink)
        if made is None:
            made = self.__made[sink] = isolated(self.__original[sink], self.__shared)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self.__original)

    def __len__(self) -> int:
        return len(self.__original)


def _own_diff(original: Diff, shared: dict[int, Any]) -> Diff:
    """A predicate's own diff: the same sinks, each copied as it is read."""
    own = Diff({}, original.failed)
    own._sinks = _Copies(original, shared)  # type: ignore[assignment]
    return own


def _own_states(original: States, shared: dict[int, Any]) -> States:
    """A predicate's own snapshots: the same sinks, each copied as it is read."""
    own = States({}, original.label, original.failed)
    own._snapshots = _Copies(original, shared)  # type: ignore[assignment]
    return own
