"""Snapshots: a sink's complete, canonical state at one instant, with a digest.

A snapshot is complete or it is not taken: a sink that cannot read all of its state raises
`SnapshotError`, and the trial records that observation as failed (its verdicts become unknown).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from oracle.canonical import Json
from oracle.diff import UnknownSinkError

if TYPE_CHECKING:
    from oracle.sinks.amqp import AmqpState
    from oracle.sinks.egress import EgressState
    from oracle.sinks.files import FolderState
    from oracle.sinks.inbox import InboxState
    from oracle.sinks.mail import MailState
    from oracle.sinks.redis import RedisState
    from oracle.sinks.reply import ReplyState
    from oracle.sinks.sql import SqlState


class State(Protocol):
    """The sink-specific content of a snapshot. It must not change once taken."""

    def to_json(self) -> Json:
        """The canonical JSON form, written into archives."""
        ...


class SnapshotError(RuntimeError):
    """A sink could not be observed completely. The message names the sink and the cause."""

    def __init__(self, sink: str, message: str) -> None:
        self.sink = sink
        super().__init__(f"sink {sink!r}: {message}")


@dataclass(frozen=True)
class Snapshot:
    """One sink's state at one instant.

    ``digest`` is ``sha256:<hex>`` over the canonical state: two snapshots with the same digest
    hold the same state.
    """

    sink: str
    kind: str
    digest: str
    state: Any
    taken_at: float = field(compare=False)

    def to_json(self) -> dict[str, Json]:
        """``{"sink", "kind", "digest", "taken_at", "state"}`` for the archive."""
        return {
            "sink": self.sink,
            "kind": self.kind,
            "digest": self.digest,
            "taken_at": self.taken_at,
            "state": self.state.to_json(),
        }


class States(Mapping[str, Snapshot]):
    """The snapshots of every sink at one point of a trial (before or after the agent ran)."""

    def __init__(
        self,
        snapshots: Mapping[str, Snapshot],
        label: str,
        failed: Mapping[str, str] | None = None,
    ) -> None:
        self._snapshots = MappingProxyType(dict(sorted(snapshots.items())))
        self.label = label
        self.failed: Mapping[str, str] = MappingProxyType(dict(failed or {}))

    def __getitem__(self, sink: str) -> Snapshot:
        try:
            return self._snapshots[sink]
        except KeyError:
            raise UnknownSinkError(
                sink, list(self._snapshots), f"{self.label} snapshot", self.failed
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)

    def _state(self, sink: str, kind: str) -> Any:
        snap = self[sink]
        if snap.kind != kind:
            raise TypeError(f"sink {sink!r} is a {snap.kind} sink, not {kind}")
        return snap.state

    def sql(self, sink: str) -> SqlState:
        """The state of the SQL sink `sink`: ``rows(table)``, ``row(table, key)``…"""
        state: SqlState = self._state(sink, "sql")
        return state

    def files(self, sink: str) -> FolderState:
        """The state of the file sink `sink`: ``text(path)``, ``exists(path)``…"""
        state: FolderState = self._state(sink, "files")
        return state

    def egress(self, sink: str) -> EgressState:
        """The state of the egress sink `sink`: ``requests(host=…)``."""
        state: EgressState = self._state(sink, "egress")
        return state

    def mail(self, sink: str) -> MailState:
        """The state of the SMTP mailbox `sink`: the messages captured so far."""
        state: MailState = self._state(sink, "mail")
        return state

    def inbox(self, sink: str) -> InboxState:
        """The state of the Maildir or mbox `sink`: ``messages()``, ``message(key)``."""
        state: InboxState = self._state(sink, "inbox")
        return state

    def reply(self, sink: str = "reply") -> ReplyState:
        """The state of the reply sink: the reply, once the agent has run."""
        state: ReplyState = self._state(sink, "reply")
        return state

    def redis(self, sink: str) -> RedisState:
        """The state of the Redis sink `sink`: ``value(key)``, ``keys(pattern)``…"""
        state: RedisState = self._state(sink, "redis")
        return state

    def amqp(self, sink: str) -> AmqpState:
        """The state of the message-queue sink `sink`: ``published(...)``, ``queued(...)``."""
        state: AmqpState = self._state(sink, "amqp")
        return state
