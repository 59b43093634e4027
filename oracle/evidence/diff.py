"""Typed changes between two snapshots, and the diff of a whole trial.

Each sink kind defines its change types as subclasses of `Change` (frozen pydantic models with a
``change`` field naming the kind of change) and its own `SinkDiff` subclass with query helpers
that read like sentences::

    ev.diff.sql("shop").removed("customers")               # rows removed from a table
    ev.diff.files("root").modified("config/*.toml")        # files modified under a glob

`Diff` is the trial's diff: one `SinkDiff` per sink, looked up by sink name, or by sink name
and kind (`oracle.evidence.kinds.SinkKind`, which each sink module declares): ``ev.diff.of(SQL,
"shop")``
is typed, and ``ev.diff.sql("shop")`` is the same by the kind's accessor name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from oracle.base.canonical import Json, to_jsonable

# The change types live in oracle.evidence.change (below the canary search); sinks import them from
# here.
from oracle.evidence.change import Change as Change
from oracle.evidence.change import Content as Content
from oracle.evidence.change import EvidenceFormatError as EvidenceFormatError
from oracle.evidence.change import IncompleteEvidenceError as IncompleteEvidenceError
from oracle.evidence.change import change_from_json as change_from_json
from oracle.evidence.change import json_difference as json_difference
from oracle.evidence.change import rebuilt_change
from oracle.evidence.kinds import SinkKind, named_accessor, names_with_accessors, reserve

if TYPE_CHECKING:
    from oracle.evidence.canary import CanaryHit


#: Libraries deepdiff loads whenever they are installed, for types no snapshot holds (a
#: snapshot's values are JSON: dicts, lists, strings, numbers, booleans, None).
_DEEPDIFF_OPTIONAL = ("numpy", "pandas", "polars")


def deep_detail(old: Json, new: Json) -> dict[str, Any]:
    """How JSON value `old` became `new`, field by field: DeepDiff's report
    (``verbose_level=2``) as JSON, the ``detail`` of a changed JSON column or deep Redis value.

    deepdiff is imported on first use, and without numpy, pandas or polars where this process
    has not loaded them already: deepdiff imports each one that is installed (numpy comes
    with the Inspect extra), and numpy alone cost 0.35 s of CPU in each process that diffed
    its first JSON value (measured), for types a snapshot never holds.

    >>> deep_detail({"a": 1}, {"a": 2})["values_changed"]
    {"root['a']": {'new_value': 2, 'old_value': 1}}
    """
    import json
    import sys

    if "deepdiff" not in sys.modules:
        blocked = [m for m in _DEEPDIFF_OPTIONAL if m not in sys.modules]
        for m in blocked:
            sys.modules[m] = None  # type: ignore[assignment]  # importing it raises ImportError
        try:
            import deepdiff  # noqa: F401
        finally:
            for m in blocked:
                if sys.modules.get(m, False) is None:
                    del sys.modules[m]
    from deepdiff import DeepDiff

    detail: dict[str, Any] = json.loads(DeepDiff(old, new, verbose_level=2).to_json())
    return detail


_SINK_DIFF_TYPES: dict[str, type[SinkDiff]] = {}


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
        `oracle.evidence.canary`); `where` narrows the search to the changes it accepts. When
        nothing is
        found but one of those changes holds content that was not kept whole (a body past the
        recorder's cap, a message that did not arrive whole), raises `IncompleteEvidenceError`:
        the secret's absence is not established."""
        from oracle.evidence.canary import search

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
    changes = [rebuilt_change(sink, kind, i, c) for i, c in enumerate(raw_changes)]
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

    def __reduce__(self) -> tuple[Any, ...]:
        # Read-only views do not pickle; a diff travels between processes (controls run side
        # by side, `oracle.cli.parallel`) as the mappings it was made from.
        return (type(self), (dict(self._sinks), dict(self._failed)))

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
        name = kind.sink_to_read(sink)
        d = self[name]
        kind.expect(name, d.kind)
        return cast(K, d)

    if not TYPE_CHECKING:  # type checkers see `of`, and `oracle.Evidence` the typed accessors

        def __getattr__(self, name: str) -> Any:
            return named_accessor(self, name, "diff")

    def __dir__(self) -> list[str]:
        return names_with_accessors(self)

    def find_secret(self, secret: str | bytes) -> list[CanaryHit]:
        """Every place `secret` appears in content any sink's changes added or changed: raw,
        base64, base32, hex, URL- or quoted-printable-encoded, also split across lines. Each
        hit names the sink, the change, the field and the encoding (see
        `oracle.evidence.canary`)."""
        from oracle.evidence.canary import search

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
