"""MariaDB's (and MySQL's) catalog and SQL spelling for server-side digests (see `sql_server`).

A row's hash is MD5 over the seed and every column's ``QUOTE()`` text, joined with commas:
``QUOTE`` writes SQL NULL as the bare word ``NULL`` and every value as an escaped, quoted
literal (a decimal with its scale, a blob byte for byte), so distinct rows give distinct texts.
The first 64 bits of the MD5 are summed per chunk as an exact DECIMAL.

Two kinds of column are hashed through another text, the one they are read by:

- ``FLOAT`` and ``DOUBLE``: ``QUOTE`` writes a ``FLOAT`` with six digits (16777215 as
  16777200) and a negative zero as ``0``. They are cast to ``DOUBLE``, whose text MariaDB
  writes with every digit needed to read the same double back, and a negative zero is
  written ``-0``. A ``FLOAT`` is then read as the shortest decimal that is the same single-
  precision value (19.99, not 19.989999771118164), as PostgreSQL writes a ``real``.
- JSON (text checked by ``json_valid``): hashed as ``JSON_COMPACT`` text, so a value written
  again with other spacing is no change; it is read parsed, so JSON values compare as
  structures across backends.

Values: ``TIMESTAMP`` columns (instants stored in UTC) are read in UTC and carry the zone;
``DATETIME`` stays without one.

An account sees in ``information_schema`` only the tables it holds a privilege on: a table it
may not read would be silently left out. So a snapshot of every table first asks the server
whether the account may read any table of the database, and fails naming it if not.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import secrets
import struct
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from oracle.sinks.sql_server import Column, Cursor, parse_json
from oracle.sinks.sql_state import ColumnInfo, SchemaObject

_INTEGER = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_FLOATS = {"float", "double"}
_SINGLE_MIN_NORMAL = 2.0**-126
_F32, _U32 = struct.Struct("<f"), struct.Struct("<I")
_INFINITIES = (math.inf, -math.inf)
_SHORT = tuple(f"%.{n}g" for n in (6, 7, 8, 9))
_SHORT_SUBNORMAL = tuple(f"%.{n}g" for n in range(1, 10))
#: MariaDB's error codes: a table that does not exist; a command the account may not run.
_NO_SUCH_TABLE = 1146
_DENIED = {1142, 1143, 1044}
_JSON_CHECK = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


def _quote(ident: str) -> str:
    return "`" + ident.replace("`", "``") + "`"


def _utc(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def _exact_float(q: str) -> str:
    """A ``FLOAT``/``DOUBLE`` column's exact text: the double's round-trip digits, ``-0`` for
    a negative zero (``ATAN2`` tells it apart: it compares equal to 0), SQL NULL as NULL."""
    return f"IF({q} = 0 AND ATAN2({q}, -1) < 0, '-0', CAST({q} AS DOUBLE))"


def _double(value: Any) -> Any:
    return None if value is None else float(value)


@functools.lru_cache(maxsize=1 << 16)
def _single(value: Any) -> Any:
    """A ``FLOAT`` (single precision, read as its exact double) as the shortest decimal of
    that value, the form PostgreSQL gives a ``real``: 19.989999771118164 reads as 19.99. Of
    the decimals of the shortest length that lie strictly inside the interval of reals that
    round to it, the nearest (as PostgreSQL's shortest form picks)."""
    if value is None:
        return None
    x = float(value)
    if x == 0:
        return x
    bits = _U32.unpack(_F32.pack(x))[0]
    # Neighbours in magnitude (the sign bit stays); a single's midpoints are exact doubles.
    below = _F32.unpack(_U32.pack(bits - 1))[0]
    above = _F32.unpack(_U32.pack(bits + 1))[0]
    if above in _INFINITIES:  # past the largest single: the gap below, mirrored
        above = x + (x - below)
    low, high = (x + below) / 2, (x + above) / 2
    if low > high:
        low, high = high, low
    # When six significant digits name the value, rounding it to six digits gives the
    # shortest such decimal (a float's rounding error is far below the sixth digit); past
    # that, the first length that does is the shortest. Subnormals hold fewer digits.
    for fmt in _SHORT_SUBNORMAL if abs(x) < _SINGLE_MIN_NORMAL else _SHORT:
        text = fmt % x
        y = float(text)
        if low < y < high:
            return y
        if y in (low, high) and low < Fraction(text) < high:
            return y
    return x


def _error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "errno", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    return code if isinstance(code, int) else None


def _hash64(parts: Sequence[str], seed: int) -> str:
    text = ", ".join(parts)
    return f"CAST(CONV(LEFT(MD5(CONCAT_WS(',', '{seed}', {text})), 16), 16, 10) AS UNSIGNED)"


class MariaDialect:
    """Catalog queries and expressions for the connection's current MariaDB database."""

    name = "mariadb"

    def quote(self, ident: str) -> str:
        return _quote(ident)

    def qualified(self, table: str) -> str:
        return _quote(table)

    def begin(self, cur: Cursor, timeout: float) -> None:
        cur.connection.rollback()
        seconds = max(1, round(timeout))
        for stmt in (
            "SET SESSION time_zone = '+00:00'",
            f"SET SESSION lock_wait_timeout = {seconds}",
            f"SET SESSION innodb_lock_wait_timeout = {seconds}",
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ):
            cur.execute(stmt)

    def tables(self, cur: Cursor) -> list[str]:
        cur.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1"
        )
        return [str(r[0]) for r in cur.fetchall()]

    def hidden(self, cur: Cursor) -> str | None:
        """Why some tables may be hidden from this account, or None when it may read every
        table of the database.

        MariaDB lists only the tables an account holds a privilege on. Whether it may read
        any table of the database (a grant on the database, a wildcard, a role, the whole
        server) is asked of the server itself: reading a table no one could have created (a
        random name) fails with "does not exist" for such an account, "denied" otherwise."""
        cur.execute("SELECT DATABASE(), CURRENT_USER()")
        database, user = cur.fetchone()
        probe = _quote(f"oracle_probe_{secrets.token_hex(8)}")
        try:
            cur.execute(f"SELECT 1 FROM {probe} LIMIT 0")
            cur.fetchall()
        except Exception as exc:
            code = _error_code(exc)
            if code == _NO_SUCH_TABLE:
                return None
            if code in _DENIED:
                return (
                    f"the account {user} may not read every table of database {database!r}, "
                    "and MariaDB hides from it the tables it may not read, so a change to one "
                    f"would go unseen. Grant it SELECT ON `{database}`.* (and SHOW VIEW, "
                    "TRIGGER to see views and triggers), or name the tables the sink observes"
                )
            raise
        return None

    def _json_columns(self, cur: Cursor, table: str) -> set[str]:
        cur.execute(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (table,),
        )
        found: set[str] = set()
        for (clause,) in cur.fetchall():
            for m in _JSON_CHECK.finditer(str(clause)):
                found.add(m.group(1).replace("``", "`"))
        return found

    def columns(self, cur: Cursor, table: str) -> list[Column]:
        json_cols = self._json_columns(cur, table)
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, DATA_TYPE "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table,),
        )
        out = []
        for name, typ, nullable, default, data_type in cur.fetchall():
            q = _quote(str(name))
            base = str(data_type).lower()
            is_json = name in json_cols or base == "json"
            decode: Any = None
            hash_expr, select = f"IFNULL(QUOTE({q}), 'NULL')", q
            if is_json:
                decode = parse_json
                if name in json_cols:  # MariaDB's JSON is text: spacing is not the value
                    hash_expr = f"IFNULL(QUOTE(JSON_COMPACT({q})), 'NULL')"
            elif base == "timestamp":
                decode = _utc
            elif base in _FLOATS:
                # A number's text holds no comma or quote and is never the word NULL.
                select = _exact_float(q)
                hash_expr = f"IFNULL({select}, 'NULL')"
                decode = _single if base == "float" else _double
            out.append(
                Column(
                    info=ColumnInfo(
                        name=str(name),
                        type=str(typ),
                        nullable=str(nullable) == "YES",
                        default=None if default is None else str(default),
                        is_json=is_json,
                    ),
                    hash_expr=hash_expr,
                    select_expr=select,
                    decode=decode,
                    integer=base in _INTEGER,
                )
            )
        return out

    def primary_key(self, cur: Cursor, table: str) -> tuple[str, ...]:
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (table,),
        )
        return tuple(str(r[0]) for r in cur.fetchall())

    def row_hash(self, columns: Sequence[Column], seed: int) -> str:
        return _hash64([c.hash_expr for c in columns], seed)

    def key_hash(self, columns: Sequence[Column], seed: int, buckets: int) -> str:
        return f"({_hash64([c.hash_expr for c in columns], seed)} & {buckets - 1})"

    def range_bucket(self, column: Column, shift: int) -> str:
        q, width = column.select_expr, 1 << shift
        # Floor division for negative keys too, as Python's `key >> shift` computes it.
        return f"IF({q} >= 0, {q} DIV {width}, -((-({q} + 1)) DIV {width}) - 1)"

    def bucket_list(self, expr: str, buckets: Sequence[int]) -> str:
        return f"{expr} IN ({', '.join(map(str, buckets))})"

    def objects(self, cur: Cursor, tables: Sequence[str]) -> dict[str, SchemaObject]:
        wanted = set(tables)
        out: dict[str, SchemaObject] = {}
        cur.execute(
            "SELECT INDEX_NAME, TABLE_NAME, NON_UNIQUE, "
            "GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ', ') "
            "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
            "GROUP BY TABLE_NAME, INDEX_NAME, NON_UNIQUE"
        )
        for name, table, non_unique, cols in cur.fetchall():
            if table in wanted:
                unique = "" if int(non_unique) else "unique "
                out[f"index:{table}.{name}"] = SchemaObject(
                    type="index", name=str(name), table=str(table), sql=f"{unique}({cols})"
                )
        cur.execute(
            "SELECT TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS "
            "WHERE TABLE_SCHEMA = DATABASE()"
        )
        for name, ddl in cur.fetchall():
            if not ddl:  # MariaDB blanks the definition for an account without SHOW VIEW
                raise RuntimeError(
                    f"the definition of view {name!r} is hidden from this account "
                    "(grant it SHOW VIEW on the database)"
                )
            out[f"view:{name}"] = SchemaObject(type="view", name=str(name), sql=str(ddl))
        cur.execute(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE, "
            "CONCAT(ACTION_TIMING, ' ', EVENT_MANIPULATION, ' ', ACTION_STATEMENT) "
            "FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        )
        for name, table, ddl in cur.fetchall():
            if table in wanted:
                out[f"trigger:{table}.{name}"] = SchemaObject(
                    type="trigger", name=str(name), table=str(table), sql=str(ddl)
                )
        cur.execute(
            "SELECT CONSTRAINT_NAME, TABLE_NAME, CHECK_CLAUSE FROM "
            "information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE()"
        )
        for name, table, ddl in cur.fetchall():
            if table in wanted:
                out[f"constraint:{table}.{name}"] = SchemaObject(
                    type="constraint", name=str(name), table=str(table), sql=str(ddl)
                )
        cur.execute(
            "SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME, UPDATE_RULE, "
            "DELETE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = DATABASE()"
        )
        for name, table, ref, upd, dele in cur.fetchall():
            if table in wanted:
                out[f"constraint:{table}.{name}"] = SchemaObject(
                    type="constraint",
                    name=str(name),
                    table=str(table),
                    sql=f"foreign key → {ref} on update {upd} on delete {dele}",
                )
        # Stored procedures and functions: what a trigger or a caller runs.
        cur.execute(
            "SELECT ROUTINE_TYPE, ROUTINE_NAME, ROUTINE_DEFINITION FROM "
            "information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()"
        )
        for kind, name, ddl in cur.fetchall():
            out[f"routine:{name}"] = SchemaObject(
                type=str(kind).lower(), name=str(name), sql=None if ddl is None else str(ddl)
            )
        return dict(sorted(out.items()))
