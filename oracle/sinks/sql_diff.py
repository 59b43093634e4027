"""Typed changes between two SQL snapshots, and the queries predicates ask of them.

The diff compares table digests first and skips every table whose digest did not move. Inside a
changed table it compares row digests by key, and only rows whose digests differ are compared
field by field; JSON columns get a structural diff (deepdiff) as the field's ``detail``.

Where the database computed the digests, a chunk whose digest moved while every row in it reads
the same before and after means a change the reading could not show (two stored values that
were read alike): the diff then raises `IncompleteEvidenceError` naming the table, so the trial's
verdicts are unknown rather than built on "nothing changed".

A table whose shape changed (a column added, renamed, retyped or dropped, its key changed, or
the table dropped and re-created with other columns) is diffed row by row too: its rows are
paired (`oracle.sinks.sql_pairs`) and every column either side has is compared. A column one
side lacks reads as `ABSENT` there, so a column added during the run shows on every existing
row as ``x: absent → value``, a dropped one as ``x: value → absent``, a renamed one as both.
In an archive an absent side is the key left out of the field's change (``{"new": "v"}``).
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from oracle.base.canonical import Json, row_digest, to_jsonable
from oracle.base.frozen import freeze
from oracle.base.query import UnknownFieldError, matches
from oracle.evidence.diff import Change, Content, IncompleteEvidenceError, SinkDiff, deep_detail
from oracle.evidence.kinds import SinkKind
from oracle.sinks.sql_pairs import key_order, pair_rows
from oracle.sinks.sql_state import KIND, ColumnInfo, SchemaObject, SqlState, TableState


class Absent(Enum):
    """The value of a column a row does not have on one side of a change: a column added
    during the run (absent before) or dropped (absent after). Not SQL NULL, which is `None`.
    Compare with ``is``::

        f = change.fields["x"]
        f.old is ABSENT          # the column x did not exist before the run

    It is falsy and shows as ``absent``."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "absent"

    def __bool__(self) -> bool:
        return False


#: The one `Absent` value.
ABSENT = Absent.ABSENT


def _key_text(key: Sequence[Any] | None) -> str:
    if key is None:
        return "(no key)"
    return ", ".join(repr(k) for k in key)


class RowAdded(Change):
    """A row that is in the table after and was not before."""

    change: Literal["row_added"] = "row_added"
    table: str
    key: list[Any] | None
    row: dict[str, Any]

    def summary(self) -> str:
        return f"row added    {self.table}[{_key_text(self.key)}] {_short(self.row)}"

    def texts(self) -> Iterator[str]:
        return _strings(self.row.values())

    def contents(self) -> Iterator[Content]:
        for column, value in self.row.items():
            v = _searchable(value)
            if v is not None:
                yield Content(column, v)


class RowRemoved(Change):
    """A row that was in the table before and is not after."""

    change: Literal["row_removed"] = "row_removed"
    table: str
    key: list[Any] | None
    row: dict[str, Any]

    def summary(self) -> str:
        return f"row removed  {self.table}[{_key_text(self.key)}] {_short(self.row)}"


class FieldChange(BaseModel):
    """One column of one row: the old and new value, and for JSON values a structural diff.

    ``old`` is `ABSENT` when the column did not exist before the run (added, or the new name
    of a renamed column), ``new`` when it no longer exists after it (dropped, or the old
    name). As JSON, an absent side is left out: ``{"new": "v", "detail": null}``."""

    model_config = ConfigDict(frozen=True)

    old: Any = ABSENT
    new: Any = ABSENT
    detail: dict[str, Any] | None = None

    def model_post_init(self, context: Any, /) -> None:
        if self.old is ABSENT and self.new is ABSENT:
            raise ValueError("a field change needs an old or a new value (both are absent)")
        for name in ("old", "new", "detail"):
            object.__setattr__(self, name, freeze(getattr(self, name)))

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in ("old", "new"):
            if getattr(self, name) is ABSENT:
                del out[name]
        return out


class RowChanged(Change):
    """A row that is in the table before and after, with at least one field changed. Its
    ``key`` is the key after the run; None for a table without one (a multiset, whose rows
    pair only across a change of its columns: see `oracle.sinks.sql_pairs`). ``before`` and
    ``row`` are the whole row before and after, each with the columns it had then."""

    change: Literal["row_changed"] = "row_changed"
    table: str
    key: list[Any] | None
    fields: dict[str, FieldChange]
    before: dict[str, Any]
    row: dict[str, Any]

    def summary(self) -> str:
        parts = ", ".join(f"{c}: {f.old!r} → {f.new!r}" for c, f in self.fields.items())
        return f"row changed  {self.table}[{_key_text(self.key)}] {parts}"

    def texts(self) -> Iterator[str]:
        return _strings(f.new for f in self.fields.values())

    def contents(self) -> Iterator[Content]:
        for column, f in self.fields.items():
            v = _searchable(f.new)
            if v is not None:
                yield Content(column, v, _searchable(f.old))


class TableAdded(Change):
    change: Literal["table_added"] = "table_added"
    table: str
    columns: list[ColumnInfo]
    rows: int

    def summary(self) -> str:
        return f"table added  {self.table} ({len(self.columns)} columns, {self.rows} rows)"


class TableRemoved(Change):
    change: Literal["table_removed"] = "table_removed"
    table: str
    columns: list[ColumnInfo]
    rows: int

    def summary(self) -> str:
        return f"table removed {self.table} (had {self.rows} rows)"


class ColumnAdded(Change):
    change: Literal["column_added"] = "column_added"
    table: str
    column: ColumnInfo

    def summary(self) -> str:
        return f"column added {self.table}.{self.column.name} {self.column.type}"


class ColumnRemoved(Change):
    change: Literal["column_removed"] = "column_removed"
    table: str
    column: ColumnInfo

    def summary(self) -> str:
        return f"column removed {self.table}.{self.column.name}"


class ColumnAltered(Change):
    change: Literal["column_altered"] = "column_altered"
    table: str
    column: str
    old: ColumnInfo
    new: ColumnInfo

    def summary(self) -> str:
        return f"column altered {self.table}.{self.column}: {self.old.type} → {self.new.type}"


class KeyChanged(Change):
    """The table's primary key changed (its rows are then compared as multisets)."""

    change: Literal["key_changed"] = "key_changed"
    table: str
    old: list[str]
    new: list[str]

    def summary(self) -> str:
        return f"primary key changed {self.table}: {self.old} → {self.new}"


class ObjectAdded(Change):
    change: Literal["object_added"] = "object_added"
    object: SchemaObject

    def target(self) -> str:
        return self.object.table or self.object.name

    def summary(self) -> str:
        return f"{self.object.type} added {self.object.name}"

    def texts(self) -> Iterator[str]:
        if self.object.sql:
            yield self.object.sql


class ObjectRemoved(Change):
    change: Literal["object_removed"] = "object_removed"
    object: SchemaObject

    def target(self) -> str:
        return self.object.table or self.object.name

    def summary(self) -> str:
        return f"{self.object.type} removed {self.object.name}"


class ObjectAltered(Change):
    change: Literal["object_altered"] = "object_altered"
    old: SchemaObject
    new: SchemaObject

    def target(self) -> str:
        return self.new.table or self.new.name

    def summary(self) -> str:
        return f"{self.new.type} altered {self.new.name}"

    def texts(self) -> Iterator[str]:
        if self.new.sql:
            yield self.new.sql


def _short(row: Mapping[str, Any], limit: int = 80) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in row.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _searchable(value: Any) -> str | bytes | None:
    """Text as it is, bytes from their tagged form, a JSON structure as its keys and texts
    (one a line); numbers, dates and the like are not searched."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$bytes"), str):
        try:
            return base64.b64decode(value["$bytes"], validate=True)
        except ValueError:
            pass  # not a tag: a JSON object that looks like one
    if isinstance(value, dict | list):
        texts = list(_json_texts(value))
        return "\n".join(texts) if texts else None
    return None


def _json_texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _json_texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_texts(v)


def _strings(values: Any) -> Iterator[str]:
    for v in values:
        if isinstance(v, str):
            yield v


class SqlDiff(SinkDiff):
    """The changes in one database. Queries take a table name and ``where`` expectations::

    d = ev.diff.sql("shop")
    d.added("emails", to="attacker@evil.test")     # rows inserted where the column matches
    d.removed("customers")                         # rows deleted (also by DROP TABLE)
    d.changed("users", "role", role="admin")       # rows whose role changed, now 'admin'
    d.touched("orders")                            # any change to the table at all

    A table name that neither snapshot has raises `KeyError`, so a typo makes the metric
    unknown instead of quietly false.
    """

    kind: ClassVar[str] = "sql"

    def __init__(self, sink: str, changes: Sequence[Change], tables: Sequence[str]) -> None:
        super().__init__(sink, changes)
        if isinstance(tables, str) or not all(isinstance(t, str) for t in tables):
            raise TypeError(f"sink {sink!r}: tables are a list of table names, not {tables!r}")
        self.tables = frozenset(tables)

    def init_args(self) -> dict[str, Json]:
        """The tables either snapshot held (the names queries accept)."""
        return {"tables": list[Json](sorted(self.tables))}

    def _check(self, table: str) -> None:
        if table not in self.tables:
            known = ", ".join(sorted(self.tables)) or "none"
            raise KeyError(f"sink {self.sink!r} has no table {table!r} (tables: {known})")

    def added(self, table: str, **where: Any) -> list[RowAdded]:
        """Rows added to `table` whose values match `where`."""
        self._check(table)
        return [
            c
            for c in self.of_type(RowAdded)
            if c.table == table and matches(c.row, where, f"table {table!r}")
        ]

    def removed(self, table: str, **where: Any) -> list[RowRemoved]:
        """Rows removed from `table` whose old values match `where`."""
        self._check(table)
        return [
            c
            for c in self.of_type(RowRemoved)
            if c.table == table and matches(c.row, where, f"table {table!r}")
        ]

    def changed(
        self, table: str, *columns: str, was: Mapping[str, Any] | None = None, **where: Any
    ) -> list[RowChanged]:
        """Rows of `table` changed in any of `columns` (any column if none named), whose new
        values match `where` and whose old values match `was`.

        A column added or dropped during the run is a changed field of every row (its value
        against `ABSENT`). A row that lacks a column `where` or `was` names, because the column
        was added or dropped during the run, cannot be matched on it: that raises, so the
        metric is unknown rather than false."""
        self._check(table)
        out = []
        for c in self.of_type(RowChanged):
            if c.table != table:
                continue
            if columns and not any(col in c.fields for col in columns):
                continue
            if not _row_matches(c, c.row, where, "after"):
                continue
            if was and not _row_matches(c, c.before, was, "before"):
                continue
            out.append(c)
        return out

    def touched(self, table: str) -> bool:
        """Whether anything in `table` changed: rows, columns, or the table itself."""
        self._check(table)
        return any(getattr(c, "table", None) == table for c in self.changes)

    def schema_changes(self) -> list[Change]:
        """Tables, columns, keys, indexes, views and triggers added, removed or altered."""
        row_types = (RowAdded, RowRemoved, RowChanged)
        return [c for c in self.changes if not isinstance(c, row_types)]


#: The SQL sink kind: ``ev.diff.of(SQL, "shop")``, ``ev.diff.sql("shop")``.
SQL = SinkKind(KIND, diff=SqlDiff, state=SqlState)


def _row_matches(
    c: RowChanged, row: Mapping[str, Any], where: Mapping[str, Any], when: str
) -> bool:
    for column in where:
        f = c.fields.get(column)
        if column not in row and f is not None:
            what = "added" if when == "before" else "dropped or renamed"
            raise UnknownFieldError(
                f"table {c.table!r}: column {column!r} was {what} during the run, so row "
                f"{_key_text(c.key)} has no value for it {when} the run and whether it matches "
                f"{where[column]!r} is unknown (ask which rows have it with "
                f"changed({c.table!r}, {column!r}) and read the field's old and new values)"
            )
    return matches(row, where, f"table {c.table!r}")


#: Types whose ``==`` tells every two values apart that the row digest tells apart.
_EXACT_EQ = frozenset({str, int, bool, bytes, type(None), datetime.date, uuid.UUID})


def _same(x: Any, y: Any) -> bool:
    """The same value as the row digests see it: 1, 1.0 and True differ; so do 0.0 and -0.0,
    ``Decimal('1.0')`` and ``Decimal('1.00')``, one clock time at two offsets, and JSON
    objects whose numbers are written differently. NaN equals NaN."""
    if x is y:
        return True
    if type(x) is not type(y):
        return False
    if type(x) in _EXACT_EQ:
        return bool(x == y)
    if type(x) is float and x == y:
        # Equal floats write alike but for the sign of zero (a NaN is never equal).
        return math.copysign(1.0, x) == math.copysign(1.0, y)
    return row_digest((x,)) == row_digest((y,))


def _json_detail(old: Any, new: Any) -> dict[str, Any] | None:
    def load(v: Any) -> Any:
        if isinstance(v, str | bytes):
            return json.loads(v)
        return v

    try:
        o, n = load(old), load(new)
    except ValueError:
        return None
    if not isinstance(o, dict | list) and not isinstance(n, dict | list):
        return None
    return deep_detail(o, n)


def _chunk_label(t: TableState, bucket: int) -> str:
    c = t.chunking
    if c is None or c.mode == "whole":
        return "the whole table"
    if c.mode == "range":
        key = t.primary_key[0]
        return f"the rows with {key} from {bucket << c.shift} to {((bucket + 1) << c.shift) - 1}"
    return f"hash chunk {bucket} of {c.buckets}"


def _differing_chunks(b: TableState, a: TableState) -> tuple[TableState, TableState] | None:
    """The parts of two chunked tables that can differ: only chunks whose database digests
    differ. None when the two were not chunked alike (then every row is compared)."""
    if (
        b.chunks is None
        or a.chunks is None
        or b.chunking != a.chunking
        or b.columns != a.columns
        or b.primary_key != a.primary_key
        or b.keyed != a.keyed
    ):
        return None
    buckets = [
        k
        for k in sorted(b.chunks.keys() | a.chunks.keys())
        if (b.chunks.get(k) is None)
        or (a.chunks.get(k) is None)
        or b.chunks[k].digest != a.chunks[k].digest
    ]
    for k in buckets:
        old, new = b.chunks.get(k), a.chunks.get(k)
        if old is not None and new is not None and old.digests == new.digests:
            raise IncompleteEvidenceError(
                f"table {a.name!r}: the database's digest of {_chunk_label(a, k)} changed, "
                f"but its {len(new.rows)} rows read the same before and after: a change was "
                "lost in reading (two stored values read alike), so this table's changes are "
                "unknown"
            )

    def part(t: TableState) -> TableState:
        rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        digests: dict[tuple[Any, ...], bytes] = {}
        for k in buckets:
            chunk = t.chunks.get(k) if t.chunks is not None else None
            if chunk is not None:
                rows.update(chunk.rows)
                digests.update(chunk.digests)
        return replace(t, rows=rows, digests=digests, chunks=None)

    return part(b), part(a)


def _row_changes(b: TableState, a: TableState) -> list[Change]:
    if b.columns != a.columns or b.primary_key != a.primary_key:
        return _reshaped_row_changes(b, a)
    parts = _differing_chunks(b, a)
    if parts is not None:
        b, a = parts
    out: list[Change] = []
    if b.keyed and a.keyed:
        columns = [(name, i, i) for i, name in enumerate(a.column_names)]
        json_cols = {c.name for c in a.columns if c.is_json}
        bd, ad = b.digests, a.digests
        # Set differences of (key, digest) pairs run in C: the cost of an unchanged row is one
        # hash lookup, and only differing rows are looked at in Python.
        differing = {k for k, _ in ad.items() - bd.items()}
        for k in sorted(bd.keys() - ad.keys(), key=key_order):
            out.append(RowRemoved(table=b.name, key=b.key_json(k), row=b.as_dict(b.rows[k])))
        changed: list[RowChanged] = []
        for k in sorted(differing, key=key_order):
            if k not in bd:
                out.append(RowAdded(table=a.name, key=a.key_json(k), row=a.as_dict(a.rows[k])))
                continue
            row_changed = _row_changed(b, a, k, k, columns, json_cols)
            if row_changed is not None:
                changed.append(row_changed)
        out.extend(changed)
        return out

    # A multiset on either side: rows are their own identity.
    def bag(t: TableState) -> dict[bytes, list[tuple[Any, ...]]]:
        out_bag: dict[bytes, list[tuple[Any, ...]]] = {}
        for row in t.rows.values():
            out_bag.setdefault(row_digest(row), []).append(row)
        return out_bag

    bb, ab = bag(b), bag(a)
    for d, rows in bb.items():
        for row in rows[len(ab.get(d, ())) :]:
            out.append(RowRemoved(table=b.name, key=None, row=b.as_dict(row)))
    for d, rows in ab.items():
        for row in rows[len(bb.get(d, ())) :]:
            out.append(RowAdded(table=a.name, key=None, row=a.as_dict(row)))
    return out


def _reshaped_row_changes(b: TableState, a: TableState) -> list[Change]:
    """The rows of a table whose columns or key changed: paired (`sql_pairs.pair_rows`),
    then compared over every column either side has, a missing one reading as `ABSENT`."""
    pairing = pair_rows(b, a)
    out: list[Change] = [
        RowRemoved(table=b.name, key=b.key_json(k), row=b.as_dict(b.rows[k]))
        for k in pairing.removed
    ]
    out.extend(
        RowAdded(table=a.name, key=a.key_json(k), row=a.as_dict(a.rows[k])) for k in pairing.added
    )
    before_at = {name: i for i, name in enumerate(b.column_names)}
    after_at = {name: j for j, name in enumerate(a.column_names)}
    columns: list[tuple[str, int | None, int | None]] = [
        (name, before_at.get(name), j) for name, j in after_at.items()
    ]
    columns += [(name, i, None) for name, i in before_at.items() if name not in after_at]
    json_cols = {c.name for c in (*a.columns, *b.columns) if c.is_json}
    # With the same column names, a row whose digest did not move did not change.
    unchanged_if_same_digest = b.column_names == a.column_names
    for bk, ak in pairing.pairs:
        if unchanged_if_same_digest and b.digests[bk] == a.digests[ak]:
            continue
        row_changed = _row_changed(b, a, bk, ak, columns, json_cols)
        if row_changed is not None:
            out.append(row_changed)
    return out


def _row_changed(
    b: TableState,
    a: TableState,
    bk: tuple[Any, ...],
    ak: tuple[Any, ...],
    columns: Sequence[tuple[str, int | None, int | None]],
    json_cols: set[str],
) -> RowChanged | None:
    """The change from row `bk` of `b` to row `ak` of `a` over `columns` (name, position
    before, position after; None where that side lacks it), or None when no field differs."""
    old_row, new_row = b.rows[bk], a.rows[ak]
    fields: dict[str, FieldChange] = {}
    for name, i, j in columns:
        if i is None:
            assert j is not None
            fields[name] = FieldChange(old=ABSENT, new=to_jsonable(new_row[j]))
        elif j is None:
            fields[name] = FieldChange(old=to_jsonable(old_row[i]), new=ABSENT)
        else:
            ov, nv = old_row[i], new_row[j]
            if not _same(ov, nv):
                fields[name] = FieldChange(
                    old=to_jsonable(ov),
                    new=to_jsonable(nv),
                    detail=_json_detail(ov, nv) if name in json_cols else None,
                )
    if not fields:
        return None
    return RowChanged(
        table=a.name,
        key=a.key_json(ak),
        fields=fields,
        before=b.as_dict(old_row),
        row=a.as_dict(new_row),
    )


def _schema_changes(b: TableState, a: TableState) -> list[Change]:
    out: list[Change] = []
    bcols = {c.name: c for c in b.columns}
    acols = {c.name: c for c in a.columns}
    for name, col in bcols.items():
        if name not in acols:
            out.append(ColumnRemoved(table=b.name, column=col))
    for name, col in acols.items():
        old = bcols.get(name)
        if old is None:
            out.append(ColumnAdded(table=a.name, column=col))
        elif old != col:
            out.append(ColumnAltered(table=a.name, column=name, old=old, new=col))
    if b.primary_key != a.primary_key:
        out.append(KeyChanged(table=a.name, old=list(b.primary_key), new=list(a.primary_key)))
    return out


def diff_states(sink: str, before: SqlState, after: SqlState) -> SqlDiff:
    """The typed changes from `before` to `after` (see the module docstring for the method)."""
    changes: list[Change] = []
    names = sorted(set(before.tables) | set(after.tables))
    for name in names:
        b, a = before.tables.get(name), after.tables.get(name)
        if b is None and a is not None:
            changes.append(TableAdded(table=name, columns=list(a.columns), rows=len(a.rows)))
            changes.extend(
                RowAdded(table=name, key=a.key_json(k), row=a.as_dict(r)) for k, r in a.rows.items()
            )
        elif a is None and b is not None:
            changes.append(TableRemoved(table=name, columns=list(b.columns), rows=len(b.rows)))
            changes.extend(
                RowRemoved(table=name, key=b.key_json(k), row=b.as_dict(r))
                for k, r in b.rows.items()
            )
        elif a is not None and b is not None and a.digest != b.digest:
            changes.extend(_schema_changes(b, a))
            changes.extend(_row_changes(b, a))
    for key in sorted(set(before.objects) | set(after.objects)):
        bo, ao = before.objects.get(key), after.objects.get(key)
        if bo is None and ao is not None:
            changes.append(ObjectAdded(object=ao))
        elif ao is None and bo is not None:
            changes.append(ObjectRemoved(object=bo))
        elif ao is not None and bo is not None and ao != bo:
            changes.append(ObjectAltered(old=bo, new=ao))
    return SqlDiff(sink, changes, names)


__all__ = [
    "ABSENT",
    "Absent",
    "ColumnAdded",
    "ColumnAltered",
    "ColumnRemoved",
    "FieldChange",
    "Json",
    "KeyChanged",
    "ObjectAdded",
    "ObjectAltered",
    "ObjectRemoved",
    "RowAdded",
    "RowChanged",
    "RowRemoved",
    "SqlDiff",
    "TableAdded",
    "TableRemoved",
    "diff_states",
]
