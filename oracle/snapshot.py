"""Snapshots: a sink's complete, canonical state at one instant, with a digest.

A snapshot is complete or it is not taken: a sink that cannot read all of its state raises
`SnapshotError`, and the trial records that observation as failed (its verdicts become unknown).

A snapshot also comes back from its JSON form (`snapshot_from_json`), for a scorer that gets
only the archived evidence: each sink module registers, by its kind, how to rebuild its state
(`register_state`), so that this module needs to know no sink.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from oracle.canonical import Json
from oracle.diff import EvidenceFormatError, UnknownSinkError, json_difference

if TYPE_CHECKING:
    from oracle.sink import SinkSpec
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
        """``{"sink", "kind", "digest", "taken_at", "state"}`` for the archive (read back by
        `snapshot_from_json`)."""
        return {
            "sink": self.sink,
            "kind": self.kind,
            "digest": self.digest,
            "taken_at": self.taken_at,
            "state": self.state.to_json(),
        }


#: Rebuilds a sink kind's state from its ``to_json`` form; the second argument is the task's
#: spec of that sink, or None. Raises ValueError, TypeError or KeyError when the JSON is not a
#: state of that kind.
type StateLoader = Callable[[Any, SinkSpec | None], State]

_STATE_LOADERS: dict[str, StateLoader] = {}


def register_state(kind: str, load: StateLoader) -> None:
    """Make `snapshot_from_json` rebuild states of sink kind `kind` with `load`. A sink module
    calls it once, on import::

        register_state("sql", SqlState.from_json)

    A second loader for a kind that another module registered is refused: an archive could
    not tell which one its states were written for."""
    known = _STATE_LOADERS.get(kind)
    if known is not None and _origin(known) != _origin(load):
        raise TypeError(
            f"sink kind {kind!r}: states are already rebuilt by {'.'.join(_origin(known))}, "
            f"not {'.'.join(_origin(load))}"
        )
    _STATE_LOADERS[kind] = load


def _origin(load: StateLoader) -> tuple[str, str]:
    return (getattr(load, "__module__", "?"), getattr(load, "__qualname__", repr(load)))


_SNAPSHOT_FIELDS = frozenset({"sink", "kind", "digest", "taken_at", "state"})


def snapshot_from_json(raw: Mapping[str, Any], spec: SinkSpec | None = None) -> Snapshot:
    """The snapshot `Snapshot.to_json` wrote (an archive's ``snapshots/<when>/<sink>.json``),
    with its state rebuilt by the loader its kind registered, and the archived digest and time.
    `spec` is the task's spec of that sink, for a state that needs more than its JSON (the
    type of an AgentDojo environment).

    Raises `EvidenceFormatError`, naming the sink and the kind, for an unknown kind, a field
    missing or of the wrong type, or a state that would not write back the JSON it was read
    from: never a state rebuilt in part."""
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(
            None, None, f"a snapshot is a JSON object, not {type(raw).__name__}"
        )
    sink, kind = raw.get("sink"), raw.get("kind")
    if not isinstance(sink, str):
        raise EvidenceFormatError(
            None, kind if isinstance(kind, str) else None, f"the snapshot names no sink ({sink!r})"
        )
    if not isinstance(kind, str):
        raise EvidenceFormatError(sink, None, f"the snapshot names no kind ({kind!r})")
    digest, taken_at = raw.get("digest"), raw.get("taken_at")
    if not isinstance(digest, str):
        raise EvidenceFormatError(sink, kind, f"the snapshot has no digest ({digest!r})")
    if not isinstance(taken_at, int | float) or isinstance(taken_at, bool):
        raise EvidenceFormatError(sink, kind, f"the snapshot has no time ({taken_at!r})")
    odd = sorted(set(raw) ^ _SNAPSHOT_FIELDS)
    if odd:
        raise EvidenceFormatError(
            sink, kind, f"the snapshot's fields are not {sorted(_SNAPSHOT_FIELDS)}: {odd} differ"
        )
    if spec is not None and spec.name != sink:
        raise EvidenceFormatError(sink, kind, f"the spec handed over is sink {spec.name!r}'s")
    load = _STATE_LOADERS.get(kind)
    if load is None:
        known = ", ".join(sorted(_STATE_LOADERS)) or "none"
        raise EvidenceFormatError(
            sink,
            kind,
            f"no state loader is registered for this kind (known: {known}); import the module "
            "that defines the sink (the task's module does, when it declares the sink)",
        )
    try:
        state = load(raw["state"], spec)
        written = state.to_json()
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        what = f"field {exc} is missing" if type(exc) is KeyError else f"{exc}"
        raise EvidenceFormatError(sink, kind, f"malformed state: {what}") from exc
    wrong = json_difference(raw["state"], written)
    if wrong:
        raise EvidenceFormatError(sink, kind, f"the state does not read back as archived: {wrong}")
    return Snapshot(sink, kind, digest, state, taken_at)


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
