"""The state a SQL snapshot holds: tables keyed by primary key, rows digested one by one.

A state also comes back from its JSON form (`SqlState.from_json`, registered for the kind
``sql`` by `oracle.sinks.sql_diff.SQL`): its rows then hold canonical values made native
(`oracle.base.canonical.native`) — decimals, bytes, non-finite floats and big integers as Python
values, timestamps, dates and UUIDs as the ISO text that the canonical form writes.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from types import MappingProxyType
from typing import Any, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, TypeAdapter

from oracle.base.canonical import Json, digest_json, dumps, native, row_digest, to_jsonable
from oracle.base.query import matches

KIND = "sql"


class ColumnInfo(BaseModel):
    """One column as reflected: name, type as the database spells it, nullability, default."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    nullable: bool
    default: str | None = None
    is_json: bool = False


class SchemaObject(BaseModel):
    """An index, view or trigger, with the DDL the database reports for it."""

    model_config = ConfigDict(frozen=True)

    type: str
    name: str
    table: str | None = None
    sql: str | None = None


@dataclass(frozen=True)
class Chunking:
    """How a table's rows fall into chunks whose digests the database computes.

    - ``range``: a single integer key; chunk = ``key >> shift`` (consecutive key ranges);
    - ``hash``: any other key; chunk = a keyed hash of the key, modulo ``buckets``;
    - ``whole``: no usable key; the whole table is one chunk (an order-free multiset digest).

    ``seed`` keys the database's row hashes; it stays in the process and is never archived.
    """

    mode: str
    shift: int = 0
    buckets: int = 1
    seed: int = field(default=0, repr=False)

    def describe(self) -> dict[str, Json]:
        return {"mode": self.mode, "shift": self.shift, "buckets": self.buckets}

    def bucket_of(self, key: tuple[Any, ...]) -> int | None:
        """The chunk of `key` when it can be computed here (``range``), else None."""
        if self.mode == "range" and isinstance(key[0], int):
            return int(key[0]) >> self.shift
        if self.mode == "whole":
            return 0
        return None


class Chunk:
    """One chunk: the database's digest of it, and its rows (keyed, in key order).

    Row digests are computed the first time a diff needs them: most chunks never differ."""

    __slots__ = ("_digests", "digest", "rows")

    def __init__(
        self,
        digest: tuple[int, int],
        rows: Mapping[tuple[Any, ...], tuple[Any, ...]],
        digests: Mapping[tuple[Any, ...], bytes] | None = None,
    ) -> None:
        self.digest = digest
        self.rows = rows
        self._digests = digests

    @property
    def digests(self) -> Mapping[tuple[Any, ...], bytes]:
        if self._digests is None:
            self._digests = {k: row_digest(r) for k, r in self.rows.items()}
        return self._digests


class ChunkedView(Mapping[tuple[Any, ...], Any]):
    """A table's rows (or row digests) seen through its chunks, in chunk then key order.

    Snapshots after the first reuse unchanged chunks from the one before, so a snapshot costs
    the chunks that changed, not the table."""

    def __init__(self, chunks: Mapping[int, Chunk], chunking: Chunking, attr: str) -> None:
        self._chunks = chunks
        self._chunking = chunking
        self._attr = attr
        self._len = sum(len(c.rows) for c in chunks.values())
        self._index: dict[tuple[Any, ...], int] | None = None

    def _part(self, bucket: int) -> Mapping[tuple[Any, ...], Any]:
        chunk = self._chunks.get(bucket)
        return getattr(chunk, self._attr) if chunk is not None else {}

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        bucket = self._chunking.bucket_of(key)
        if bucket is None:
            if self._index is None:
                self._index = {k: b for b, c in self._chunks.items() for k in c.rows}
            bucket = self._index.get(key)
            if bucket is None:
                raise KeyError(key)
        return self._part(bucket)[key]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for bucket in sorted(self._chunks):
            yield from getattr(self._chunks[bucket], self._attr)

    def __len__(self) -> int:
        return self._len


@dataclass(frozen=True)
class TableState:
    """One table's rows at one instant.

    ``rows`` maps the key to the row tuple. For a keyed table the key is the tuple of primary-key
    values; for a multiset table (no primary key, or duplicate key values) it is ``(digest, n)``
    for the n-th copy of a row. ``digests`` maps the same keys to row digests.
    """

    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    keyed: bool
    rows: Mapping[tuple[Any, ...], tuple[Any, ...]]
    digests: Mapping[tuple[Any, ...], bytes]
    digest: str
    note: str | None = None
    #: Set when the database computed the digests: how rows fall into chunks, and the chunks.
    chunking: Chunking | None = None
    chunks: Mapping[int, Chunk] | None = None

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def schema_json(self) -> dict[str, Json]:
        return {
            "columns": [c.model_dump() for c in self.columns],
            "primary_key": list(self.primary_key),
            "keyed": self.keyed,
        }

    def as_dict(self, row: Sequence[Any]) -> dict[str, Json]:
        """A row as ``{column: canonical value}``."""
        return {name: to_jsonable(v) for name, v in zip(self.column_names, row, strict=True)}

    def key_json(self, key: tuple[Any, ...]) -> list[Json] | None:
        return [to_jsonable(v) for v in key] if self.keyed else None

    def to_json(self) -> dict[str, Json]:
        out = self.schema_json()
        out["rows"] = [[to_jsonable(v) for v in row] for row in self.rows.values()]
        if self.chunking is not None:
            out["chunking"] = self.chunking.describe()
        out["digest"] = self.digest
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, name: str, raw: Any) -> TableState:
        """The table `to_json` wrote, its rows in the archived order with native values (see
        the module docstring). Keyed tables are keyed by their primary-key values again,
        multisets by (row digest, copy number); the table digest is the archived one. How the
        database cut the table into chunks is kept as written; the chunks are not rebuilt."""
        t = _TABLE.validate_python(raw, strict=True)
        columns = tuple(ColumnInfo.model_validate(c, strict=True) for c in t["columns"])
        names = [c.name for c in columns]
        pk = tuple(t["primary_key"])
        missing = [c for c in pk if c not in names]
        if missing:
            raise ValueError(f"table {name!r}: key columns {missing} are not among {names}")
        rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        digests: dict[tuple[Any, ...], bytes] = {}
        idx = [names.index(c) for c in pk]
        copies: Counter[bytes] = Counter()
        for n, raw_row in enumerate(t["rows"]):
            if len(raw_row) != len(columns):
                raise ValueError(
                    f"table {name!r}: row {n} has {len(raw_row)} values for {len(columns)} columns"
                )
            row = tuple(_restored(v) for v in raw_row)
            d = row_digest(row)
            if t["keyed"]:
                key = tuple(row[i] for i in idx)
                if key in rows:
                    raise ValueError(f"table {name!r}: key {list(key)!r} repeats (row {n})")
            else:
                key = (d, copies[d])
                copies[d] += 1
            rows[key] = row
            digests[key] = d
        chunking = t.get("chunking")
        return cls(
            name=name,
            columns=columns,
            primary_key=pk,
            keyed=t["keyed"],
            rows=MappingProxyType(rows),
            digests=MappingProxyType(digests),
            digest=t["digest"],
            note=t.get("note"),
            chunking=Chunking(**chunking) if chunking is not None else None,
        )


def _restored(value: Json) -> Any:
    """A row's value from its canonical form. A JSON column may hold an object that looks
    like a tag (``{"$int": "5"}``, stored as such): that stays the object it was, so the value
    always writes back the same canonical form."""
    if not isinstance(value, dict | list):
        return value
    if isinstance(value, dict) and len(value) == 1:
        # The two tags most columns hold, without the general path's two encodings.
        text = value.get("$bytes")
        if isinstance(text, str):
            try:
                data = base64.b64decode(text, validate=True)
            except ValueError:
                return value
            return data if base64.b64encode(data).decode("ascii") == text else value
        text = value.get("$decimal")
        if isinstance(text, str):
            try:
                number = decimal.Decimal(text)
            except ArithmeticError:
                return value
            return number if str(number) == text else value
    try:
        out = native(value)
    except (ValueError, TypeError, ArithmeticError):
        return value
    return out if dumps(out) == dumps(value) else value


class _ChunkingJson(TypedDict):
    mode: str
    shift: int
    buckets: int


class _TableJson(TypedDict):
    columns: list[dict[str, Any]]
    primary_key: list[str]
    keyed: bool
    rows: list[list[Any]]
    digest: str
    chunking: NotRequired[_ChunkingJson]
    note: NotRequired[str]


_TABLE: TypeAdapter[_TableJson] = TypeAdapter(_TableJson)


@dataclass(frozen=True)
class SqlState:
    """A database's state: its tables and schema objects. Read it in predicates::

    ev.before.sql("shop").rows("customers", country="NL")   # list of row dicts
    ev.after.sql("shop").count("orders")
    """

    tables: Mapping[str, TableState]
    objects: Mapping[str, SchemaObject] = field(default_factory=dict)

    def to_json(self) -> dict[str, Json]:
        return {
            "tables": {name: t.to_json() for name, t in self.tables.items()},
            "objects": {name: o.model_dump() for name, o in self.objects.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> SqlState:
        """The state `to_json` wrote (see the module docstring for its values); `spec` is not
        needed. Raises ValueError when `raw` is not such a state."""
        s = _STATE.validate_python(raw, strict=True)
        tables = {name: TableState.from_json(name, t) for name, t in s["tables"].items()}
        objects = {
            name: SchemaObject.model_validate(o, strict=True) for name, o in s["objects"].items()
        }
        return cls(MappingProxyType(tables), MappingProxyType(objects))

    def table(self, name: str) -> TableState:
        """One table's state; a name the database does not have raises `KeyError`."""
        try:
            return self.tables[name]
        except KeyError:
            known = ", ".join(self.tables) or "none"
            raise KeyError(f"no table {name!r} in this snapshot (tables: {known})") from None

    def rows(self, table: str, **where: Any) -> list[dict[str, Json]]:
        """Rows of `table` matching `where`, as ``{column: value}`` in key order."""
        t = self.table(table)
        out = []
        for row in t.rows.values():
            d = t.as_dict(row)
            if matches(d, where, f"table {table!r}"):
                out.append(d)
        return out

    def count(self, table: str, **where: Any) -> int:
        """How many rows of `table` match `where`."""
        if not where:
            return len(self.table(table).rows)
        return len(self.rows(table, **where))

    def has_table(self, table: str) -> bool:
        return table in self.tables

    def names(self) -> list[str]:
        """The table names (what claims and scopes talk about)."""
        return list(self.tables)

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` occurs in a value of `where` (``table`` or ``table.column``) whose
        canonical form is text: strings, and dates, times and UUIDs as their ISO text (so a
        state rebuilt from JSON, which holds them as that text, answers alike)."""
        table, _, column = where.partition(".")
        t = self.tables.get(table)
        if t is None:
            return False
        idx = [i for i, c in enumerate(t.column_names) if not column or c == column]
        return any(
            (s := _as_text(row[i])) is not None and text in s
            for row in t.rows.values()
            for i in idx
        )


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, _dt.date | _dt.time | uuid.UUID):
        return str(to_jsonable(value))
    return None


class _StateJson(TypedDict):
    tables: dict[str, Any]
    objects: dict[str, Any]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


def build_table(
    name: str,
    columns: tuple[ColumnInfo, ...],
    primary_key: tuple[str, ...],
    rows: list[tuple[Any, ...]],
) -> TableState:
    """Key and digest rows that were read in a deterministic order (by key, or by every column)."""
    names = [c.name for c in columns]
    digests: dict[tuple[Any, ...], bytes] = {}
    keyed_rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    table_hash = hashlib.blake2b(digest_size=32)
    table_hash.update(
        digest_json({"columns": [c.model_dump() for c in columns], "pk": primary_key}).encode()
    )
    note = None
    keyed = bool(primary_key)
    if keyed:
        idx = [names.index(c) for c in primary_key]
        if len(idx) == 1:
            i = idx[0]
            keys = [(r[i],) for r in rows]
        else:
            keys = list(map(itemgetter(*idx), rows))
        row_digests = list(map(row_digest, rows))
        digests.update(zip(keys, row_digests, strict=True))
        keyed_rows.update(zip(keys, rows, strict=True))
        table_hash.update(b"".join(row_digests))
        if len(keyed_rows) != len(rows):
            keyed = False
            note = "primary key values repeat (NULL in a key column?): compared as a multiset"
            digests.clear()
            keyed_rows.clear()
    if not keyed:
        # A multiset: the row's digest and its copy number make the key; sort for a stable
        # order whatever order the database returned equal rows in.
        table_hash = hashlib.blake2b(digest_size=32)
        table_hash.update(digest_json({"columns": [c.model_dump() for c in columns]}).encode())
        pairs = sorted(((row_digest(r), r) for r in rows), key=itemgetter(0))
        seen: Counter[bytes] = Counter()
        for d, r in pairs:
            n = seen[d]
            seen[d] += 1
            copy_key: tuple[Any, ...] = (d, n)
            digests[copy_key] = d
            keyed_rows[copy_key] = r
            table_hash.update(d)
    return TableState(
        name=name,
        columns=columns,
        primary_key=primary_key,
        keyed=keyed,
        rows=MappingProxyType(keyed_rows),
        digests=MappingProxyType(digests),
        digest="blake2b:" + table_hash.hexdigest(),
        note=note,
    )
