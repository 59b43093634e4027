"""Snapshots that tell unchanged chunks by the rows' xmin (`oracle.sinks.pg_watermark`) give
exactly the state a read that hashes every row gives, whatever was done in between."""

from __future__ import annotations

import dataclasses

import pytest

from oracle.sinks import pg_watermark
from oracle.sinks.sql import SqlSink
from oracle.sinks.sql_state import SqlState

pytestmark = pytest.mark.services

SEED = """
CREATE TABLE t (id int8 PRIMARY KEY, name text, qty int, price numeric(10, 2),
                ts timestamptz, j jsonb, f float8);
INSERT INTO t SELECT g, 'n' || g, g % 7, g / 100.0, timestamptz '2024-01-01' + g * interval '1 s',
                     jsonb_build_object('g', g), g * 0.5
FROM generate_series(1, 5000) g;
CREATE TABLE k (code text PRIMARY KEY, v int);
INSERT INTO k SELECT 'c' || g, g FROM generate_series(1, 3000) g;
CREATE TABLE bag (v int);
INSERT INTO bag SELECT g % 10 FROM generate_series(1, 100) g;
"""


def hashed(pg, db, base: SqlState | None) -> SqlState:
    """The state as a read that hashes every row gives it, from the same base (a copy of
    it, which has no watermark: the chunking is the same, the xmins are not used)."""
    s = SqlSink("app", pg.url(db))
    s.base = dataclasses.replace(base) if base is not None else None
    try:
        state = s.snapshot().state
        assert s.last_read["tables_by_xmin"] == 0
        return state
    finally:
        s.close()


def same(a: SqlState, b: SqlState) -> None:
    assert {n: t.digest for n, t in a.tables.items()} == {n: t.digest for n, t in b.tables.items()}
    for name in a.tables:
        # Equal raw rows in the same order have equal canonical values: those are compared
        # (with a readable failure) only where the raw ones differ.
        raw_a, raw_b = a.tables[name].rows, b.tables[name].rows
        if list(raw_a.items()) != list(raw_b.items()):
            assert a.rows(name) == b.rows(name), name


def check(pg, db, sink: SqlSink, *, by_xmin: int = 3) -> SqlState:
    base = sink.base
    after = sink.snapshot().state
    assert sink.last_read["tables_by_xmin"] == by_xmin
    same(after, hashed(pg, db, base))
    return after


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE t SET qty = qty + 1 WHERE id IN (3, 2500, 4999)",
        "DELETE FROM t WHERE id = 10; INSERT INTO t (id, name) VALUES (10, 'n10')",
        "DELETE FROM t WHERE id = 11; INSERT INTO t VALUES (11, 'n11', 4, 0.11, "
        "timestamptz '2024-01-01' + 11 * interval '1 s', '{\"g\": 11}', 5.5)",
        "UPDATE k SET v = v WHERE code = 'c7'",
        "DELETE FROM bag WHERE v = 3; INSERT INTO bag VALUES (3), (3), (3), (3), (3), (3), "
        "(3), (3), (3), (3)",
        "UPDATE bag SET v = 11 WHERE v = 1",
        "INSERT INTO t (id) VALUES (0), (100000); DELETE FROM t WHERE id BETWEEN 200 AND 300",
        "TRUNCATE k; INSERT INTO k SELECT 'c' || g, g FROM generate_series(1, 3000) g",
    ],
)
def test_after_any_change_the_state_is_the_full_reads(pg, change):
    db = pg.database(SEED)
    s = SqlSink("app", pg.url(db))
    before = s.snapshot()
    assert s.last_read["tables_by_xmin"] == 0  # the first read hashes every row
    pg.run(db, change)
    after = check(pg, db, s)
    s.diff(before, s.snapshot())
    assert s.last_read["rows_fetched"] == 0  # unchanged since: nothing read again
    assert s.last_read["tables_by_xmin"] == 3
    assert after.rows("t") == hashed(pg, db, None).rows("t")
    s.close()


def test_a_change_frozen_by_vacuum_is_still_seen(pg):
    """The table's owner may VACUUM FREEZE: the new versions keep their xmin."""
    db = pg.database(SEED)
    s = SqlSink("app", pg.url(db))
    s.snapshot()
    pg.run(db, "DELETE FROM t WHERE id = 5; INSERT INTO t (id, name) VALUES (5, 'other')")
    pg.run(db, "VACUUM (FREEZE) t")
    pg.run(db, "VACUUM FULL k")
    after = check(pg, db, s)
    assert after.tables["t"].rows[(5,)][1] == "other"
    s.close()


def test_transactions_open_during_the_read_count_as_new(pg):
    """A transaction older than the data, and a savepoint's insert committed only after the
    read: the first makes the seed's xmins 'seen' ones, the second's row must show up."""
    db = pg.database(SEED)
    old = pg.connect(db)
    old.autocommit = False
    old.execute("SELECT pg_current_xact_id()")  # holds the snapshot xmin back
    pg.run(db, "UPDATE t SET qty = 100 WHERE id = 1")
    late = pg.connect(db)
    late.autocommit = False
    late.execute("SAVEPOINT a")
    late.execute("INSERT INTO t (id, name) VALUES (7777, 'late')")
    late.execute("RELEASE a")
    s = SqlSink("app", pg.url(db))
    s.snapshot()
    late.commit()
    old.commit()
    after = check(pg, db, s)
    assert after.tables["t"].rows[(7777,)][1] == "late"
    assert after.tables["t"].rows[(1,)][2] == 100
    old.close()
    late.close()
    s.close()


def test_a_database_not_read_before_is_hashed_in_full(pg):
    """A base read in another database (a sibling clone changed before that read) says
    nothing about this one's xmins: every row is hashed, and the change is seen."""
    tpl = pg.database(SEED)
    a, b = f"{tpl}_a", f"{tpl}_b"
    for name in (a, b):
        pg.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}"')
        pg.created.append(name)
    pg.run(b, "UPDATE t SET qty = 99 WHERE id = 42")
    sa, sb = SqlSink("app", pg.url(a)), SqlSink("app", pg.url(b))
    sb.base = sa.snapshot().state
    after = sb.snapshot()
    assert sb.last_read["tables_by_xmin"] == 0
    assert after.state.tables["t"].rows[(42,)][2] == 99
    sa.close()
    sb.close()


def test_a_copy_declared_made_after_the_read_is_told_by_xmin(pg):
    """As a fixture's clone of its template: declared, its rows are told by their xmin;
    the same clone undeclared is hashed in full. Both give the same state."""
    tpl = pg.database(SEED)
    seed_sink = SqlSink("app", pg.url(tpl))
    seed = seed_sink.snapshot().state  # a state with a watermark
    seed_sink.close()
    copies = {}
    for tag in ("declared", "undeclared"):
        name = f"{tpl}_{tag}"
        pg.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}"')
        pg.created.append(name)
        copies[tag] = name
    (oid,) = pg.admin.execute(
        "SELECT oid::int8 FROM pg_database WHERE datname = %s", (copies["declared"],)
    ).fetchone()
    pg_watermark.declare_copy(seed, oid)
    states = {}
    for tag, name in copies.items():
        pg.run(name, "UPDATE k SET v = -1 WHERE code = 'c9'")
        s = SqlSink("app", pg.url(name))
        s.base = seed
        states[tag] = s.snapshot().state
        assert s.last_read["tables_by_xmin"] == (3 if tag == "declared" else 0)
        s.close()
    same(states["declared"], states["undeclared"])
    assert states["declared"].tables["k"].rows[("c9",)][1] == -1


def test_an_enum_table_is_hashed_in_full(pg):
    """Renaming an enum label changes every row's value with no row touched."""
    db = pg.database(
        "CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE TABLE e (id int PRIMARY KEY, m mood);"
        "INSERT INTO e VALUES (1, 'ok'), (2, 'sad');"
        "CREATE TABLE p (id int PRIMARY KEY, v int); INSERT INTO p VALUES (1, 1);"
    )
    s = SqlSink("app", pg.url(db))
    before = s.snapshot()
    pg.run(db, "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'")
    after = s.snapshot()
    assert s.last_read["tables_by_xmin"] == 1  # p only
    assert after.state.tables["e"].rows[(1,)][1] == "fine"
    d = s.diff(before, after)
    assert [c.key for c in d.changed("e")] == [[1]]
    s.close()


def test_a_reader_without_superuser_sees_changes(pg):
    db = pg.database(SEED)
    role = pg.role()
    pg.run(db, f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    s = SqlSink("app", pg.url(db, user=role))
    s.snapshot()
    pg.run(db, "UPDATE t SET qty = 1000 WHERE id = 1")
    after = check(pg, db, s)
    assert after.tables["t"].rows[(1,)][2] == 1000
    s.close()


def test_the_watermark_goes_with_its_state():
    class State:
        pass

    st = State()
    pos = pg_watermark.Position("c", 1, 10, 12)
    pg_watermark.attach(st, pg_watermark.Watermark(pos, {}))
    assert pg_watermark.of(st) is not None
    assert pg_watermark.Watermark(pos, {}).usable(pg_watermark.Position("c", 1, 11, 13))
    assert not pg_watermark.Watermark(pos, {}).usable(pg_watermark.Position("d", 1, 11, 13))
    assert not pg_watermark.Watermark(pos, {}).usable(pg_watermark.Position("c", 2, 11, 13))
    assert not pg_watermark.Watermark(pos, {}).usable(pg_watermark.Position("c", 1, 5, 11))
    assert pg_watermark.since(pos, [9, 10, 11, 2**32 - 1]) == frozenset({10, 11})
    del st
    assert len(pg_watermark._WATERMARKS) < 10_000
