"""A big table's per-chunk aggregates read in two halves side by side, the second on another
connection that imports the read's snapshot (`ServerReader._grouped`): the state is the one a
read in one piece gives, whatever was done in between or during the read."""

from __future__ import annotations

import contextlib

import pytest

from oracle.sinks import sql_server
from oracle.sinks.sql import SqlSink
from oracle.sinks.sql_state import SqlState
from tests.sinks.test_pg_watermark import hashed, same

pytestmark = pytest.mark.services

SEED = """
CREATE TABLE t (id int8 PRIMARY KEY, name text, qty int, price numeric(10, 2));
INSERT INTO t SELECT g, 'n' || g, g % 7, g / 100.0 FROM generate_series(1, 20000) g;
CREATE TABLE k (code text PRIMARY KEY, v int);
INSERT INTO k SELECT 'c' || g, g FROM generate_series(1, 3000) g;
CREATE TABLE bag (v int);
INSERT INTO bag SELECT g % 10 FROM generate_series(1, 100) g;
"""


@pytest.fixture
def split_all(monkeypatch):
    """Every table that has a base is read in halves."""
    monkeypatch.setattr(sql_server, "SPLIT_ROWS", 0)
    return monkeypatch


def in_one_piece(pg, db, base: SqlState, monkeypatch) -> SqlState:
    """The state a read in one piece that hashes every row gives, from the same base."""
    monkeypatch.setattr(sql_server, "SPLIT_ROWS", 1 << 62)
    try:
        return hashed(pg, db, base)
    finally:
        monkeypatch.setattr(sql_server, "SPLIT_ROWS", 0)


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE t SET qty = qty + 1 WHERE id IN (3, 10000, 19999)",
        "DELETE FROM t WHERE id BETWEEN 200 AND 300; INSERT INTO t (id) VALUES (0), (100000)",
        "UPDATE k SET v = -v WHERE code IN ('c1', 'c2999')",
        "DELETE FROM bag WHERE v = 3; INSERT INTO bag VALUES (3), (3), (3)",
        "TRUNCATE t; INSERT INTO t SELECT g, 'x' FROM generate_series(1, 20000) g",
    ],
)
def test_halves_give_the_state_of_one_read(pg, split_all, change):
    db = pg.database(SEED)
    s = SqlSink("app", pg.url(db))
    s.snapshot()
    assert s.last_read["tables_split"] == 0  # no base yet: nothing to tell the size by
    base = s.base
    pg.run(db, change)
    after = s.snapshot().state
    assert s.last_read["tables_split"] == 3
    assert s.last_read["tables_by_xmin"] == 3
    same(after, in_one_piece(pg, db, base, split_all))


def test_the_second_half_sees_the_snapshot_of_the_first(pg, split_all):
    """A row committed after the read began, before its second connection opened: neither
    half counts it (without the imported snapshot the second half would, and the read would
    fail on a chunk whose count its rows do not match)."""
    db = pg.database(SEED)
    s = SqlSink("app", pg.url(db))
    s.snapshot()
    opened = SqlSink._server_connection
    calls = []

    @contextlib.contextmanager
    def late_writer(self):
        calls.append(1)
        if len(calls) == 2:  # the read's second connection: first, another client commits
            pg.run(db, "INSERT INTO t (id, name) VALUES (50000, 'late')")
            pg.run(db, "DELETE FROM t WHERE id = 5")
        with opened(self) as conn:
            yield conn

    split_all.setattr(SqlSink, "_server_connection", late_writer)
    s2 = SqlSink("app", pg.url(db))
    s2.base = s.base
    during = s2.snapshot().state
    assert len(calls) == 2 and s2.last_read["tables_split"] == 3
    assert (50000,) not in during.tables["t"].rows and (5,) in during.tables["t"].rows
    split_all.setattr(SqlSink, "_server_connection", opened)
    later = s2.snapshot().state
    assert (50000,) in later.tables["t"].rows and (5,) not in later.tables["t"].rows
    same(later, in_one_piece(pg, db, s.base, split_all))
    s.close()
    s2.close()


def test_without_a_second_connection_the_read_is_one_piece(pg, split_all):
    db = pg.database(SEED)
    s = SqlSink("app", pg.url(db))
    s.snapshot()
    base = s.base
    opened = SqlSink._server_connection
    calls = []

    @contextlib.contextmanager
    def only_one(self):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("too many connections")
        with opened(self) as conn:
            yield conn

    pg.run(db, "UPDATE t SET name = 'changed' WHERE id = 7")
    split_all.setattr(SqlSink, "_server_connection", only_one)
    s2 = SqlSink("app", pg.url(db))
    s2.base = base
    after = s2.snapshot().state
    assert len(calls) == 2 and s2.last_read["tables_split"] == 0
    assert after.tables["t"].rows[(7,)][1] == "changed"
    split_all.setattr(SqlSink, "_server_connection", opened)
    same(after, in_one_piece(pg, db, base, split_all))
    s.close()
    s2.close()
