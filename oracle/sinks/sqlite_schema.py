"""A SQLite database's tables and columns, read with the standard library, as SQLAlchemy's
reflection would name them.

A SQL sink on SQLite used SQLAlchemy for two things only: opening the file and reflecting
the schema (table names, each column's type, nullability and default, the primary key). The
import of SQLAlchemy alone is 0.15-0.3 s of CPU, more than a whole snapshot of a small
database, and every ``oracle`` command that ran a SQLite task paid it. This module does both
with ``sqlite3``, following SQLAlchemy's SQLite dialect step by step: the same queries and
pragmas, its type affinity rules, and the names its type compiler gives.

It answers only where it is sure. A URL other than the plain forms the SQLite fixture
writes, a generated column, or a declared type whose arguments SQLAlchemy would treat in a
way not listed here: `NotNative`, and the sink reads through SQLAlchemy as before. A test
compares both readings over every type name the dialect knows, each affinity rule, and
arguments of every count.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

# The evidence models (pydantic) load when columns are reflected: an agent that only opens
# a database through `open_url` does without them.
if TYPE_CHECKING:
    from oracle.sinks.sql_state import ColumnInfo


class NotNative(Exception):
    """This database or URL is read through SQLAlchemy."""


#: The type names of SQLAlchemy's SQLite dialect (``ischema_names``) by what they compile to.
#: Types whose name carries no argument, whatever the arguments reflected.
_PLAIN = {
    "BIGINT": "BIGINT",
    "BLOB": "BLOB",
    "BOOL": "BOOLEAN",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "DATE_CHAR": "DATE",
    "DATETIME": "DATETIME",
    "DATETIME_CHAR": "DATETIME",
    "DOUBLE": "DOUBLE",
    "FLOAT": "FLOAT",
    "INT": "INTEGER",
    "INTEGER": "INTEGER",
    "JSON": "JSON",
    "JSONB": "JSONB",
    "REAL": "REAL",
    "SMALLINT": "SMALLINT",
    "TIME": "TIME",
    "TIME_CHAR": "TIME",
    "TIMESTAMP": "TIMESTAMP",
}
#: Types named with their length, when one is given (two or more arguments: not handled).
_LENGTH = {"CHAR", "NCHAR", "NVARCHAR", "TEXT", "VARCHAR"}
#: Types named with their precision and scale (three or more arguments: not handled).
_PRECISION = {"DECIMAL", "NUMERIC"}
_JSON = {"JSON", "JSONB"}
_DECLARED = re.compile(r"([\w ]+)(\(.*?\))?")


def type_name(declared: str) -> tuple[str, bool]:
    """The name SQLAlchemy's reflection gives a column declared `declared` on SQLite (what
    ``str(type.compile(dialect))`` prints), and whether it is a JSON type. `NotNative` where
    this module cannot be sure."""
    upper = declared.upper()
    match = _DECLARED.match(upper)
    if match:
        word, args = match.group(1), match.group(2)
    else:
        word, args = "", ""
    numbers = [str(int(a)) for a in re.findall(r"(\d+)", args)] if args is not None else []
    if word in _PLAIN:
        return _PLAIN[word], word in _JSON
    if word in _LENGTH or word in _PRECISION:
        base = word
    # SQLite's affinity rules, in SQLAlchemy's order.
    elif "INT" in word:
        return "INTEGER", False
    elif "CHAR" in word or "CLOB" in word or "TEXT" in word:
        base = "TEXT"
    elif "BLOB" in word or not word:
        return "NullType", False
    elif "REAL" in word or "FLOA" in word or "DOUB" in word:
        return "REAL", False
    else:
        base = "NUMERIC"
    if not numbers:
        return base, False
    if base in _PRECISION and len(numbers) <= 2:
        return f"{base}({', '.join(numbers)})", False
    if len(numbers) == 1:
        return f"{base}({numbers[0]})", False
    raise NotNative(f"type {declared!r}")


def table_names(db: sqlite3.Connection) -> list[str]:
    """The tables of the main database, SQLite's own left out, by name (``get_table_names``)."""
    rows = db.execute(
        "SELECT name FROM main.sqlite_master WHERE type='table'"
        " AND name NOT LIKE 'sqlite~_%' ESCAPE '~' ORDER BY name"
    ).fetchall()
    return [name for (name,) in rows]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(db: sqlite3.Connection, table: str) -> tuple[tuple[ColumnInfo, ...], tuple[str, ...]]:
    """The columns of `table` and its primary key (``get_columns``, ``get_pk_constraint``)."""
    from oracle.sinks.sql_state import ColumnInfo

    if sqlite3.sqlite_version_info < (3, 31):
        raise NotNative("SQLite before 3.31 has no table_xinfo")
    rows: list[tuple[object, ...]] = []
    for schema in ("main", "temp"):
        rows = db.execute(f"PRAGMA {schema}.table_xinfo({quote(table)})").fetchall()
        if rows:
            break
    found: list[ColumnInfo] = []
    keyed: list[tuple[int, str]] = []
    for _cid, name, declared, notnull, default, pk, hidden in rows:
        if hidden == 1:
            continue
        if hidden:
            raise NotNative(f"generated column {name!r}")
        type_, is_json = type_name(str(declared))
        found.append(
            ColumnInfo(
                name=str(name),
                type=type_,
                nullable=not notnull,
                default=None if default is None else str(default),
                is_json=is_json,
            )
        )
        if isinstance(pk, int) and pk > 0:
            keyed.append((pk, str(name)))
    return tuple(found), tuple(name for _, name in sorted(keyed))


def open_url(url: str, timeout: float) -> sqlite3.Connection:
    """A connection, in autocommit mode, to the database of a SQLite URL of the forms the
    SQLite fixture writes: ``sqlite:///PATH`` and ``sqlite:///file:PATH?mode=ro&uri=true``
    (opened as SQLAlchemy's pysqlite dialect opens them). `NotNative` for any other."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise NotNative("not a sqlite:/// URL")
    rest = url[len(prefix) :]
    if rest.startswith("file:") and rest.endswith("?mode=ro&uri=true"):
        path = rest[len("file:") : -len("?mode=ro&uri=true")]
        target, uri = f"file:{path}?mode=ro", True
    else:
        path = target = rest
        uri = False
    if not path or path == ":memory:" or any(c in path for c in "?#%&"):
        raise NotNative("a URL with a query, a fragment or an escape")
    return sqlite3.connect(target, timeout=timeout, uri=uri, isolation_level=None)


def read_rows(
    db: sqlite3.Connection, table: str, names: Sequence[str], order: Sequence[str]
) -> list[tuple[object, ...]]:
    """Every row of `table`, its columns `names`, sorted by `order`."""
    sql = (
        f"SELECT {', '.join(map(quote, names))} FROM {quote(table)}"
        f" ORDER BY {', '.join(map(quote, order))}"
    )
    return [tuple(r) for r in db.execute(sql).fetchall()]
