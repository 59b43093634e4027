"""Typed changes between two snapshots, and the diff of a whole trial.

Each sink kind defines its change types as subclasses of `Change` (frozen pydantic models with a
``change`` field naming the kind of change) and its own `SinkDiff` subclass with query helpers
that read like sentences::

    ev.diff.sql("shop").removed("customers")               # rows removed from a table
    ev.diff.files("root").modified("config/*.toml")        # files modified under a glob

`Diff` is the trial's diff: one `SinkDiff` per sink, looked up by sink name, or by sink name
and kind (`oracle.kinds.SinkKind`, which each sink module declares): ``ev.diff.of(SQL, "shop")``
is typed, and ``ev.diff.sql("shop")`` is the same by the kind's accessor name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self, TypeVar, cast

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from oracle.canonical import Json, dumps, to_jsonable
from oracle.frozen import freeze
from oracle.kinds import SinkKind, named_accessor, names_with_accessors, reserve

if TYPE_CHECKING:
    from oracle.canary import CanaryHit


_CHANGE_TYPES: dict[str, type[Change]] = {}
_SINK_DIFF_TYPES: dict[str, type[SinkDiff]] = {}


class Content(NamedTuple):
    """One piece of content a change added or changed, for searches across sinks.

    ``field`` says where it sits (``"bio"``, ``"body"``, ``"header Authorization"``);
    ``before`` is the value it replaced, when there was one, so that a search reports only
    what the change brought in."""

    field: str
    value: str | bytes
    before: str | bytes | None = None


class EvidenceFormatError(ValueError):
    """Serialised evidence (a snapshot, a sink's diff) that cannot be rebuilt into the objects
    it was written from: an unknown sink kind or change type, a field that is missing or of the
    wrong type, a state that would not write back the bytes it was read from. Names the sink,
    its kind and what is wrong; nothing is ever rebuilt in part."""

    def __init__(self, sink: str | None, kind: str | None, problem: str) -> None:
        self.sink = sink
        self.kind = kind
        self.problem = problem
        where = f"sink {sink!r}" if sink is not None else "evidence of an unnamed sink"
        if kind is not None:
            where += f" (kind {kind!r})"
        super().__init__(f"{where}: {problem}")


def json_difference(archived: Any, rebuilt: Any) -> str | None:
    """Where two JSON values first differ as canonical bytes tell them apart (``1`` is not
    ``1.0``), as a path (``tables.t.rows[3]``), or None when they are the same value.

    >>> json_difference({"a": [1, 2]}, {"a": [1, 2.0]})
    'a[1] reads back as 2.0, not 2'
    """
    try:
        fast = orjson.dumps(archived, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
            rebuilt, option=orjson.OPT_SORT_KEYS
        )
    except TypeError:  # a value plain JSON has no word for: compare the canonical forms
        fast = False
    return None if fast else _first_difference(to_jsonable(archived), to_jsonable(rebuilt), "")


def _first_difference(archived: Any, rebuilt: Any, path: str) -> str | None:
    if isinstance(archived, Mapping) and isinstance(rebuilt, Mapping):
        for key in sorted({*archived, *rebuilt}, key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in rebuilt:
                return f"{where} is not kept"
            if key not in archived:
                return f"{where} appears"
            found = _first_difference(archived[key], rebuilt[key], where)
            if found:
                return found
        return None
    if isinstance(archived, list) and isinstance(rebuilt, list):
        if len(archived) != len(rebuilt):
            return f"{path or 'the value'} holds {len(rebuilt)} items, not {len(archived)}"
        for i, (a, r) in enumerate(zip(archived, rebuilt, strict=True)):
            found = _first_difference(a, r, f"{path}[{i}]")
            if found:
                return found
        return None
    if dumps(archived) != dumps(rebuilt):
        shown = repr(archived)[:60]
        return f"{path or 'the value'} reads back as {repr(rebuilt)[:60]}, not {shown}"
    return None


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
    """The typed change for one archived change, or None if its type is not loaded (for
    showing an archive; rebuilding evidence uses `sink_diff_from_json`, which refuses it)."""
    cls = _CHANGE_TYPES.get(str(raw.get("change")))
    return cls.model_validate(raw) if cls is not None else None


def _rebuilt_change(sink: str, kind: str, index: int, raw: Any) -> Change:
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(
            sink, kind, f"change {index} is a {type(raw).__name__}, not a JSON object"
        )
    name = raw.get("change")
    cls = _CHANGE_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise EvidenceFormatError(
            sink,
            kind,
            f"change {index} has the type {name!r}, which no loaded module registers: import "
            "the module that defines it (the task's module does, when it declares the sink)",
        )
    try:
        return cls.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise EvidenceFormatError(sink, kind, f"change {index} ({name}): {exc}") from None


C = TypeVar("C", bound=Change)


class SinkDiff:
    """The changes in one sink between two snapshots, in a stable order.

    A `SinkDiff` is falsy when nothing changed. Each subclass names its sink kind in ``kind``
    and is registered by it, so that `sink_diff_from_json` rebuilds the right class from an
    archive; two classes cannot claim one kind. A subclass whose constructor takes more than
    ``sink`` and ``changes`` returns those arguments from `init_args`.
    """

    kind: ClassVar[str] = "generic"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register_diff(cls)

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

    def init_args(self) -> dict[str, Json]:
        """The constructor's arguments beyond ``sink`` and ``changes``, as JSON: `to_json`
        writes them beside the changes and `from_json` hands them back by name. A subclass
        whose constructor takes more overrides this (``{"tables": [...]}``)."""
        return {}

    def to_json(self) -> dict[str, Json]:
        """``{"sink", "kind", "changes": [...]}`` in canonical JSON form, with the
        `init_args` beside them."""
        out: dict[str, Json] = {
            "sink": self.sink,
            "kind": self.kind,
            "changes": [to_jsonable(c.model_dump(mode="python")) for c in self.changes],
        }
        args = self.init_args()
        clash = sorted(args.keys() & out.keys())
        if clash:
            raise TypeError(f"{type(self).__name__}.init_args may not name {', '.join(clash)}")
        out.update(args)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Self:
        """The diff `to_json` wrote, rebuilt as its registered class (see
        `sink_diff_from_json`); called on a subclass, the archived kind must be that class's."""
        diff = sink_diff_from_json(raw)
        if not isinstance(diff, cls):
            raise EvidenceFormatError(
                diff.sink, diff.kind, f"its diff is a {type(diff).__name__}, not a {cls.__name__}"
            )
        return diff


def _register_diff(cls: type[SinkDiff]) -> None:
    known = _SINK_DIFF_TYPES.get(cls.kind)
    if known is not None and (known.__module__, known.__qualname__) != (
        cls.__module__,
        cls.__qualname__,
    ):
        raise TypeError(
            f"sink kind {cls.kind!r} of {cls.__module__}.{cls.__qualname__} is taken by "
            f"{known.__module__}.{known.__qualname__}; archives could not tell them apart "
            "(give the class a kind of its own)"
        )
    _SINK_DIFF_TYPES[cls.kind] = cls


_register_diff(SinkDiff)

_DIFF_FIELDS = ("sink", "kind", "changes")


def sink_diff_from_json(raw: Mapping[str, Any]) -> SinkDiff:
    """One sink's diff from its `SinkDiff.to_json` form, as the class registered for its
    kind, with every change typed. Raises `EvidenceFormatError` for an unknown kind or change
    type, a malformed change, or anything that would not write back as it was read.

    >>> d = sink_diff_from_json({"sink": "x", "kind": "generic", "changes": []})
    >>> (d.sink, d.empty)
    ('x', True)
    """
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(None, None, f"a diff is a JSON object, not {type(raw).__name__}")
    sink, kind = raw.get("sink"), raw.get("kind")
    if not isinstance(sink, str):
        raise EvidenceFormatError(
            None, kind if isinstance(kind, str) else None, f"its diff names no sink ({sink!r})"
        )
    if not isinstance(kind, str):
        raise EvidenceFormatError(sink, None, f"its diff names no kind ({kind!r})")
    cls = _SINK_DIFF_TYPES.get(kind)
    if cls is None:
        known = ", ".join(sorted(_SINK_DIFF_TYPES))
        raise EvidenceFormatError(
            sink,
            kind,
            f"no diff class is registered for this kind (known: {known}); import the module "
            "that defines the sink (the task's module does, when it declares the sink)",
        )
    raw_changes = raw.get("changes")
    if not isinstance(raw_changes, list):
        raise EvidenceFormatError(sink, kind, "its diff has no list of changes")
    changes = [_rebuilt_change(sink, kind, i, c) for i, c in enumerate(raw_changes)]
    args = {k: v for k, v in raw.items() if k not in _DIFF_FIELDS}
    try:
        diff = cls(sink, changes, **args)
        written = diff.to_json()
    except (TypeError, ValueError) as exc:
        raise EvidenceFormatError(sink, kind, f"cannot rebuild its {cls.__name__}: {exc}") from exc
    wrong = json_difference(dict(raw), written)
    if wrong:
        raise EvidenceFormatError(sink, kind, f"its diff does not read back as archived: {wrong}")
    return diff


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

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], failed: Mapping[str, str] | None = None) -> Diff:
        """The trial's diff from its `to_json` form (an archive's ``diff.json``); `failed`
        names the sinks whose observation failed, as the trial recorded them. Raises
        `EvidenceFormatError` (see `sink_diff_from_json`)."""
        if not isinstance(raw, Mapping):
            raise EvidenceFormatError(
                None, None, f"a trial's diff is a JSON object, not {type(raw).__name__}"
            )
        sinks: dict[str, SinkDiff] = {}
        for name, value in raw.items():
            d = sink_diff_from_json(value)
            if d.sink != name:
                raise EvidenceFormatError(
                    name, d.kind, f"its diff is filed under {name!r} but names sink {d.sink!r}"
                )
            sinks[name] = d
        return cls(sinks, failed)

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

    def of[K: SinkDiff](self, kind: SinkKind[K, Any], sink: str | None = None) -> K:
        """The diff of the sink `sink` of `kind`, typed::

            ev.diff.of(SQL, "shop").removed("customers")    # SQL from oracle.sinks.sql

        `sink` may be left out for a kind with a default sink (the reply). Raises
        `UnknownSinkError` for a sink not observed, TypeError for a sink of another kind.
        ``ev.diff.sql("shop")`` is the same, by the kind's accessor name."""
        name = sink if sink is not None else kind.default_sink
        if name is None:
            raise TypeError(f"name the {kind.name} sink to read ({kind.name} has no default)")
        d = self[name]
        if d.kind != kind.name:
            raise TypeError(f"sink {name!r} is a {d.kind} sink, not {kind.name}")
        return cast(K, d)

    if not TYPE_CHECKING:  # type checkers see `of`, and `oracle.Evidence` the typed accessors

        def __getattr__(self, name: str) -> Any:
            return named_accessor(self, name, "diff")

    def __dir__(self) -> list[str]:
        return names_with_accessors(self)

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


reserve(Diff)
