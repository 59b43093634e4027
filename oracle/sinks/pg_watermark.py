"""Where a PostgreSQL read stood in its cluster's transaction history: lets a later read of
the same database tell the rows it already holds from the others by their ``xmin`` alone.

SQL never changes a row version in place: an INSERT or UPDATE writes a new version whose
``xmin`` is the writing transaction's id, a DELETE ends a version, VACUUM FULL and CLUSTER
copy versions with their ``xmin``, and freezing keeps it. So in a later read of the same
database, a visible row version whose ``xmin`` had committed before the earlier read began
(*old*) was visible to that read, with the same stored bytes; every other visible version is
*new*. A chunk that has no new version and as many old ones as it held then holds exactly the
rows it held then, and its digest is the one the earlier read computed; only the other chunks
are read, and their digests computed from the rows read. The state and its digests are the
ones a read that hashes every row would give.

"Had committed before the read" is decided from the read's snapshot: an ``xmin`` that
precedes the snapshot's xmin (every transaction before it had ended), or one of the ``xmin``
values of the rows the read saw at or after it (`Watermark.seen`, kept per table). Anything
else, including a subtransaction of a transaction in progress then, counts as new: at worst a
chunk is read again.

It holds only where the row bytes are the value: a table is read this way only if every
column's value as read depends on its stored bytes alone (no enum, whose labels can be renamed
with no row touched; no composite or range type; see ``Column.stored``), with the same columns
and key as the earlier read. A database counts as the same only if it is the one read
(cluster system identifier and database oid), or one a fixture declared a copy of it made after
the read (`declare_copy`: ``CREATE DATABASE … TEMPLATE`` of a template nobody can enter). A
read whose transaction counter moved by 2^30 or more, or backwards, hashes every row.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: At most this many ``xmin`` values at or after a read's snapshot xmin are kept per table;
#: a table with more is hashed in full by the next read.
SEEN_LIMIT = 4096
#: A later read may use a watermark while the transaction counter moved less than this.
HORIZON = 1 << 30

_MASK = (1 << 32) - 1


@dataclass(frozen=True)
class Position:
    """A read's place: cluster, database, and its snapshot (64-bit transaction ids)."""

    cluster: str
    database: int
    xmin: int
    xmax: int


@dataclass
class Watermark:
    """The `Position` of the read that produced a state, and per table the ``xmin`` values
    (32-bit) of its visible rows that do not precede the snapshot's xmin."""

    position: Position
    seen: Mapping[str, frozenset[int]]
    #: Oids of databases declared copies of the one read, made after the read.
    copies: set[int] = field(default_factory=set)

    def usable(self, now: Position) -> bool:
        """Whether a read at `now` may tell old rows from new by this watermark."""
        p = self.position
        same = now.database == p.database or now.database in self.copies
        return now.cluster == p.cluster and same and p.xmax <= now.xmax < p.xmin + HORIZON

    def old(self, table: str) -> str | None:
        """A SQL condition true for the row versions of `table` that were visible to the
        read (None when the table cannot be read this way)."""
        seen = self.seen.get(table)
        if seen is None:
            return None
        low = self.position.xmin & _MASK
        cond = f"pg_catalog.age(xmin) > (SELECT pg_catalog.age('{low}'::pg_catalog.xid))"
        if seen:
            listed = ",".join(str(x) for x in sorted(seen))
            cond += f" OR xmin = ANY('{{{listed}}}'::pg_catalog.xid[])"
        return f"({cond})"


def since(position: Position, xids: Iterable[int]) -> frozenset[int] | None:
    """The 32-bit `xids` that do not precede `position`'s snapshot xmin; None past
    `SEEN_LIMIT`."""
    low = position.xmin & _MASK
    kept = frozenset(x for x in xids if ((x - low) & _MASK) < (1 << 31))
    return kept if len(kept) <= SEEN_LIMIT else None


def not_before(position: Position) -> str:
    """A SQL condition true for row versions whose ``xmin`` does not precede `position`."""
    low = position.xmin & _MASK
    return f"pg_catalog.age(xmin) <= (SELECT pg_catalog.age('{low}'::pg_catalog.xid))"


_WATERMARKS: dict[int, Watermark] = {}
_LOCK = threading.Lock()


def attach(state: Any, mark: Watermark) -> None:
    """Record `mark` as the watermark of `state` (kept while `state` lives)."""
    key = id(state)
    with _LOCK:
        _WATERMARKS[key] = mark
    weakref.finalize(state, _forget, key, mark)


def _forget(key: int, mark: Watermark) -> None:
    with _LOCK:
        if _WATERMARKS.get(key) is mark:
            del _WATERMARKS[key]


def of(state: Any) -> Watermark | None:
    """The watermark of `state`, if a PostgreSQL read produced it in this process."""
    if state is None:
        return None
    with _LOCK:
        return _WATERMARKS.get(id(state))


def declare_copy(state: Any, database: int) -> None:
    """Declare that database oid `database` was created as a copy (``CREATE DATABASE …
    TEMPLATE``) of the database `state` was read from, after that read, and that the source
    could not change in between: reads of it may use `state`'s watermark. Only a fixture that
    made the copy can say so."""
    mark = of(state)
    if mark is not None:
        with _LOCK:
            mark.copies.add(database)


_POSITION = (
    "CASE WHEN pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') "
    "THEN (SELECT system_identifier::pg_catalog.text FROM pg_catalog.pg_control_system()) END, "
    "(SELECT oid::pg_catalog.int8 FROM pg_catalog.pg_database "
    "WHERE datname = pg_catalog.current_database()), "
    "pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::pg_catalog.text::int8, "
    "pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text::int8"
)


def position_sql() -> str:
    """Select-list items that read a `Position` (see `position`); in the statement that
    takes the transaction's snapshot, or after it."""
    return _POSITION


def position(row: Any) -> Position | None:
    """The `Position` from the four values of `position_sql`; None when the cluster cannot
    be identified (the account may not call ``pg_control_system``)."""
    cluster, database, xmin, xmax = row
    if cluster is None or database is None:
        return None
    return Position(str(cluster), int(database), int(xmin), int(xmax))
