"""The SQL sink: every table of a database (or a named subset), through SQLAlchemy.

A snapshot reflects the schema (tables, columns, primary keys, indexes, views, triggers) and reads
every row of every table inside one read transaction. Rows are keyed by primary key (composite
keys included); a table without one is kept as a multiset of rows. Every row gets a 16-byte
digest and every table a digest over its schema and its rows, so that `diff` skips unchanged
tables at once and looks field by field only at rows whose digests differ.

On PostgreSQL and MariaDB the database computes the digests (`oracle.sinks.sql_server`): each
snapshot asks for per-chunk digests and fetches rows only for chunks that differ from the
sink's previous snapshot, so its cost grows with the changes rather than with the tables.
On SQLite a snapshot compares the database's pages with those of the sink's previous snapshot
and reads only the rows on pages that changed (`oracle.sinks.sqlite_pages`); `fallback` says
why one read everything instead. It opens the file and reflects the schema with the standard
library, as SQLAlchemy would (`oracle.sinks.sqlite_schema`), and through SQLAlchemy where that
module is not sure.

Example::

    sink = SqlSink("shop", "sqlite:///shop.sqlite")
    before = sink.snapshot()
    ...                                  # the agent runs
    changes = sink.diff(before, sink.snapshot())
    changes.removed("customers")         # [RowRemoved(table='customers', key=[3], ...)]
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from oracle.base.canonical import digest_json
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.sinks import my_connect, sqlite_schema
from oracle.sinks.server_limits import ServerLimits
from oracle.sinks.sql_diff import ABSENT, SQL, SqlDiff, diff_states
from oracle.sinks.sql_server import Dialect, ServerReader
from oracle.sinks.sql_state import (
    KIND,
    ColumnInfo,
    SchemaObject,
    SqlState,
    TableState,
    build_table,
)
from oracle.sinks.sqlite_pages import PageReader
from oracle.sinks.sqlite_schema import NotNative

# SQLAlchemy (0.13 s to import) is imported where a sink is built or read: a scorer, which
# loads task files and reads evidence but never a database, does without it.
if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

SERVER_BACKENDS = ("postgresql", "mysql", "mariadb")

__all__ = [
    "ABSENT",
    "SQL",
    "ColumnInfo",
    "SchemaObject",
    "SqlDiff",
    "SqlSink",
    "SqlState",
    "TableState",
]


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
        schema: str = "public",
    ) -> None:
        self.name = name
        #: The URL as given; parsed by SQLAlchemy on first use of `url` (a SQLite sink read
        #: with the standard library never imports it: `oracle.sinks.sqlite_schema`).
        self._given_url = url
        self._url: sa.URL | None = None
        self.tables = tuple(tables) if tables is not None else None
        self.exclude = frozenset(exclude)
        self.timeout = timeout
        self.display_url = display_url or self.url.render_as_string(hide_password=True)
        self.schema = schema
        self._engine: Engine | None = None
        #: The state of the last snapshot, whose unchanged chunks (server digests) or pages
        #: (SQLite) the next one reuses. A fixture may set it to the seed's state after a reset.
        self.base: SqlState | None = None
        #: Called after every read, inside the snapshot: each raises `SnapshotError` when
        #: something the snapshot relies on was tampered with (a fixture's template, say).
        self.guards: list[Callable[[], None]] = []
        #: Called with the snapshot's cursor, inside its read transaction, after the tables
        #: are read (server digests only): each raises `SnapshotError` when the database
        #: holds something the snapshot cannot vouch for (a schema the agent can write and no
        #: one observes, say).
        self.checks: list[Callable[[Any], None]] = []
        #: Called with the state of every snapshot taken (fixtures keep the seed's).
        self.on_snapshot: Callable[[SqlState], None] | None = None
        self._expected: tuple[str, str, Callable[[Snapshot], None] | None] | None = None
        self._reader: ServerReader | None = None
        self._pages = PageReader(name)
        # psycopg's fast (C) date loaders fail on 'infinity'; the tolerant ones are slower,
        # so they are used only once a database showed it holds such values.
        self._tolerant_dates = False

    def __repr__(self) -> str:
        return f"SqlSink({self.name!r}, {self.display_url!r})"

    @property
    def url(self) -> sa.URL:
        """The URL, parsed by SQLAlchemy."""
        if self._url is None:
            import sqlalchemy as sa

            self._url = sa.make_url(self._given_url)
        return self._url

    @property
    def backend(self) -> str:
        """``sqlite``, ``postgresql``, ``mysql`` or ``mariadb``."""
        given = self._given_url
        if isinstance(given, str):
            scheme, sep, _ = given.partition("://")
            if sep and re.fullmatch(r"[\w+]+", scheme):
                return scheme.split("+")[0]
        return self.url.get_backend_name()

    @property
    def server_digests(self) -> bool:
        """Whether the database computes the digests (PostgreSQL, MariaDB/MySQL)."""
        return self.backend in SERVER_BACKENDS

    @property
    def last_read(self) -> dict[str, int]:
        """Rows fetched and chunks (server digests) or pages (SQLite) reused by the last
        snapshot."""
        if self.backend == "sqlite":
            return dict(self._pages.stats)
        return dict(self._reader.stats) if self._reader is not None else {}

    @property
    def fallback(self) -> str | None:
        """SQLite: why the last snapshot read the whole database rather than only the pages
        that changed since its base (None when it read only those); see
        `oracle.sinks.sqlite_pages`. Tables read whole on their own are in `table_fallbacks`."""
        return self._pages.fallback

    @property
    def table_fallbacks(self) -> dict[str, str]:
        """SQLite: the tables the last snapshot read whole although it compared pages, and why."""
        return dict(self._pages.table_fallbacks)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            import sqlalchemy as sa

            connect_args: dict[str, Any] = {}
            backend = self.backend
            # A server that stops answering fails the snapshot instead of holding it forever.
            limits = ServerLimits.from_env()
            if backend == "sqlite":
                connect_args["timeout"] = self.timeout
            elif backend == "postgresql":
                connect_args["application_name"] = f"oracle-sink-{os.getpid()}"
                connect_args["client_encoding"] = "UTF8"
            elif backend in ("mysql", "mariadb"):
                connect_args["connect_timeout"] = max(1, round(limits.connect))
                connect_args["read_timeout"] = connect_args["write_timeout"] = limits.statement
                connect_args |= my_connect.connect_args(self.url.host)
            # NullPool: hold no connection between snapshots (a reset replaces the file, and a
            # held connection would keep a PostgreSQL template busy).
            self._engine = sa.create_engine(
                self.url, poolclass=sa.pool.NullPool, connect_args=connect_args
            )
            if backend == "postgresql":
                from oracle.sinks.pg_connect import connect
                from oracle.sinks.sql_postgres import install_loaders

                where = f"PostgreSQL {self.url.host or '127.0.0.1'}:{self.url.port or 5432}"

                def do_connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
                    return connect(limits, where, *cargs, **cparams)

                def on_connect(dbapi: Any, _record: Any) -> None:
                    if self._tolerant_dates:
                        install_loaders(dbapi)

                sa.event.listen(self._engine, "do_connect", do_connect)
                sa.event.listen(self._engine, "connect", on_connect)
        return self._engine

    def expect_seed(
        self, digest: str, label: str, on_match: Callable[[Snapshot], None] | None = None
    ) -> None:
        """Make the next snapshot check that the database holds the seed (`digest`): a fixture
        calls this after a reset, so that a seed someone altered (a tampered template) makes
        the snapshot fail instead of passing for the seed. `on_match` gets the snapshot when
        it holds the seed."""
        self._expected = (digest, label, on_match)

    def _dialect(self) -> Dialect:
        if self.backend == "postgresql":
            from oracle.sinks.sql_postgres import PostgresDialect

            return PostgresDialect(self.schema)
        from oracle.sinks.sql_mariadb import MariaDialect

        return MariaDialect()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- snapshot -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every selected table, read in one read transaction."""
        started = time.time()
        expected, self._expected = self._expected, None
        try:
            state = self._read_server() if self.server_digests else self._read()
            for guard in self.guards:
                guard()
        except SnapshotError:
            raise
        except Exception as exc:  # any driver error means the state was not read completely
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise SnapshotError(
                self.name, f"cannot read {self.display_url}: {type(exc).__name__}: {text}"
            ) from exc
        digest = digest_json(
            {
                "tables": {n: t.digest for n, t in state.tables.items()},
                "objects": {n: o.model_dump() for n, o in state.objects.items()},
            }
        )
        snap = Snapshot(self.name, KIND, digest, state, started)
        if self.server_digests or self.backend == "sqlite":
            self.base = state
        if self.on_snapshot is not None:
            self.on_snapshot(state)
        if expected is not None:
            want, label, on_match = expected
            if digest != want:
                raise SnapshotError(
                    self.name,
                    f"{self.display_url} does not hold the seed after the reset: {label} "
                    "changed since it was built (tampering?); this trial's observations "
                    "cannot be trusted",
                )
            if on_match is not None:
                on_match(snap)
        return snap

    def _read_server(self) -> SqlState:
        try:
            return self._read_server_once()
        except SnapshotError as exc:
            if self._tolerant_dates or "infinity" not in str(exc.__cause__ or ""):
                raise
        self._tolerant_dates = True
        return self._read_server_once()

    def _read_server_once(self) -> SqlState:
        reader = self._reader
        if reader is None:
            reader = self._reader = ServerReader(
                self.name,
                self._dialect(),
                tables=self.tables,
                exclude=self.exclude,
                timeout=self.timeout,
                where=self.display_url,
                # PostgreSQL: a big table's chunk aggregates in two halves side by side.
                second=self._server_connection if self.backend == "postgresql" else None,
            )
        with self._server_connection() as dbapi:
            cur = dbapi.cursor()
            try:
                state = reader.read(cur, self.base)
                for check in self.checks:
                    check(cur)
                return state
            finally:
                with contextlib.suppress(Exception):
                    cur.close()
                    dbapi.rollback()

    @contextlib.contextmanager
    def _server_connection(self) -> Iterator[Any]:
        """A DB-API connection for one snapshot: on PostgreSQL a bounded psycopg connection
        of its own (no engine round trips to set up), else the engine's."""
        if self.backend != "postgresql":
            with self.engine.connect() as conn:
                yield conn.connection.dbapi_connection
            return
        from oracle.sinks.pg_connect import connect
        from oracle.sinks.sql_postgres import install_loaders

        where = f"PostgreSQL {self.url.host or '127.0.0.1'}:{self.url.port or 5432}"
        dsn = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        pg = connect(
            ServerLimits.from_env(),
            where,
            dsn,
            application_name=f"oracle-sink-{os.getpid()}",
            client_encoding="UTF8",
        )
        try:
            if self._tolerant_dates:
                install_loaders(pg)
            yield pg
        finally:
            pg.close()

    def _read(self) -> SqlState:
        if self.backend == "sqlite" and isinstance(self._given_url, str):
            try:
                return self._read_sqlite_natively(self._given_url)
            except NotNative:
                pass  # read through SQLAlchemy
        import sqlalchemy as sa

        with self.engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                # pysqlite does not begin a transaction for SELECTs; do it, so that every table
                # is read from the same database state.
                conn.exec_driver_sql("BEGIN")
            try:
                inspector = sa.inspect(conn)
                if sqlite:
                    return self._read_sqlite(conn, inspector)
                names = self._select_tables(inspector.get_table_names())
                tables = {name: self._read_table(conn, inspector, name) for name in names}
                objects = self._read_objects(conn, inspector, names)
            finally:
                conn.rollback()
        return SqlState(MappingProxyType(tables), MappingProxyType(objects))

    def _read_sqlite(self, conn: sa.Connection, inspector: sa.Inspector) -> SqlState:
        """Only the rows on pages that changed since `base` (`oracle.sinks.sqlite_pages`)."""
        state, image = self._pages.read(
            conn.connection.dbapi_connection,
            self.base,
            lambda: self._select_tables(inspector.get_table_names()),
            lambda name: self._read_table(conn, inspector, name),
            lambda names: self._read_objects(conn, inspector, names),
        )
        self._pages.remember(state, image)
        return state

    def _read_sqlite_natively(self, url: str) -> SqlState:
        """`_read_sqlite` with the standard library (`oracle.sinks.sqlite_schema`); raises
        `NotNative` for a URL or a schema it cannot read as SQLAlchemy would."""
        db = sqlite_schema.open_url(url, self.timeout)
        try:
            # One read transaction for every table, as through SQLAlchemy.
            db.execute("BEGIN")
            try:
                state, image = self._pages.read(
                    db,
                    self.base,
                    lambda: self._select_tables(sqlite_schema.table_names(db)),
                    lambda name: self._read_table_natively(db, name),
                    lambda names: self._sqlite_objects(db.execute, names),
                )
            finally:
                db.execute("ROLLBACK")
        finally:
            db.close()
        self._pages.remember(state, image)
        return state

    @staticmethod
    def _read_table_natively(db: Any, name: str) -> TableState:
        columns, pk = sqlite_schema.columns(db, name)
        names = [c.name for c in columns]
        rows = sqlite_schema.read_rows(db, name, names, pk if pk else names)
        return build_table(name, columns, pk, rows)

    @staticmethod
    def _sqlite_objects(
        execute: Callable[[str], Any], tables: Sequence[str]
    ) -> dict[str, SchemaObject]:
        """The indexes and triggers of `tables`, and every view."""
        objects: dict[str, SchemaObject] = {}
        rows = execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE type IN ('index', 'view', 'trigger') ORDER BY type, name"
        ).fetchall()
        for typ, name, tbl, ddl in rows:
            if tbl in tables or typ == "view":
                objects[f"{typ}:{name}"] = SchemaObject(type=typ, name=name, table=tbl, sql=ddl)
        return objects

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
        import sqlalchemy as sa

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
        if conn.dialect.name == "sqlite":
            return self._sqlite_objects(conn.exec_driver_sql, tables)
        objects: dict[str, SchemaObject] = {}
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
        if self.backend == "sqlite":
            # Two states this sink read compare only the leaf pages whose rows differ.
            chunked = self._pages.chunked
            return diff_states(self.name, chunked(before.state), chunked(after.state))
        return diff_states(self.name, before.state, after.state)
