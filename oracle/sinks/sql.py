"""The SQL sink: every table of a database (or a named subset), through SQLAlchemy.

A snapshot reflects the schema (tables, columns, primary keys, indexes, views, triggers) and reads
every row of every table inside one read transaction. Rows are keyed by primary key (composite
keys included); a table without one is kept as a multiset of rows. Every row gets a 16-byte
digest and every table a digest over its schema and its rows, so that `diff` skips unchanged
tables at once and looks field by field only at rows whose digests differ.

Example::

    sink = SqlSink("shop", "sqlite:///shop.sqlite")
    before = sink.snapshot()
    ...                                  # the agent runs
    changes = sink.diff(before, sink.snapshot())
    changes.removed("customers")         # [RowRemoved(table='customers', key=[3], ...)]
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from oracle.canonical import digest_json
from oracle.sinks.sql_diff import SqlDiff, diff_states
from oracle.sinks.sql_state import ColumnInfo, SchemaObject, SqlState, TableState, build_table
from oracle.snapshot import Snapshot, SnapshotError

KIND = "sql"

__all__ = ["ColumnInfo", "SchemaObject", "SqlDiff", "SqlSink", "SqlState", "TableState"]


def _type_name(col_type: Any, dialect: sa.Dialect) -> str:
    try:
        return str(col_type.compile(dialect=dialect))
    except Exception:
        return type(col_type).__name__


class SqlSink:
    """A SQL database as a sink.

    `url` is any SQLAlchemy URL. `tables` limits the sink to those tables; `exclude` leaves some
    out. `timeout` bounds how long a snapshot waits for a lock held by someone else.
    """

    kind = KIND

    def __init__(
        self,
        name: str,
        url: str | sa.URL,
        *,
        tables: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        timeout: float = 5.0,
        display_url: str | None = None,
    ) -> None:
        self.name = name
        self.url = sa.make_url(url)
        self.tables = tuple(tables) if tables is not None else None
        self.exclude = frozenset(exclude)
        self.timeout = timeout
        self.display_url = display_url or self.url.render_as_string(hide_password=True)
        self._engine: Engine | None = None

    def __repr__(self) -> str:
        return f"SqlSink({self.name!r}, {self.display_url!r})"

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            connect_args: dict[str, Any] = {}
            if self.url.get_backend_name() == "sqlite":
                connect_args["timeout"] = self.timeout
            # NullPool: hold no connection between snapshots (a reset replaces the file, and a
            # held connection would keep a PostgreSQL template busy).
            self._engine = sa.create_engine(
                self.url, poolclass=sa.pool.NullPool, connect_args=connect_args
            )
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- snapshot -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every selected table, read in one read transaction."""
        started = time.time()
        try:
            state = self._read()
        except SnapshotError:
            raise
        except Exception as exc:  # any driver error means the state was not read completely
            raise SnapshotError(self.name, f"cannot read {self.display_url}: {exc}") from exc
        digest = digest_json(
            {
                "tables": {n: t.digest for n, t in state.tables.items()},
                "objects": {n: o.model_dump() for n, o in state.objects.items()},
            }
        )
        return Snapshot(self.name, KIND, digest, state, started)

    def _read(self) -> SqlState:
        with self.engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                # pysqlite does not begin a transaction for SELECTs; do it, so that every table
                # is read from the same database state.
                conn.exec_driver_sql("BEGIN")
            try:
                inspector = sa.inspect(conn)
                names = self._select_tables(inspector.get_table_names())
                tables = {name: self._read_table(conn, inspector, name) for name in names}
                objects = self._read_objects(conn, inspector, names)
            finally:
                conn.rollback()
        return SqlState(MappingProxyType(tables), MappingProxyType(objects))

    def _select_tables(self, present: Sequence[str]) -> list[str]:
        if self.tables is None:
            chosen = [t for t in present if not t.startswith("sqlite_")]
        else:
            missing = [t for t in self.tables if t not in present]
            if missing:
                raise SnapshotError(
                    self.name,
                    f"table(s) {', '.join(map(repr, missing))} named by the sink are not in "
                    f"{self.display_url} (present: {', '.join(present) or 'none'})",
                )
            chosen = list(self.tables)
        return sorted(t for t in chosen if t not in self.exclude)

    def _read_table(self, conn: sa.Connection, inspector: sa.Inspector, name: str) -> TableState:
        dialect = conn.dialect
        columns = tuple(
            ColumnInfo(
                name=c["name"],
                type=_type_name(c["type"], dialect),
                nullable=bool(c.get("nullable", True)),
                default=None if c.get("default") is None else str(c.get("default")),
                is_json=isinstance(c["type"], sa.JSON),
            )
            for c in inspector.get_columns(name)
        )
        pk = tuple(inspector.get_pk_constraint(name).get("constrained_columns") or ())
        q = dialect.identifier_preparer.quote
        names = [c.name for c in columns]
        order = pk if pk else names
        sql = (
            f"SELECT {', '.join(map(q, names))} FROM {q(name)} ORDER BY {', '.join(map(q, order))}"
        )
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(sql)
            raw_rows: list[tuple[Any, ...]] = [tuple(r) for r in cursor.fetchall()]
        finally:
            cursor.close()
        return build_table(name, columns, pk, raw_rows)

    def _read_objects(
        self, conn: sa.Connection, inspector: sa.Inspector, tables: Sequence[str]
    ) -> dict[str, SchemaObject]:
        objects: dict[str, SchemaObject] = {}
        if conn.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(
                "SELECT type, name, tbl_name, sql FROM sqlite_master"
                " WHERE type IN ('index', 'view', 'trigger') ORDER BY type, name"
            ).all()
            for typ, name, tbl, ddl in rows:
                if tbl in tables or typ == "view":
                    objects[f"{typ}:{name}"] = SchemaObject(type=typ, name=name, table=tbl, sql=ddl)
            return objects
        for table in tables:
            for ix in inspector.get_indexes(table):
                ix_name = ix.get("name") or "?"
                cols = ", ".join(str(c) for c in ix.get("column_names", []))
                unique = "unique " if ix.get("unique") else ""
                objects[f"index:{ix_name}"] = SchemaObject(
                    type="index", name=ix_name, table=table, sql=f"{unique}({cols})"
                )
        for view in inspector.get_view_names():
            objects[f"view:{view}"] = SchemaObject(
                type="view", name=view, sql=inspector.get_view_definition(view)
            )
        return objects

    # -- diff ---------------------------------------------------------------------------------

    def diff(self, before: Snapshot, after: Snapshot) -> SqlDiff:
        """Typed changes: schema first, then rows table by table."""
        return diff_states(self.name, before.state, after.state)
