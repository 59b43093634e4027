"""PostgreSQL's catalog and SQL spelling for server-side digests (see `sql_server`).

Values are read in one canonical form: timestamps with zones in UTC, numerics as `Decimal`
with their scale, JSON and JSONB parsed (a JSON ``null`` is `JSON_NULL`, not SQL NULL; numbers
as written, see `parse_json`), arrays as lists, bytea as bytes, enums by label, intervals as
ISO 8601 text (``P1M`` and ``P30D`` stay apart, as PostgreSQL stores them), and every type
psycopg does not know by its text form under fixed session settings. ``infinity`` dates and
timestamps are read as those words.

Every value is read as exactly as it is hashed: a ``json`` column (text, kept as written) is
both hashed and read in its ``jsonb`` form, so spacing, key order and repeated keys, which the
parsed structure does not keep, do not count as changes either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oracle.sinks import pg_watermark
from oracle.sinks.sql_server import Column, Cursor, parse_json
from oracle.sinks.sql_state import ColumnInfo, SchemaObject

#: Types whose built-in hash is exact for distinct stored values (no folding), so the row
#: hash can use them directly; every other type is hashed through its binary send form.
_NATIVE_HASH = {"int2", "int4", "bool", "date", "bytea", "uuid", "oid", "char"}
_TEXT = {"text", "varchar", "bpchar", "name"}
#: Types psycopg decodes into Python values; other types are read as text.
_NATIVE_READ = {
    "int2",
    "int4",
    "int8",
    "float4",
    "float8",
    "numeric",
    "bool",
    "text",
    "varchar",
    "bpchar",
    "name",
    "char",
    "bytea",
    "date",
    "time",
    "timetz",
    "timestamp",
    "timestamptz",
    "uuid",
    "oid",
}
_INTEGER = {"int2", "int4", "int8"}
#: Types whose value as read is a function of the bytes stored in the row alone (no catalog
#: entry, such as an enum's labels, and no setting the reader does not fix takes part).
_STORED = _NATIVE_READ | {"json", "jsonb", "interval", "inet", "cidr", "macaddr", "macaddr8"}
_JSON = {"json", "jsonb"}

#: What a column is: its name, type, nullability, default, base type (through a domain) and
#: element type (of an array), and whether its collation is deterministic.
_COLUMN_FIELDS = """a.attname,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       NOT a.attnotnull,
       pg_catalog.pg_get_expr(d.adbin, d.adrelid),
       bt.typname, bt.typtype, bt.typcategory, bt.typsend::pg_catalog.regproc::pg_catalog.text,
       et.typname, et.typtype,
       COALESCE(coll.collisdeterministic, true)"""
_COLUMN_JOINS = """JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_type bt
  ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_catalog.pg_type et ON et.oid = bt.typelem AND bt.typcategory = 'A'
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_catalog.pg_collation coll ON coll.oid = a.attcollation"""

_COLUMNS = f"""
SELECT {_COLUMN_FIELDS}
FROM pg_catalog.pg_attribute a
{_COLUMN_JOINS}
WHERE a.attrelid = %s::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

#: `_COLUMNS` for every table of a schema at once, with each column's place in the primary
#: key (NULL when it is not part of it).
_DESCRIBE = f"""
SELECT c.relname, {_COLUMN_FIELDS},
       pg_catalog.array_position(i.indkey::pg_catalog.int2[], a.attnum)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
{_COLUMN_JOINS}
LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = %s AND c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.relname, a.attnum
"""

_PRIMARY_KEY = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN LATERAL pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s::pg_catalog.regclass AND i.indisprimary
ORDER BY k.n
"""


def _quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _settings(timeout: float) -> str:
    """The settings every read transaction runs with, as one list of ``set_config`` calls:
    value texts do not depend on the server's or the agent's defaults, built-ins cannot be
    shadowed, and a row-level policy raises instead of hiding rows. Constants, so that they
    go in one simple query (no parameters)."""
    settings = (
        ("search_path", "pg_catalog, pg_temp"),
        ("TimeZone", "UTC"),
        ("DateStyle", "ISO, YMD"),
        # Months, days and time apart: psycopg would read '1 mon' as 30 days.
        ("IntervalStyle", "iso_8601"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("row_security", "off"),
        ("client_encoding", "UTF8"),
        ("jit", "off"),
        ("lock_timeout", f"{max(1, int(timeout * 1000))}ms"),
    )
    return ", ".join(
        f"pg_catalog.set_config({_literal(k)}, {_literal(v)}, true)" for k, v in settings
    )


class PostgresDialect:
    """Catalog queries and expressions for one schema of a PostgreSQL database."""

    name = "postgresql"

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema
        #: Where the transaction `begin` opened stands (see `oracle.sinks.pg_watermark`).
        self.position: pg_watermark.Position | None = None
        self._timeout = 30.0

    def quote(self, ident: str) -> str:
        return _quote(ident)

    def qualified(self, table: str) -> str:
        return f"{_quote(self.schema)}.{_quote(table)}"

    def begin(self, cur: Cursor, timeout: float) -> None:
        cur.connection.rollback()
        cur.execute(
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
            f"SELECT pg_catalog.current_setting('server_version_num')::int, "
            f"{pg_watermark.position_sql()}, {_settings(timeout)}"
        )
        cur.nextset()  # past the SET's result
        row = cur.fetchone()
        version = row[0]
        if version < 140000:
            raise RuntimeError(f"PostgreSQL 14 or newer is needed (the server is {version})")
        self.position = pg_watermark.position(row[1:5])
        self._timeout = timeout

    def share(self, cur: Cursor) -> str:
        """The id of the snapshot of the transaction `begin` opened on `cur`, for `join`."""
        cur.execute("SELECT pg_catalog.pg_export_snapshot()")
        return str(cur.fetchone()[0])

    def join(self, cur: Cursor, snapshot: str) -> None:
        """Open on `cur` (another connection to the same database) a transaction that sees
        exactly what the one `share` named sees, with the same settings."""
        cur.connection.rollback()
        cur.execute(
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
            f"SET TRANSACTION SNAPSHOT {_literal(snapshot)}; "
            f"SELECT {_settings(self._timeout)}"
        )
        cur.nextset()
        cur.nextset()
        cur.fetchall()

    def halves(self, cur: Cursor, table: str) -> tuple[str, str]:
        """Two conditions that split the rows of `table` (qualified) by where they are stored
        (its first and its second half of pages; the second has no end), each read by a TID
        range scan."""
        cur.execute(
            "SELECT pg_catalog.pg_relation_size(%s::pg_catalog.regclass) "
            "/ pg_catalog.current_setting('block_size')::pg_catalog.int8",
            (table,),
        )
        middle = int(cur.fetchone()[0]) // 2
        return f"ctid < '({middle},0)'::pg_catalog.tid", f"ctid >= '({middle},0)'::pg_catalog.tid"

    def grouped(self, query: str) -> str:
        """`query` (a GROUP BY of a whole table by its chunk) planned with hashing: the
        planner takes the chunk expression for as many groups as rows and would sort the
        table. Its result is the second of the three (see `ServerReader`)."""
        return f"SET LOCAL enable_sort = off; {query}; SET LOCAL enable_sort TO DEFAULT"

    def tables(self, cur: Cursor) -> list[str]:
        cur.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "ORDER BY 1",
            (self.schema,),
        )
        return [r[0] for r in cur.fetchall()]

    def hidden(self, cur: Cursor) -> str | None:
        """None: the catalog lists every table whatever the account's privileges; reading one
        it may not read fails (and names it)."""
        return None

    def columns(self, cur: Cursor, table: str) -> list[Column]:
        cur.execute(_COLUMNS, (self.qualified(table),))
        return [_column(*row) for row in cur.fetchall()]

    def describe(
        self, cur: Cursor, tables: Sequence[str]
    ) -> dict[str, tuple[list[Column], tuple[str, ...]]]:
        """`columns` and `primary_key` of every table in `tables`, in one query."""
        cur.execute(_DESCRIBE, (self.schema, list(tables)))
        cols: dict[str, list[Column]] = {t: [] for t in tables}
        keys: dict[str, list[tuple[int, str]]] = {t: [] for t in tables}
        for table, *row, place in cur.fetchall():
            cols[table].append(_column(*row))
            if place is not None:
                keys[table].append((int(place), row[0]))
        return {t: (cols[t], tuple(n for _, n in sorted(keys[t]))) for t in tables}

    def primary_key(self, cur: Cursor, table: str) -> tuple[str, ...]:
        cur.execute(_PRIMARY_KEY, (self.qualified(table),))
        return tuple(r[0] for r in cur.fetchall())

    def row_hash(self, columns: Sequence[Column], seed: int) -> str:
        fields = ", ".join(c.hash_expr for c in columns)
        return f"pg_catalog.hash_record_extended(ROW({fields}), {seed})"

    def key_hash(self, columns: Sequence[Column], seed: int, buckets: int) -> str:
        fields = ", ".join(c.hash_expr for c in columns)
        return f"(pg_catalog.hash_record_extended(ROW({fields}), {seed}) & {buckets - 1})"

    def range_bucket(self, column: Column, shift: int) -> str:
        return f"(({column.select_expr})::pg_catalog.int8 >> {shift})"

    def bucket_list(self, expr: str, buckets: Sequence[int]) -> str:
        return f"{expr} = ANY('{{{','.join(map(str, buckets))}}}'::pg_catalog.int8[])"

    def objects(self, cur: Cursor, tables: Sequence[str]) -> dict[str, SchemaObject]:
        wanted = set(tables)
        out: dict[str, SchemaObject] = {}
        # One round trip: kind, name, table, definition, one more field per kind.
        cur.execute(_OBJECTS, {"schema": self.schema})
        for kind, name, table, ddl, more in cur.fetchall():
            if kind == "index" and table in wanted:
                out[f"index:{name}"] = SchemaObject(type="index", name=name, table=table, sql=ddl)
            elif kind == "view":
                out[f"view:{name}"] = SchemaObject(type="view", name=name, sql=ddl)
            elif kind == "trigger" and table in wanted:
                out[f"trigger:{table}.{name}"] = SchemaObject(
                    type="trigger", name=name, table=table, sql=f"{ddl} [enabled={more}]"
                )
            elif kind == "constraint" and table in wanted:
                out[f"constraint:{table}.{name}"] = SchemaObject(
                    type="constraint", name=name, table=table, sql=ddl
                )
            elif kind == "policy" and table in wanted:
                out[f"policy:{table}.{name}"] = SchemaObject(
                    type="policy", name=name, table=table, sql=f"{more}: {ddl}"
                )
            elif kind == "enum":
                out[f"type:{name}"] = SchemaObject(type="enum", name=name, sql=ddl)
            elif kind == "function":
                # Functions and procedures: their whole definition (an agent that replaces
                # one changes what a trigger or a caller runs).
                out[f"function:{name}"] = SchemaObject(
                    type=_PROKIND.get(more, "function"), name=name, sql=ddl
                )
        # Large objects belong to the database, not to a schema, and any role may create
        # them: each is observed by its content.
        cur.execute(
            "SELECT l.oid::pg_catalog.int8, pg_catalog.lo_get(l.oid) "
            "FROM pg_catalog.pg_largeobject_metadata l ORDER BY 1"
        )
        for oid, data in cur.fetchall():
            out[f"largeobject:{oid}"] = SchemaObject(
                type="large object", name=str(oid), sql=_large_object_text(bytes(data))
            )
        return dict(sorted(out.items()))


def _column(
    name: str,
    typ: str,
    nullable: bool,
    default: str | None,
    base: str,
    typtype: str,
    category: str,
    send: str | None,
    elem: str | None,
    etype: str | None,
    det: bool,
) -> Column:
    """One column as a row of `_COLUMNS` describes it, with how to hash and read it."""
    q = _quote(name)
    is_json = base in _JSON
    if base == "json":
        # json keeps its text as written; the value is the structure (see above).
        q = f"({q})::pg_catalog.jsonb"
        send = "pg_catalog.jsonb_send"
    if base in _NATIVE_HASH or (base in _TEXT and det):
        hash_expr = q
    elif send and send != "-":
        fn = send if "." in send else f"pg_catalog.{send}"
        hash_expr = f"{fn}({q})"
    else:
        hash_expr = f"({q})::pg_catalog.text"
    decode: Any = None
    if is_json:
        select, decode = f"({q})::pg_catalog.text", parse_json
    elif base in _NATIVE_READ or typtype == "e" or (category == "A" and elem in _NATIVE_READ):
        select = q
    elif category == "A" and etype == "e":
        select = f"({q})::pg_catalog.text[]"
    else:
        select = f"({q})::pg_catalog.text"
    return Column(
        info=ColumnInfo(
            name=name, type=typ, nullable=bool(nullable), default=default, is_json=is_json
        ),
        hash_expr=hash_expr,
        select_expr=select,
        decode=decode,
        integer=base in _INTEGER,
        stored=typtype == "b" and (base in _STORED or (category == "A" and elem in _STORED)),
    )


#: Every schema object but large objects, as (kind, name, table, definition, more).
_OBJECTS = """
SELECT 'index', indexname::text, tablename::text, indexdef, NULL::text
FROM pg_catalog.pg_indexes WHERE schemaname = %(schema)s
UNION ALL
SELECT 'view', viewname::text, NULL, definition, NULL FROM pg_catalog.pg_views
WHERE schemaname = %(schema)s
UNION ALL
SELECT 'view', matviewname::text, NULL, definition, NULL FROM pg_catalog.pg_matviews
WHERE schemaname = %(schema)s
UNION ALL
SELECT 'trigger', t.tgname::text, c.relname::text, pg_catalog.pg_get_triggerdef(t.oid),
       t.tgenabled::text
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE NOT t.tgisinternal AND n.nspname = %(schema)s
UNION ALL
SELECT 'constraint', con.conname::text, c.relname::text,
       pg_catalog.pg_get_constraintdef(con.oid), NULL
FROM pg_catalog.pg_constraint con JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(schema)s
UNION ALL
SELECT 'policy', p.polname::text, c.relname::text,
       pg_catalog.pg_get_expr(p.polqual, p.polrelid), p.polcmd::text
FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(schema)s
UNION ALL
SELECT 'enum', t.typname::text, NULL,
       pg_catalog.string_agg(e.enumlabel::text, ',' ORDER BY e.enumsortorder), NULL
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_enum e ON e.enumtypid = t.oid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = %(schema)s
GROUP BY t.typname
UNION ALL
SELECT 'function', p.oid::pg_catalog.regprocedure::pg_catalog.text, NULL,
       CASE WHEN p.prokind IN ('f', 'p') THEN pg_catalog.pg_get_functiondef(p.oid)
       ELSE p.prosrc END,
       p.prokind::text
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
"""

_PROKIND = {"f": "function", "p": "procedure", "a": "aggregate", "w": "window function"}
#: Large objects up to this size are kept as text in the state (searched for canaries);
#: larger ones by their digest and size.
LARGE_OBJECT_TEXT = 64 * 1024


def _large_object_text(data: bytes) -> str:
    import hashlib

    head = f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"
    if len(data) <= LARGE_OBJECT_TEXT:
        return f"{head}: {data.decode('utf-8', 'backslashreplace')}"
    return head


def install_loaders(dbapi_connection: Any) -> None:
    """Read ``infinity`` dates and timestamps as the words instead of failing on them."""
    import psycopg
    from psycopg.types import datetime as pgdt

    def tolerant(base: type[Any]) -> type[Any]:
        class Loader(base):  # type: ignore[misc]
            def load(self, data: Any) -> Any:
                try:
                    return super().load(data)
                except psycopg.DataError:
                    text = bytes(data).decode("ascii", "replace")
                    if "infinity" in text:
                        return text
                    raise

        return Loader

    adapters = dbapi_connection.adapters
    adapters.register_loader("date", tolerant(pgdt.DateLoader))
    adapters.register_loader("timestamp", tolerant(pgdt.TimestampLoader))
    adapters.register_loader("timestamptz", tolerant(pgdt.TimestamptzLoader))
