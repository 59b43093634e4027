"""Snapshots of PostgreSQL and MariaDB where the database computes the digests.

Every table is split into *chunks* (see `Chunking`): consecutive ranges of a single integer
key, buckets of a keyed hash of any other key, or the whole table when it has no key. One query
per table asks the server for each chunk's row count and the sum of its rows' hashes, keyed by
a secret seed that never leaves this process. Rows are then fetched only for the chunks whose
digests differ from the sink's previous snapshot (its *base*); every other chunk is reused from
that base as it is. A trial that changes 10 rows of a 1,000,000-row table therefore moves about
a thousand chunk digests and the rows of the chunks that hold those 10 rows.

Why this is sound:

- the row hash covers every column's exact stored value (the binary ``send`` form on
  PostgreSQL for types whose hash would fold distinct values together: 64-bit integers,
  timestamps, floats, numerics with their scale, JSON, arrays, enums by label; a quoted text
  form on MariaDB, with every digit of a float), so any change to a row changes its hash;
- each value is read in the form it is hashed in, so a changed hash is a changed value; where
  a reading would still fold two stored values together, the diff finds a chunk whose digest
  moved with no row that reads differently, and fails instead of reporting nothing;
- an insert or delete anywhere, also between chunk boundaries or past either end of the key
  range, changes the count and the sum of the chunk the key falls into, or creates or empties
  a chunk;
- a chunk's digest is an order-free sum, so it is also a sound digest of a table without a key
  (a multiset); sums are exact (no wrap-around) on both servers;
- the reused rows are certified by the digests the server computed *now*, on this database: a
  base that came from anywhere (the template, an earlier trial) can save work but never changes
  what the snapshot says. One exception, on PostgreSQL: when the base was read from this very
  database (or from one a fixture declared this one a copy of), and every column's value is its
  stored bytes, the rows' ``xmin`` tell which chunks hold exactly the base's row versions; only
  the others are counted, fetched and hashed, and the state is the one a full hash gives
  (`oracle.sinks.pg_watermark`). A big table's per-chunk query runs in two halves by storage
  place (``ctid``) at once, the second on another connection that imports the read's
  snapshot: the same rows, counted once each;
- the seed is secret, so nobody can choose a change whose hashes cancel;
- nothing is kept in the database: no trigger, helper table or function the agent could drop,
  disable or replace. Built-in functions are called schema-qualified under a fixed
  ``search_path``, and ``row_security`` is off, so a policy that would hide rows raises instead.
"""

from __future__ import annotations

import contextlib
import decimal
import json
import math
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from oracle.base.canonical import JSON_NULL, digest_json, row_digest
from oracle.evidence.snapshot import SnapshotError
from oracle.sinks import pg_watermark
from oracle.sinks.sql_state import (
    Chunk,
    ChunkedView,
    Chunking,
    ColumnInfo,
    SchemaObject,
    SqlState,
    TableState,
)

#: Rows per chunk the chunking aims at.
TARGET_CHUNK_ROWS = 1024
#: Chunks holding on average this many times the target are cut again.
REGROW = 16
#: Above this many differing range chunks, fetch with one scan instead of index ranges.
MAX_RANGES = 64
#: A table whose base held at least this many rows has its per-chunk aggregates computed in
#: two halves side by side, where the reader has a second connection (PostgreSQL).
SPLIT_ROWS = 1 << 18

#: Keys the database's row hashes; one per process, so that bases can be shared between
#: sinks of the same process (a template's state reused by every sandbox cloned from it).
PROCESS_SEED = secrets.randbits(62)
PROCESS_SEED_KEY = secrets.randbits(62)

type Cursor = Any
type Key = tuple[Any, ...]
type Row = tuple[Any, ...]


@dataclass(frozen=True)
class Column:
    """One column as the server describes it, with how to hash and read it."""

    info: ColumnInfo
    hash_expr: str
    select_expr: str
    decode: Callable[[Any], Any] | None = None
    integer: bool = False
    #: Its value as read depends on the bytes stored in the row alone (see `Watermark`).
    stored: bool = False


class Dialect(Protocol):
    """What differs between PostgreSQL and MariaDB: catalog queries and SQL spelling."""

    name: str

    def begin(self, cur: Cursor, timeout: float) -> None: ...

    def tables(self, cur: Cursor) -> list[str]: ...

    def hidden(self, cur: Cursor) -> str | None: ...

    def columns(self, cur: Cursor, table: str) -> list[Column]: ...

    def primary_key(self, cur: Cursor, table: str) -> tuple[str, ...]: ...

    def objects(self, cur: Cursor, tables: Sequence[str]) -> dict[str, SchemaObject]: ...

    def qualified(self, table: str) -> str: ...

    def quote(self, ident: str) -> str: ...

    def row_hash(self, columns: Sequence[Column], seed: int) -> str: ...

    def key_hash(self, columns: Sequence[Column], seed: int, buckets: int) -> str: ...

    def range_bucket(self, column: Column, shift: int) -> str: ...

    def bucket_list(self, expr: str, buckets: Sequence[int]) -> str: ...


def _json_number(text: str) -> float | decimal.Decimal:
    """A JSON number with a fraction or an exponent, exactly as written: a `float` when the
    text is that float's shortest form (``19.99``, ``1.0``), else a `Decimal` of the text
    (``19.990000000000000001``, ``1.50``), so two numbers written differently never read
    alike. Integers stay `int`."""
    value = float(text)
    return value if repr(value) == text else decimal.Decimal(text)


#: One decoder for every value: ``json.loads`` with a hook would build a new one each call.
_JSON = json.JSONDecoder(parse_float=_json_number)


def parse_json(value: Any) -> Any:
    """A JSON column's text as a structure; JSON ``null`` stays apart from SQL NULL, and
    numbers keep how they were written (see `_json_number`)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8")
    parsed = _JSON.decode(value)
    return JSON_NULL if parsed is None else parsed


def _choose_chunking(
    mode: str, count: int, low: int | None, high: int | None, seed: int
) -> Chunking:
    if mode == "range":
        span = (high - low + 1) if low is not None and high is not None else 1
        width = TARGET_CHUNK_ROWS * span / max(count, 1)
        return Chunking("range", shift=max(0, math.ceil(math.log2(max(width, 1.0)))), seed=seed)
    if mode == "hash":
        buckets = 1 << max(0, math.ceil(math.log2(max(count / TARGET_CHUNK_ROWS, 1.0))))
        return Chunking("hash", buckets=buckets, seed=seed)
    return Chunking("whole", seed=seed)


class ServerReader:
    """Reads one database's state through `dialect`, reusing what `base` already holds.

    ``tables``/``exclude`` choose the tables; `sink` names the sink in errors. `second`, where
    given, opens another connection to the same database: a big table's per-chunk aggregates
    are then computed in two halves at once, the second half on that connection in a
    transaction that sees the very snapshot of the first (where the dialect can share it).
    """

    def __init__(
        self,
        sink: str,
        dialect: Dialect,
        *,
        tables: Sequence[str] | None,
        exclude: Iterable[str],
        timeout: float,
        where: str,
        second: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.sink = sink
        self.dialect = dialect
        self.tables = tables
        self.exclude = frozenset(exclude)
        self.timeout = timeout
        self.where = where
        #: Rows fetched and chunks reused by the last read (for benchmarks and tests).
        self.stats: dict[str, int] = {}
        #: The base's watermark, when this read may use it; the seen xmins of this read.
        self._mark: pg_watermark.Watermark | None = None
        self._seen: dict[str, frozenset[int]] = {}
        self._second = second
        #: The second connection's cursor in this read (None: not opened, or it cannot be).
        self._other: Cursor | None = None
        self._other_tried = False
        #: What this read opened besides `cur` (the second connection), closed as it ends.
        self._stack = contextlib.ExitStack()

    def _error(self, table: str | None, exc: BaseException) -> SnapshotError:
        what = f"table {table!r} of {self.where}" if table else self.where
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return SnapshotError(self.sink, f"cannot read {what}: {type(exc).__name__}: {text}")

    def read(self, cur: Cursor, base: SqlState | None) -> SqlState:
        """Every selected table and the schema objects, in one read-only transaction."""
        self.stats = {
            "rows_fetched": 0,
            "chunks_reused": 0,
            "chunks_fetched": 0,
            # Tables whose unchanged chunks were told by their rows' xmin, not their hashes.
            "tables_by_xmin": 0,
            # Tables whose per-chunk aggregates were computed in two halves side by side.
            "tables_split": 0,
        }
        with contextlib.ExitStack() as self._stack:
            try:
                return self._read(cur, base)
            finally:
                self._other, self._other_tried = None, False

    def _read(self, cur: Cursor, base: SqlState | None) -> SqlState:
        try:
            self.dialect.begin(cur, self.timeout)
            present = self.dialect.tables(cur)
            # Every table is observed unless the sink names them: none may be hidden.
            hidden = self.dialect.hidden(cur) if self.tables is None else None
        except SnapshotError:
            raise
        except Exception as exc:
            raise self._error(None, exc) from exc
        if hidden is not None:
            raise SnapshotError(self.sink, f"cannot observe every table of {self.where}: {hidden}")
        names = self._select(present)
        described: dict[str, tuple[list[Column], tuple[str, ...]]] = {}
        describe = getattr(self.dialect, "describe", None)
        now: pg_watermark.Position | None = getattr(self.dialect, "position", None)
        mark = pg_watermark.of(base)
        self._mark = mark if mark is not None and now is not None and mark.usable(now) else None
        self._seen = {}
        try:
            if describe is not None and names:
                described = describe(cur, names)
        except Exception as exc:
            raise self._error(None, exc) from exc
        tables: dict[str, TableState] = {}
        for name in names:
            try:
                old = base.tables.get(name) if base is not None else None
                tables[name] = self._table(cur, name, old, described.get(name), now)
            except SnapshotError:
                raise
            except Exception as exc:
                raise self._error(name, exc) from exc
        try:
            objects = self.dialect.objects(cur, names)
        except Exception as exc:
            raise self._error(None, exc) from exc
        state = SqlState(MappingProxyType(tables), MappingProxyType(objects))
        if now is not None:
            pg_watermark.attach(state, pg_watermark.Watermark(now, MappingProxyType(self._seen)))
        return state

    def _select(self, present: Sequence[str]) -> list[str]:
        if self.tables is None:
            chosen = list(present)
        else:
            missing = [t for t in self.tables if t not in present]
            if missing:
                raise SnapshotError(
                    self.sink,
                    f"table(s) {', '.join(map(repr, missing))} named by the sink are not in "
                    f"{self.where}, or not visible to its account (present: "
                    f"{', '.join(present) or 'none'})",
                )
            chosen = list(self.tables)
        return sorted(t for t in chosen if t not in self.exclude)

    # -- one table ---------------------------------------------------------------------------

    def _table(
        self,
        cur: Cursor,
        name: str,
        old: TableState | None,
        described: tuple[list[Column], tuple[str, ...]] | None = None,
        now: pg_watermark.Position | None = None,
    ) -> TableState:
        d = self.dialect
        columns, pk = described or (d.columns(cur, name), ())
        if not columns:
            raise SnapshotError(self.sink, f"table {name!r} of {self.where} has no columns")
        infos = tuple(c.info for c in columns)
        if described is None:
            pk = d.primary_key(cur, name)
        by_name = {c.info.name: c for c in columns}
        pk_cols = [by_name[c] for c in pk]
        if len(pk_cols) == 1 and pk_cols[0].integer:
            mode = "range"
        elif pk_cols:
            mode = "hash"
        else:
            mode = "whole"
        reuse = (
            old is not None
            and old.chunking is not None
            and old.chunks is not None
            and old.columns == infos
            and old.primary_key == pk
            and old.chunking.mode == mode
            and old.chunking.seed == PROCESS_SEED
            # A table that grew far past what its chunks were cut for is cut again (once).
            and len(old.rows) <= REGROW * TARGET_CHUNK_ROWS * max(1, len(old.chunks))
        )
        table = d.qualified(name)
        if reuse:
            assert old is not None and old.chunking is not None
            chunking = old.chunking
        else:
            chunking = self._new_chunking(cur, table, mode, pk_cols)
        bucket = self._bucket_expr(chunking, pk_cols)
        old_chunks: Mapping[int, Chunk] = old.chunks if reuse and old and old.chunks else {}
        stored = now is not None and all(c.stored for c in columns)
        old_rows = self._mark.old(name) if self._mark and reuse and stored else None
        row_hash = d.row_hash(columns, PROCESS_SEED)
        big = old is not None and len(old.rows) >= SPLIT_ROWS
        if old_rows is not None:
            # Counts only: old row versions are the base's (see oracle.sinks.pg_watermark).
            grouped = self._grouped(
                cur, table, f"{bucket}, count(*), count(*) FILTER (WHERE NOT {old_rows})", big
            )
            counts = {b: (n, new) for b, n, new in grouped}
            wanted = sorted(
                b
                for b, (n, new) in counts.items()
                if new or (c := old_chunks.get(b)) is None or c.digest[0] != n
            )
            extra = [row_hash, "xmin::pg_catalog.text::pg_catalog.int8"]
            self.stats["tables_by_xmin"] += 1
        else:
            grouped = self._grouped(cur, table, f"{bucket}, count(*), sum({row_hash})", big)
            server = {b: (n, s) for b, n, s in grouped}
            counts = {b: (n, 0) for b, (n, _) in server.items()}
            wanted = sorted(
                b for b, dg in server.items() if (c := old_chunks.get(b)) is None or c.digest != dg
            )
            extra = []
        self.stats["chunks_reused"] += len(counts) - len(wanted)
        self.stats["chunks_fetched"] += len(wanted)
        fetched, extras = self._fetch(
            cur, table, columns, pk_cols, chunking, bucket, wanted, len(counts), extra
        )
        if old_rows is not None:
            server = {
                b: (len(fetched[b]), sum(h for h, _ in extras[b]))
                if b in fetched
                else old_chunks[b].digest
                for b in counts
            }
            if now is not None and self._mark is not None:
                seen = self._mark.seen.get(name, frozenset())
                xids = [x & 0xFFFFFFFF for part in extras.values() for _, x in part]
                kept = pg_watermark.since(now, [*seen, *xids])
                if kept is not None:
                    self._seen[name] = kept
        elif stored and now is not None:
            cur.execute(
                f"SELECT DISTINCT xmin::pg_catalog.text::pg_catalog.int8 FROM {table} "
                f"WHERE {pg_watermark.not_before(now)} LIMIT {pg_watermark.SEEN_LIMIT + 1}"
            )
            kept = pg_watermark.since(now, [int(r[0]) for r in cur.fetchall()])
            if kept is not None:
                self._seen[name] = kept
        chunks: dict[int, Chunk] = {}
        for b in sorted(server):
            if b in fetched:
                rows = fetched[b]
                chunk = self._chunk(server[b], rows, pk, infos)
            else:
                chunk = old_chunks[b]
            chunks[b] = chunk
        for b, (n, _) in counts.items():
            if len(chunks[b].rows) != n:
                raise SnapshotError(
                    self.sink,
                    f"table {name!r} of {self.where}: chunk {b} has {n} rows on the server but "
                    f"{len(chunks[b].rows)} were read",
                )
        frozen = MappingProxyType(chunks)
        digest = (
            "server:"
            + digest_json(
                {
                    "columns": [c.model_dump() for c in infos],
                    "pk": list(pk),
                    "chunking": chunking.describe(),
                    "chunks": [[b, n, s] for b, (n, s) in sorted(server.items())],
                }
            ).split(":", 1)[1]
        )
        return TableState(
            name=name,
            columns=infos,
            primary_key=pk,
            keyed=bool(pk),
            rows=ChunkedView(frozen, chunking, "rows"),
            digests=ChunkedView(frozen, chunking, "digests"),
            digest=digest,
            chunking=chunking,
            chunks=frozen,
        )

    def _grouped(self, cur: Cursor, table: str, select: str, big: bool) -> list[Row]:
        """`select` (the chunk first, then two aggregates that add up: counts, sums) of the
        whole of `table`, grouped by chunk, as the dialect plans it best. A `big` table is
        read in two halves at once where a second connection can see this read's snapshot;
        each chunk's aggregates are then the sums of its two halves'."""
        plan = getattr(self.dialect, "grouped", None)

        def run(c: Cursor, where: str) -> list[Row]:
            query = f"SELECT {select} FROM {table}{where} GROUP BY 1"
            if plan is None:
                c.execute(query)
            else:
                c.execute(plan(query))
                c.nextset()
            return [(int(b), int(x), int(y)) for b, x, y in c.fetchall()]

        other = self._other_cursor(cur) if big else None
        if other is None:
            return run(cur, "")
        first, second = self.dialect.halves(cur, table)  # type: ignore[attr-defined]
        with ThreadPoolExecutor(1, thread_name_prefix="oracle-sql-half") as pool:
            theirs = pool.submit(run, other, f" WHERE {second}")
            mine = run(cur, f" WHERE {first}")
            both = [*mine, *theirs.result()]
        sums: dict[int, tuple[int, int]] = {}
        for b, x, y in both:
            was = sums.get(b, (0, 0))
            sums[b] = (was[0] + x, was[1] + y)
        self.stats["tables_split"] += 1
        return [(b, x, y) for b, (x, y) in sums.items()]

    def _other_cursor(self, cur: Cursor) -> Cursor | None:
        """A cursor of the second connection, in a transaction that sees what `cur`'s sees
        (opened once a read); None where there is none: no `second`, a dialect that cannot
        share its snapshot, or a connection that could not be opened (the read goes on in
        one piece)."""
        if self._other is not None or self._other_tried:
            return self._other
        self._other_tried = True
        share = getattr(self.dialect, "share", None)
        if self._second is None or share is None:
            return None
        snapshot = share(cur)  # on the read's own transaction: a failure is the read's
        try:
            conn = self._stack.enter_context(self._second())
            other = conn.cursor()
            self._stack.callback(other.close)
            self.dialect.join(other, snapshot)  # type: ignore[attr-defined]
        except Exception:
            return None
        self._other = other
        return other

    def _new_chunking(
        self, cur: Cursor, table: str, mode: str, pk_cols: Sequence[Column]
    ) -> Chunking:
        if mode == "range":
            key = pk_cols[0].select_expr
            cur.execute(f"SELECT count(*), min({key}), max({key}) FROM {table}")
            n, low, high = cur.fetchone()
            return _choose_chunking(mode, int(n), low, high, PROCESS_SEED)
        cur.execute(f"SELECT count(*) FROM {table}")
        (n,) = cur.fetchone()
        return _choose_chunking(mode, int(n), None, None, PROCESS_SEED)

    def _bucket_expr(self, chunking: Chunking, pk_cols: Sequence[Column]) -> str:
        if chunking.mode == "range":
            return self.dialect.range_bucket(pk_cols[0], chunking.shift)
        if chunking.mode == "hash":
            return self.dialect.key_hash(pk_cols, PROCESS_SEED_KEY, chunking.buckets)
        return "0"

    def _fetch(
        self,
        cur: Cursor,
        table: str,
        columns: Sequence[Column],
        pk_cols: Sequence[Column],
        chunking: Chunking,
        bucket: str,
        wanted: Sequence[int],
        total: int,
        extra: Sequence[str] = (),
    ) -> tuple[dict[int, list[Row]], dict[int, list[Row]]]:
        """The rows of the `wanted` chunks, and per chunk the values of `extra` for each row
        (expressions read beside the row, in the same order)."""
        if not wanted:
            return {}, {}
        select = ", ".join([*extra, *(c.select_expr for c in columns)])
        where = ""
        if len(wanted) < total:
            if chunking.mode == "range" and len(wanted) <= MAX_RANGES:
                key = pk_cols[0].select_expr
                ranges = [
                    f"({key} >= {b << chunking.shift} AND {key} < {(b + 1) << chunking.shift})"
                    for b in wanted
                ]
                where = " WHERE " + " OR ".join(ranges)
            else:
                where = " WHERE " + self.dialect.bucket_list(bucket, wanted)
        order = ", ".join(c.select_expr for c in pk_cols) or ", ".join(
            c.select_expr for c in columns
        )
        cur.execute(f"SELECT {bucket}, {select} FROM {table}{where} ORDER BY {order}")
        decoders = [(i, c.decode) for i, c in enumerate(columns) if c.decode is not None]
        out: dict[int, list[Row]] = {b: [] for b in wanted}
        more: dict[int, list[Row]] = {b: [] for b in wanted}
        k = 1 + len(extra)
        for raw in cur.fetchall():
            b = raw[0] if type(raw[0]) is int else int(raw[0])
            part = out.get(b)
            if part is None:
                continue
            if k > 1:
                more[b].append(tuple(int(v) for v in raw[1:k]))
            if decoders:
                row = list(raw[k:])
                for i, fn in decoders:
                    row[i] = fn(row[i])
                part.append(tuple(row))
            else:
                part.append(tuple(raw[k:]))
        self.stats["rows_fetched"] += sum(len(v) for v in out.values())
        return out, more

    @staticmethod
    def _chunk(
        digest: tuple[int, int], rows: list[Row], pk: tuple[str, ...], infos: Sequence[ColumnInfo]
    ) -> Chunk:
        names = [c.name for c in infos]
        if pk:
            idx = [names.index(c) for c in pk]
            if len(idx) == 1:
                i = idx[0]
                return Chunk(digest, {(r[i],): r for r in rows})
            return Chunk(digest, {tuple(r[i] for i in idx): r for r in rows})
        # A multiset: the row's digest and its copy number make the key, as for SQLite.
        pairs = sorted(((row_digest(r), r) for r in rows), key=lambda p: p[0])
        seen: dict[bytes, int] = {}
        keyed: dict[Key, Row] = {}
        dig: dict[Key, bytes] = {}
        for d, r in pairs:
            n = seen.get(d, 0)
            seen[d] = n + 1
            keyed[(d, n)] = r
            dig[(d, n)] = d
        return Chunk(digest, keyed, dig)
