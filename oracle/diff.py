"""Typed changes between two snapshots, and the diff of a whole trial.

Each sink kind defines its change types as subclasses of `Change` (frozen pydantic models with a
``change`` field naming the kind of change) and its own `SinkDiff` subclass with query helpers
that read like sentences::

    ev.diff.sql("shop").removed("customers")               # rows removed from a table
    ev.diff.files("root").modified("config/*.toml")        # files modified under a glob

`Diff` is the trial's diff: one `SinkDiff` per sink, looked up by sink name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from oracle.canonical import Json, to_jsonable
from oracle.frozen import freeze

if TYPE_CHECKING:
    from oracle.canary import CanaryHit
    from oracle.sinks.amqp import AmqpDiff
    from oracle.sinks.egress import EgressDiff
    from oracle.sinks.files import FileDiff
    from oracle.sinks.inbox import InboxDiff
    from oracle.sinks.mail import MailDiff
    from oracle.sinks.redis import RedisDiff
    from oracle.sinks.reply import ReplyDiff
    from oracle.sinks.sql import SqlDiff


_CHANGE_TYPES: dict[str, type[Change]] = {}


class Content(NamedTuple):
    """One piece of content a change added or changed, for searches across sinks.

    ``field`` says where it sits (``"bio"``, ``"body"``, ``"header Authorization"``);
    ``before`` is the value it replaced, when there was one, so that a search reports only
    what the change brought in."""

    field: str
    value: str | bytes
    before: str | bytes | None = None


class IncompleteEvidenceError(RuntimeError):
    """A question the kept evidence cannot answer: what would answer it was not kept whole.
    A predicate that meets it is an error, so its metric is unknown rather than false."""


class Change(BaseModel):
    """One typed change in one sink. Subclasses set ``change`` to a fixed name, by which they
    are found again when an archive is read (`change_from_json`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    change: str

    def model_post_init(self, context: Any, /) -> None:
        # Read-only, so that a predicate's careless write fails loudly (each predicate reads
        # its own copy of the evidence, so even a write past this changes nothing else).
        for name in type(self).model_fields:
            object.__setattr__(self, name, freeze(getattr(self, name)))

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        name = cls.model_fields["change"].default
        if isinstance(name, str):
            known = _CHANGE_TYPES.get(name)
            if known is not None and known.__qualname__ != cls.__qualname__:
                raise TypeError(
                    f"change name {name!r} of {cls.__module__}.{cls.__qualname__} is taken by "
                    f"{known.__module__}.{known.__qualname__}; archives could not tell them apart"
                )
            _CHANGE_TYPES[name] = cls

    def summary(self) -> str:
        """One line for people, e.g. ``row removed customers[3]``."""
        return self.change

    def texts(self) -> Iterator[str]:
        """The text content this change added or changed (for searches across sinks)."""
        return iter(())

    def unseen(self) -> str | None:
        """What this change brought in that was not kept whole (a file over the text limit, a
        request body past its cap, a message that did not arrive whole), so that no search can
        tell what it holds; None when everything it brought in is kept."""
        return None

    def contents(self) -> Iterator[Content]:
        """The content this change added or changed, field by field (text or bytes). By
        default the `texts`, as field ``"text"``; sinks override it to name their fields."""
        for text in self.texts():
            yield Content("text", text)

    def target(self) -> str:
        """What the change is to, inside its sink (a table, a path): scopes match on it."""
        for name in ("table", "path"):
            value = getattr(self, name, None)
            if isinstance(value, str):
                return value
        return ""

    def targets(self) -> list[str]:
        """Everything the change is to, each judged by a scope on its own (a message's
        recipients); by default the one `target`."""
        return [self.target()]


def change_from_json(raw: Mapping[str, Any]) -> Change | None:
    """The typed change for one archived change, or None if its type is not loaded."""
    cls = _CHANGE_TYPES.get(str(raw.get("change")))
    return cls.model_validate(raw) if cls is not None else None


C = TypeVar("C", bound=Change)


class SinkDiff:
    """The changes in one sink between two snapshots, in a stable order.

    A `SinkDiff` is falsy when nothing changed.
    """

    kind: ClassVar[str] = "generic"

    def __init__(self, sink: str, changes: Sequence[Change]) -> None:
        self._sink = sink
        self._changes: tuple[Change, ...] = tuple(changes)

    # Read-only, like the changes: a predicate's careless write fails loudly.
    @property
    def sink(self) -> str:
        return self._sink

    @property
    def changes(self) -> tuple[Change, ...]:
        return self._changes

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.sink!r}: {len(self.changes)} changes>"

    @property
    def empty(self) -> bool:
        """True when the sink did not change."""
        return not self.changes

    def of_type(self, cls: type[C]) -> list[C]:
        """The changes of one type, in order."""
        return [c for c in self.changes if isinstance(c, cls)]

    def find_secret(
        self, secret: str | bytes, where: Callable[[Change], bool] | None = None
    ) -> list[CanaryHit]:
        """Where `secret` appears in what this sink's changes added, raw or encoded (see
        `oracle.canary`); `where` narrows the search to the changes it accepts. When nothing is
        found but one of those changes holds content that was not kept whole (a body past the
        recorder's cap, a message that did not arrive whole), raises `IncompleteEvidenceError`:
        the secret's absence is not established."""
        from oracle.canary import search

        return search([(self.sink, self.changes)], secret, where)

    def to_json(self) -> dict[str, Json]:
        """``{"sink", "kind", "changes": [...]}`` in canonical JSON form."""
        return {
            "sink": self.sink,
            "kind": self.kind,
            "changes": [to_jsonable(c.model_dump(mode="python")) for c in self.changes],
        }


D = TypeVar("D", bound=SinkDiff)


class UnknownSinkError(KeyError):
    """A predicate asked for a sink that was not observed, or that the task does not declare."""

    def __init__(
        self,
        sink: str,
        known: Sequence[str],
        what: str = "diff",
        failed: Mapping[str, str] | None = None,
    ) -> None:
        self.sink = sink
        if failed and sink in failed:
            message = f"sink {sink!r} has no {what}: its observation failed ({failed[sink]})"
        else:
            names = ", ".join(sorted({*known, *(failed or {})})) or "none"
            message = f"no sink named {sink!r} in the {what} (sinks: {names})"
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class Diff(Mapping[str, SinkDiff]):
    """The diff of one trial: sink name → `SinkDiff`, for every sink observed twice."""

    def __init__(
        self, sinks: Mapping[str, SinkDiff], failed: Mapping[str, str] | None = None
    ) -> None:
        self._sinks = MappingProxyType(dict(sorted(sinks.items())))
        self._failed = MappingProxyType(dict(failed or {}))

    @property
    def failed(self) -> Mapping[str, str]:
        """Sinks with no diff, and why (their observation failed)."""
        return self._failed

    def __getitem__(self, sink: str) -> SinkDiff:
        try:
            return self._sinks[sink]
        except KeyError:
            raise UnknownSinkError(sink, list(self._sinks), "diff", self.failed) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._sinks)

    def __len__(self) -> int:
        return len(self._sinks)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {len(v)}" for k, v in self._sinks.items())
        return f"<Diff {inner}>"

    @property
    def empty(self) -> bool:
        """True when no sink changed."""
        return all(d.empty for d in self._sinks.values())

    def _typed(self, sink: str, kind: str) -> Any:
        d = self[sink]
        if d.kind != kind:
            raise TypeError(f"sink {sink!r} is a {d.kind} sink, not {kind}")
        return d

    def sql(self, sink: str) -> SqlDiff:
        """The diff of the SQL sink `sink`."""
        result: SqlDiff = self._typed(sink, "sql")
        return result

    def files(self, sink: str) -> FileDiff:
        """The diff of the file sink `sink`."""
        result: FileDiff = self._typed(sink, "files")
        return result

    def egress(self, sink: str) -> EgressDiff:
        """The diff of the egress sink `sink`: the requests made during the trial."""
        result: EgressDiff = self._typed(sink, "egress")
        return result

    def mail(self, sink: str) -> MailDiff:
        """The diff of the SMTP mailbox `sink`: the messages sent during the trial."""
        result: MailDiff = self._typed(sink, "mail")
        return result

    def inbox(self, sink: str) -> InboxDiff:
        """The diff of the Maildir or mbox `sink`: messages added, removed, re-flagged."""
        result: InboxDiff = self._typed(sink, "inbox")
        return result

    def reply(self, sink: str = "reply") -> ReplyDiff:
        """The diff of the reply sink: what the agent published as its reply."""
        result: ReplyDiff = self._typed(sink, "reply")
        return result

    def redis(self, sink: str) -> RedisDiff:
        """The diff of the Redis sink `sink`."""
        result: RedisDiff = self._typed(sink, "redis")
        return result

    def amqp(self, sink: str) -> AmqpDiff:
        """The diff of the message-queue sink `sink` (RabbitMQ)."""
        result: AmqpDiff = self._typed(sink, "amqp")
        return result

    def find_secret(self, secret: str | bytes) -> list[CanaryHit]:
        """Every place `secret` appears in content any sink's changes added or changed: raw,
        base64, base32, hex, URL- or quoted-printable-encoded, also split across lines. Each
        hit names the sink, the change, the field and the encoding (see `oracle.canary`)."""
        from oracle.canary import search

        return search(self, secret)

    def of_kind(self, kind: str) -> list[SinkDiff]:
        """Every sink diff of one kind (``"sql"``, ``"files"``…), ordered by sink name."""
        return [d for d in self._sinks.values() if d.kind == kind]

    def changes(self) -> Iterator[tuple[str, Change]]:
        """Every change of every sink as ``(sink, change)``."""
        for name, d in self._sinks.items():
            for c in d.changes:
                yield name, c

    def to_json(self) -> dict[str, Json]:
        """Canonical JSON: sink name → that sink's diff."""
        return {name: d.to_json() for name, d in self._sinks.items()}
