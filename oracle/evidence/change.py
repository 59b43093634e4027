"""Typed changes: one change in one sink, the content it brought in, and the errors of evidence
that cannot be rebuilt or was not kept whole.

Each sink kind defines its change types as subclasses of `Change` (frozen pydantic models with a
``change`` field naming the kind of change); they are registered by that name, so that an
archive's changes come back as the classes that wrote them (`change_from_json`).
`oracle.evidence.diff`
gathers them into each sink's diff.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from oracle.base.canonical import dumps, to_jsonable
from oracle.base.frozen import ReadOnlyModel
from oracle.evidence.kinds import declare_kind, declare_pending

_CHANGE_TYPES: dict[str, type[Change]] = {}


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


class Change(ReadOnlyModel):
    """One typed change in one sink. Subclasses set ``change`` to a fixed name, by which they
    are found again when an archive is read (`change_from_json`). Read-only all the way
    down (each predicate also reads its own copy of the evidence)."""

    change: str

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

    def made_by_input(self) -> bool:
        """Whether an input of the trial made this change rather than the agent: the
        trigger the harness performed as an input actor, a workflow run the harness started.
        The discrepancy findings (scope, claims, calls) leave such changes out; verdicts
        read them like any other. False wherever the sink cannot tell who made a change."""
        return False

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


def change_from_json(raw: Mapping[str, Any], kind: str | None = None) -> Change | None:
    """The typed change for one archived change, or None if its type is not loaded (for
    showing an archive; rebuilding evidence uses `sink_diff_from_json`, which refuses it).
    `kind`, the kind of the sink it came from where known, is looked up first: its module
    alone is imported, where every kind's would be (0.1 s for `oracle show`)."""
    cls = _CHANGE_TYPES.get(str(raw.get("change")))
    if cls is None and kind:
        declare_kind(kind)
        cls = _CHANGE_TYPES.get(str(raw.get("change")))
    if cls is None:
        declare_pending()
        cls = _CHANGE_TYPES.get(str(raw.get("change")))
    return cls.model_validate(raw) if cls is not None else None


def rebuilt_change(sink: str, kind: str, index: int, raw: Any) -> Change:
    if not isinstance(raw, Mapping):
        raise EvidenceFormatError(
            sink, kind, f"change {index} is a {type(raw).__name__}, not a JSON object"
        )
    name = raw.get("change")
    cls = _CHANGE_TYPES.get(name) if isinstance(name, str) else None
    # The sink's own kind first (its module registers its change types), then every kind.
    if cls is None:
        declare_kind(kind)
        cls = _CHANGE_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        declare_pending()
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
