"""The message-queue sink (RabbitMQ, AMQP 0-9-1): what was published during the trial.

Two things are observed:

- **published**: every message routed through a *watched exchange*. The fixture binds a queue
  of the oracle's own to each such exchange (``#`` on a topic exchange, everything on a
  fanout or headers exchange; on a direct one the listed keys, and an alternate exchange for
  every other key), so the oracle gets a copy of each message and legitimate consumers still
  get theirs. The capture queue is *exclusive*: no other connection can consume, purge,
  unbind or delete it.
- **queued**: what reached a *watched queue* during the trial. The capture queue is also given
  the task's bindings of every watched queue, so a message routed there and consumed before
  the trial ended is still seen (``waiting`` is then False); the queue itself is read without
  taking anything (fetched unacknowledged, then handed back by closing the channel; they keep
  their order), which also shows what left it.

A snapshot fails (verdicts unknown) when the capture cannot be trusted: its connection was
closed, its queue is gone, an exchange it is bound to was deleted, or a sentinel it publishes
through each of those exchanges did not come back (the exchange was deleted and declared
again, which drops the capture's bindings). See docs/servers.md for what it cannot see.

Example::

    d = ev.diff.amqp("bus")
    d.published("events", routing_key="billing.*", json=lambda j: j["amount"] > 100)
    d.published("events", body=re.compile("password"))
    d.queued("outbox")                        # messages that reached a watched queue
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, ClassVar, Literal, NamedTuple, Protocol, TypedDict, cast

from pydantic import Field, TypeAdapter

from oracle.base.canonical import Json, digest_json, to_jsonable
from oracle.base.query import matches
from oracle.evidence.diff import Change, Content, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError

KIND = "amqp"

Record = dict[str, Json]


class Reading(NamedTuple):
    """One read of the capture, as message records (see `message_record`):

    - ``published``: every message routed through a watched exchange since the reset;
    - ``queued``: per watched queue, the messages waiting in it now;
    - ``routed``: per watched queue, every message the task's bindings routed to it since the
      reset (taken since or not), as far as the capture sees them."""

    published: list[Record]
    queued: dict[str, list[Record]]
    routed: dict[str, list[Record]]


class Capture(Protocol):
    """What the fixture hands the sink: how to read the capture and the watched queues."""

    def read(self) -> Reading:
        """What the capture holds now, or raise with the reason it cannot be trusted."""
        ...


def message_record(
    exchange: str, routing_key: str, body: bytes, properties: Any
) -> dict[str, Json]:
    """A message as evidence: exchange and routing key by the task's names, the body as text
    (or tagged bytes), ``json`` when the body is a JSON document, headers and properties."""
    try:
        text: Any = body.decode("utf-8")
    except UnicodeDecodeError:
        text = body
    parsed: Json = None
    ctype = getattr(properties, "content_type", None)
    if isinstance(text, str) and ((ctype and "json" in ctype) or text.lstrip()[:1] in ("{", "[")):
        try:
            parsed = to_jsonable(json.loads(text))
        except ValueError:
            parsed = None
    headers = dict(getattr(properties, "headers", None) or {})
    props = {
        k: getattr(properties, k, None)
        for k in ("content_type", "message_id", "correlation_id", "reply_to", "type", "app_id")
    }
    return {
        "exchange": exchange,
        "routing_key": routing_key,
        "body": to_jsonable(text),
        "json": parsed,
        "headers": to_jsonable(headers),
        "properties": to_jsonable({k: v for k, v in props.items() if v is not None}),
    }


def _leaves(value: Any) -> Iterator[str | bytes]:
    """The text and bytes inside a canonical value (bytes from their tagged form), through
    nested header tables and arrays."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict) and set(value) == {"$bytes"}:
        yield base64.b64decode(str(value["$bytes"]))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)


def _contents_of(record: Mapping[str, Any]) -> Iterator[Content]:
    """What a message carries, for the canary search: routing key, body, header values."""
    yield Content("routing key", str(record.get("routing_key") or ""))
    for value in _leaves(record.get("body")):
        yield Content("body", value)
    for name, v in (record.get("headers") or {}).items():
        for value in _leaves(v):
            yield Content(f"header {name}", value)


def _text_of(record: Mapping[str, Any]) -> Iterator[str]:
    for c in _contents_of(record):
        if c.field != "routing key":
            yield c.value if isinstance(c.value, str) else c.value.decode("utf-8", "replace")


@dataclass(frozen=True)
class AmqpState:
    """Messages captured from watched exchanges since the reset, and those waiting in watched
    queues. In predicates::

        ev.after.amqp("bus").published("events")
        ev.after.amqp("bus").queued("outbox")
    """

    published_: tuple[dict[str, Json], ...]
    queued_: Mapping[str, tuple[dict[str, Json], ...]]
    routed_: Mapping[str, tuple[dict[str, Json], ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Json]:
        return {
            "published": list(self.published_),
            "queued": {q: list(m) for q, m in self.queued_.items()},
            "routed": {q: list(m) for q, m in self.routed_.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> AmqpState:
        """The state `to_json` wrote (its message records are canonical already); `spec` is
        not needed. Raises ValueError when `raw` is not such a state."""
        s = _STATE.validate_python(raw, strict=True)

        def records(messages: list[_RecordJson]) -> tuple[dict[str, Json], ...]:
            # A validated record is a plain dict of canonical values.
            return tuple(cast(dict[str, Json], m) for m in messages)

        return cls(
            records(s["published"]),
            {q: records(m) for q, m in s["queued"].items()},
            {q: records(m) for q, m in s["routed"].items()},
        )

    def published(self, exchange: str | None = None, **where: Any) -> list[dict[str, Json]]:
        return [
            m
            for m in self.published_
            if (exchange is None or m["exchange"] == exchange) and matches(m, where, "message")
        ]

    def queued(self, queue: str, **where: Any) -> list[dict[str, Json]]:
        if queue not in self.queued_:
            known = ", ".join(self.queued_) or "none"
            raise KeyError(f"queue {queue!r} is not watched (watched: {known})")
        return [m for m in self.queued_[queue] if matches(m, where, "message")]

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` is in a message of queue `where` (or of exchange `where`)."""
        msgs = list(self.queued_.get(where, ())) + [
            m for m in self.published_ if m["exchange"] == where
        ]
        return any(text in s for m in msgs for s in _text_of(m))


class _RecordJson(TypedDict):
    exchange: str
    routing_key: str
    body: Any
    json: Any
    headers: dict[str, Any]
    properties: dict[str, Any]


class _StateJson(TypedDict):
    published: list[_RecordJson]
    queued: dict[str, list[_RecordJson]]
    routed: dict[str, list[_RecordJson]]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


class _MessageChange(Change):
    change: str
    exchange: str
    routing_key: str
    body: Any
    json_body: Any = None
    headers: dict[str, Any] = Field(default_factory=dict)
    properties: dict[str, Any] = Field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "exchange": self.exchange,
            "routing_key": self.routing_key,
            "body": self.body,
            "json": self.json_body,
            "headers": self.headers,
            "properties": self.properties,
        }

    def texts(self) -> Iterator[str]:
        return _text_of(self.record())

    def contents(self) -> Iterator[Content]:
        return _contents_of(self.record())

    @classmethod
    def of(cls, record: Mapping[str, Any], **extra: Any) -> Any:
        return cls(
            exchange=str(record["exchange"]),
            routing_key=str(record["routing_key"]),
            body=record["body"],
            json_body=record.get("json"),
            headers=dict(record.get("headers") or {}),
            properties=dict(record.get("properties") or {}),
            **extra,
        )


class MessagePublished(_MessageChange):
    """A message routed through a watched exchange during the trial."""

    change: Literal["message_published"] = "message_published"

    def target(self) -> str:
        return self.exchange

    def summary(self) -> str:
        return f"published    {self.exchange} [{self.routing_key}] {str(self.body)[:70]}"


class MessageQueued(_MessageChange):
    """A message that reached a watched queue during the trial: ``waiting`` if it is still
    there after the trial, else it was taken (consumed or purged) before the trial ended."""

    change: Literal["message_queued"] = "message_queued"
    queue: str
    waiting: bool = True

    def target(self) -> str:
        return self.queue

    def summary(self) -> str:
        state = "queued      " if self.waiting else "queued, gone"
        return f"{state} {self.queue} {str(self.body)[:70]}"


class MessageTaken(_MessageChange):
    """A message that waited in a watched queue before the trial and is gone after it."""

    change: Literal["message_taken"] = "message_taken"
    queue: str

    def target(self) -> str:
        return self.queue

    def summary(self) -> str:
        return f"taken        {self.queue} {str(self.body)[:70]}"

    def texts(self) -> Iterator[str]:
        return iter(())  # it was there before the trial: nothing the trial brought in

    def contents(self) -> Iterator[Content]:
        return iter(())


class AmqpDiff(SinkDiff):
    """Messages published and queued during the trial::

    d = ev.diff.amqp("bus")
    d.published("events", routing_key="payments.*", json=lambda j: j.get("to") == "mallory")
    d.queued("outbox", body=re.compile("secret"))
    """

    kind: ClassVar[str] = KIND

    def __init__(
        self,
        sink: str,
        changes: Sequence[Change],
        exchanges: Sequence[str],
        queues: Sequence[str],
    ) -> None:
        super().__init__(sink, changes)
        for what, names in (("exchanges", exchanges), ("queues", queues)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise TypeError(f"sink {sink!r}: {what} are a list of names, not {names!r}")
        self.exchanges = frozenset(exchanges)
        self.queues = frozenset(queues)

    def init_args(self) -> dict[str, Json]:
        """The watched exchanges and queues (the names queries accept)."""
        return {
            "exchanges": list[Json](sorted(self.exchanges)),
            "queues": list[Json](sorted(self.queues)),
        }

    def published(
        self, exchange: str | None = None, *, routing_key: str = "*", **where: Any
    ) -> list[MessagePublished]:
        """Messages published through `exchange` (any watched one if None) whose routing key
        matches the glob `routing_key` and whose record matches `where` (``body``, ``json``,
        ``headers``, ``properties``)."""
        if exchange is not None and exchange not in self.exchanges:
            known = ", ".join(sorted(self.exchanges)) or "none"
            raise KeyError(f"sink {self.sink!r} does not watch exchange {exchange!r} ({known})")
        return [
            c
            for c in self.of_type(MessagePublished)
            if (exchange is None or c.exchange == exchange)
            and fnmatchcase(c.routing_key, routing_key)
            and matches(c.record(), where, "message")
        ]

    def _queue(self, queue: str) -> None:
        if queue not in self.queues:
            known = ", ".join(sorted(self.queues)) or "none"
            raise KeyError(f"sink {self.sink!r} does not watch queue {queue!r} ({known})")

    def queued(self, queue: str, **where: Any) -> list[MessageQueued]:
        """Messages that reached the watched `queue` during the trial, whether still waiting
        or already taken (``waiting`` says which)."""
        self._queue(queue)
        return [
            c
            for c in self.of_type(MessageQueued)
            if c.queue == queue and matches(c.record(), where, "message")
        ]

    def taken(self, queue: str, **where: Any) -> list[MessageTaken]:
        """Messages that left the watched `queue` (consumed or purged)."""
        self._queue(queue)
        return [
            c
            for c in self.of_type(MessageTaken)
            if c.queue == queue and matches(c.record(), where, "message")
        ]


#: The message-queue sink kind (RabbitMQ): ``ev.diff.of(AMQP, "bus")``, ``ev.diff.amqp("bus")``.
AMQP = SinkKind(KIND, diff=AmqpDiff, state=AmqpState)


def _appended(
    sink: str, what: str, before: Sequence[Record], after: Sequence[Record]
) -> list[Record]:
    n = len(before)
    if tuple(after[:n]) != tuple(before):
        raise ValueError(
            f"sink {sink!r}: the capture log of {what} lost messages between the snapshots; "
            "the capture was tampered with"
        )
    return list(after[n:])


def diff_amqp(
    sink: str,
    before: AmqpState,
    after: AmqpState,
    exchanges: Sequence[str],
    queues: Sequence[str],
) -> AmqpDiff:
    new = _appended(sink, "published messages", before.published_, after.published_)
    changes: list[Change] = [MessagePublished.of(m) for m in new]
    for q in sorted(set(before.queued_) | set(after.queued_)):
        b = Counter(digest_json(m) for m in before.queued_.get(q, ()))
        a = Counter(digest_json(m) for m in after.queued_.get(q, ()))
        left, came = b - a, a - b
        for m in before.queued_.get(q, ()):
            d = digest_json(m)
            if left[d] > 0:
                left[d] -= 1
                changes.append(MessageTaken.of(m, queue=q))
        # What the capture saw routed there, still waiting or not; then what appeared in the
        # queue without passing the capture (published straight to it).
        routed = _appended(
            sink, f"queue {q!r}", before.routed_.get(q, ()), after.routed_.get(q, ())
        )
        for m in routed:
            d = digest_json(m)
            waiting = came[d] > 0
            if waiting:
                came[d] -= 1
            changes.append(MessageQueued.of(m, queue=q, waiting=waiting))
        for m in after.queued_.get(q, ()):
            d = digest_json(m)
            if came[d] > 0:
                came[d] -= 1
                changes.append(MessageQueued.of(m, queue=q))
    return AmqpDiff(sink, changes, exchanges, queues)


class AmqpSink:
    """Watched exchanges and queues of one RabbitMQ broker. The fixture provides `capture`
    (a live connection holding the exclusive capture queue) at every reset."""

    kind = KIND

    def __init__(self, name: str, exchanges: Sequence[str], queues: Sequence[str]) -> None:
        self.name = name
        self.exchanges = tuple(exchanges)
        self.queues = tuple(queues)
        self.capture: Capture | None = None

    def snapshot(self) -> Snapshot:
        started = time.time()
        if self.capture is None:
            raise SnapshotError(self.name, "no capture is running (the fixture was not reset)")
        try:
            reading = self.capture.read()
        except Exception as exc:
            raise SnapshotError(
                self.name, f"cannot read the capture: {type(exc).__name__}: {exc}"
            ) from exc
        state = AmqpState(
            tuple(reading.published),
            {q: tuple(reading.queued.get(q, ())) for q in sorted(self.queues)},
            {q: tuple(reading.routed.get(q, ())) for q in sorted(self.queues)},
        )
        return Snapshot(self.name, KIND, digest_json(state.to_json()), state, started)

    def diff(self, before: Snapshot, after: Snapshot) -> AmqpDiff:
        return diff_amqp(self.name, before.state, after.state, self.exchanges, self.queues)
