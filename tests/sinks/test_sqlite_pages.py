"""SQLite snapshots read page by page (`oracle.sinks.sqlite_pages`) equal full reads.

Every test compares a snapshot that read only what changed since its base with a snapshot
that read the whole database (a fresh sink has no base): same JSON, same digests, same diff.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle.evidence.snapshot import Snapshot
from oracle.sinks import sqlite_btree, sqlite_pages
from oracle.sinks.sql import SqlSink

SCHEMA = """
CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, note TEXT, data BLOB);
CREATE TABLE tags (code TEXT PRIMARY KEY, label TEXT);
CREATE TABLE log (at INTEGER, line TEXT);
CREATE TABLE pairs (a INTEGER, b INTEGER, v TEXT, PRIMARY KEY (a, b)) WITHOUT ROWID;
CREATE INDEX items_name ON items (name);
"""


def _url(path: Path) -> str:
    return f"sqlite:///file:{path}?mode=ro&uri=true"


def make_db(path: Path, rows: int = 300, page_size: int = 1024, encoding: str = "UTF-8") -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA encoding='{encoding}'")
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.executescript(SCHEMA)
        with conn:
            conn.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                [(i, f"item {i}", i * 1.5, "n" * (i % 40), bytes([i % 256])) for i in range(rows)],
            )
            conn.executemany(
                "INSERT INTO tags VALUES (?, ?)", [(f"t{i}", f"tag {i}") for i in range(50)]
            )
            conn.executemany("INSERT INTO log VALUES (?, ?)", [(i % 7, "x") for i in range(80)])
            conn.executemany(
                "INSERT INTO pairs VALUES (?, ?, ?)",
                [(i, j, f"{i}-{j}") for i in range(10) for j in range(5)],
            )
    finally:
        conn.close()


def full(path: Path) -> Snapshot:
    """The snapshot a sink with no base takes: every row read."""
    sink = SqlSink("db", _url(path))
    try:
        snap = sink.snapshot()
        assert sink.fallback is not None
        return snap
    finally:
        sink.close()


def assert_same(fast: Snapshot, whole: Snapshot) -> None:
    assert fast.digest == whole.digest
    assert fast.state.to_json() == whole.state.to_json()
    for name, t in whole.state.tables.items():
        f = fast.state.tables[name]
        assert f.digest == t.digest
        assert list(f.rows.items()) == list(t.rows.items())
        assert list(f.digests.items()) == list(t.digests.items())
        for key, row in t.rows.items():
            assert f.rows[key] == row
    assert fast.state.objects == whole.state.objects


def assert_same_diff(sink: SqlSink, before: Snapshot, fast: Snapshot, whole: Snapshot) -> None:
    got = [c.model_dump() for c in sink.diff(before, fast).changes]
    want = [c.model_dump() for c in sink.diff(before, whole).changes]
    assert got == want


def _big(n: int) -> str:
    return ("overflow text " * (n // 14 + 1))[:n]


OPS = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 2000), st.integers(0, 3000)),
    st.tuples(st.just("delete"), st.integers(0, 400), st.integers(1, 60)),
    st.tuples(st.just("update_price"), st.integers(0, 400), st.integers(1, 30)),
    st.tuples(st.just("update_blob"), st.integers(0, 400), st.integers(0, 255)),
    st.tuples(st.just("update_blob"), st.integers(0, 16), st.integers(0, 255)),
    st.tuples(st.just("update_name"), st.integers(0, 400), st.integers(0, 200)),
    st.tuples(st.just("big_text"), st.integers(0, 400), st.integers(500, 6000)),
    st.tuples(st.just("rekey"), st.integers(0, 400), st.integers(5000, 6000)),
    st.tuples(st.just("tags"), st.integers(0, 60), st.integers(0, 2)),
    st.tuples(st.just("log"), st.integers(0, 10), st.integers(0, 1)),
    st.tuples(st.just("pairs"), st.integers(0, 12), st.integers(0, 5)),
    st.tuples(st.just("new_table"), st.integers(0, 3), st.integers(0, 50)),
    st.tuples(st.just("drop_table"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("add_column"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("vacuum"), st.just(0), st.just(0)),
    st.tuples(st.just("nothing"), st.just(0), st.just(0)),
)


def apply(conn: sqlite3.Connection, op: tuple[str, int, int]) -> None:
    kind, a, b = op
    with conn:
        if kind == "insert":
            conn.execute(
                "INSERT OR REPLACE INTO items (id, name, price, note) VALUES (?, ?, ?, ?)",
                (a, f"new {a}", b / 7, "z" * (b % 300)),
            )
        elif kind == "delete":
            conn.execute("DELETE FROM items WHERE id BETWEEN ? AND ?", (a, a + b))
        elif kind == "update_price":
            conn.execute("UPDATE items SET price = price + 0.5 WHERE id % ? = ?", (b, a % b))
        elif kind == "update_blob":
            # Same size: SQLite overwrites the cell in place, the page keeps its layout.
            conn.execute("UPDATE items SET data = ? WHERE id % 17 = ?", (bytes([b]), a % 17))
            conn.execute("UPDATE items SET data = ? WHERE id = ?", (bytes([255 - b]), a))
        elif kind == "update_name":
            conn.execute("UPDATE items SET name = ? WHERE id = ?", ("renamed" * (b % 9), a))
        elif kind == "big_text":
            conn.execute("UPDATE items SET note = ? WHERE id = ?", (_big(b), a))
        elif kind == "rekey":
            conn.execute("UPDATE OR IGNORE items SET id = ? WHERE id = ?", (b, a))
        elif kind == "tags":
            if b == 0:
                conn.execute("DELETE FROM tags WHERE code = ?", (f"t{a}",))
            else:
                conn.execute("INSERT OR REPLACE INTO tags VALUES (?, ?)", (f"t{a}", "v" * b))
        elif kind == "log":
            conn.execute("INSERT INTO log VALUES (?, ?)", (a, "y" * b))
        elif kind == "pairs":
            conn.execute("INSERT OR REPLACE INTO pairs VALUES (?, ?, ?)", (a, b, "p"))
        elif kind == "new_table":
            conn.execute(f"CREATE TABLE IF NOT EXISTS extra{a} (id INTEGER PRIMARY KEY, v TEXT)")
            conn.executemany(f"INSERT INTO extra{a} (v) VALUES (?)", [(f"e{i}",) for i in range(b)])
        elif kind == "drop_table":
            conn.execute(f"DROP TABLE IF EXISTS extra{a}")
        elif kind == "add_column":
            cols = [r[1] for r in conn.execute("PRAGMA table_info(items)")]
            if f"c{a}" not in cols:
                conn.execute(f"ALTER TABLE items ADD COLUMN c{a} TEXT DEFAULT 'd{a}'")
    if kind == "vacuum":
        conn.execute("VACUUM")


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rounds=st.lists(st.lists(OPS, max_size=6), min_size=1, max_size=3),
    wal=st.booleans(),
    page_size=st.sampled_from([512, 1024, 4096]),
)
def test_a_page_by_page_snapshot_equals_a_full_read(
    rounds: list[list[tuple[str, int, int]]], wal: bool, page_size: int
) -> None:
    with scratch() as folder:
        db = folder / "app.sqlite"
        make_db(db, page_size=page_size)
        writer = sqlite3.connect(db)
        try:
            if wal:
                # Writes stay in the log: no checkpoint while the writer is open.
                writer.execute("PRAGMA journal_mode=WAL")
                writer.execute("PRAGMA wal_autocheckpoint=0")
            sink = SqlSink("db", _url(db))
            first = sink.snapshot()
            previous = first
            for ops in rounds:
                for op in ops:
                    apply(writer, op)
                fast = sink.snapshot()
                whole = full(db)
                assert_same(fast, whole)
                assert_same_diff(sink, previous, fast, whole)
                assert_same_diff(sink, first, fast, whole)
                previous = fast
            sink.close()
        finally:
            writer.close()


def test_only_the_changed_rows_are_read(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db, rows=2000)
    sink = SqlSink("db", _url(db))
    before = sink.snapshot()
    assert sink.fallback is not None and sink.fallback.startswith("no earlier snapshot")
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "UPDATE items SET data = x'ff' WHERE id = ?", [(i,) for i in range(0, 2000, 100)]
        )
    conn.close()
    after = sink.snapshot()
    assert sink.fallback is None
    # WITHOUT ROWID: its pages are an index b-tree, always read whole.
    assert list(sink.table_fallbacks) == ["pairs"]
    stats = sink.last_read
    assert stats["rows_fetched"] == 20
    assert stats["pages_reused"] > stats["pages_read"]
    assert stats["image_from_file"] == 1
    assert [c.key for c in sink.diff(before, after).changed("items")] == [
        [i] for i in range(0, 2000, 100)
    ]
    assert_same(after, full(db))


def test_an_unchanged_table_without_a_rowid_key_is_reused_whole(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE items SET name = 'x' WHERE id = 3")
    conn.close()
    sink.snapshot()
    assert sink.last_read["tables_reused"] == 2  # tags, log
    assert "pairs" in sink.table_fallbacks  # WITHOUT ROWID: its pages are an index b-tree
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE tags SET label = 'y' WHERE code = 't3'")
    conn.close()
    after = sink.snapshot()
    assert sink.table_fallbacks["tags"] == "its key is not its rowid, and its pages changed"
    assert_same(after, full(db))


def _changed(db: Path, *sql: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for s in sql:
            conn.execute(s)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (("CREATE INDEX tags_label ON tags (label)",), "the schema changed"),
        (("ALTER TABLE items ADD COLUMN extra TEXT",), "the schema changed"),
        (("VACUUM",), "the schema cookie (VACUUM?) changed"),
        (("PRAGMA page_size=2048", "VACUUM"), "the page size changed"),
        (("PRAGMA journal_mode=WAL",), "the file format (write version) changed"),
    ],
)
def test_what_the_pages_cannot_vouch_for_is_read_whole(
    tmp_path: Path, sql: tuple[str, ...], reason: str
) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    sink = SqlSink("db", _url(db))
    before = sink.snapshot()
    _changed(db, *sql)
    after = sink.snapshot()
    assert sink.fallback is not None and sink.fallback.startswith(reason)
    whole = full(db)
    assert_same(after, whole)
    assert_same_diff(sink, before, after, whole)
    # And the snapshot after it reads page by page again.
    _changed(db, "UPDATE items SET price = 7 WHERE id = 5")
    again = sink.snapshot()
    assert sink.fallback is None
    assert_same(again, full(db))


def test_auto_vacuum_is_read_whole(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA auto_vacuum=FULL")
    conn.close()
    make_db(db)
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    _changed(db, "DELETE FROM items WHERE id < 100")
    after = sink.snapshot()
    assert sink.fallback == "auto-vacuum is on (pages move)"
    assert_same(after, full(db))


def test_another_text_encoding_is_read_whole(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    other = tmp_path / "utf16.sqlite"
    make_db(other, encoding="UTF-16le")
    shutil.copyfile(other, db)
    after = sink.snapshot()
    assert sink.fallback is not None and sink.fallback.startswith("the text encoding changed")
    assert_same(after, full(db))


def test_a_database_too_large_to_keep_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    monkeypatch.setattr(sqlite_pages, "MAX_IMAGE_BYTES", 4096)
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    _changed(db, "UPDATE items SET price = 7 WHERE id = 5")
    after = sink.snapshot()
    assert sink.fallback == "the database is larger than 4096 bytes"
    assert_same(after, full(db))


def test_a_virtual_table_is_read_whole(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    _changed(db, "CREATE VIRTUAL TABLE docs USING fts5(body)", "INSERT INTO docs VALUES ('a b')")
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    _changed(db, "INSERT INTO docs VALUES ('c d')")
    after = sink.snapshot()
    assert sink.fallback is None
    assert sink.table_fallbacks["docs"] == "a virtual table"
    assert_same(after, full(db))


def test_a_leaf_with_an_overflowing_row_is_read_again(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    _changed(db, f"UPDATE items SET note = '{_big(5000)}' WHERE id = 10")
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    # Same size, changed in place: only the overflow pages hold the change.
    _changed(db, f"UPDATE items SET note = '{_big(4999)}!' WHERE id = 10")
    after = sink.snapshot()
    assert sink.fallback is None
    assert sink.last_read["pages_read"] >= 1
    assert_same(after, full(db))


def test_uncheckpointed_wal_writes_are_seen(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    writer = sqlite3.connect(db)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        sink = SqlSink("db", _url(db))
        before = sink.snapshot()
        with writer:
            writer.execute("UPDATE items SET price = -2 WHERE id = 42")
        assert Path(f"{db}-wal").stat().st_size > 0
        after = sink.snapshot()
        assert sink.fallback is None
        assert sink.last_read["image_from_file"] == 0  # through the log, not the file
        assert [c.key for c in sink.diff(before, after).changed("items")] == [[42]]
        assert_same(after, full(db))
    finally:
        writer.close()


def test_a_page_that_is_not_understood_reads_its_table_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    sink = SqlSink("db", _url(db))
    sink.snapshot()
    _changed(db, "UPDATE items SET price = 7 WHERE id = 5")

    def refuse(self: Any, root: int) -> Any:
        raise sqlite_btree.NotUnderstood(f"page {root}: refused by the test")

    monkeypatch.setattr(sqlite_btree.Tree, "leaves", refuse)
    after = sink.snapshot()
    assert sink.table_fallbacks["items"].endswith("refused by the test")
    assert_same(after, full(db))


def test_a_file_put_in_place_of_the_database_is_compared_page_by_page(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    make_db(db)
    sink = SqlSink("db", _url(db))
    before = sink.snapshot()
    # A copy changed elsewhere and renamed over the database, as a fixture's reset does.
    other = tmp_path / "other.sqlite"
    shutil.copyfile(db, other)
    _changed(
        other, "UPDATE items SET data = x'01' WHERE id = 9", "DELETE FROM items WHERE id = 200"
    )
    os.replace(other, db)
    after = sink.snapshot()
    assert sink.fallback is None
    whole = full(db)
    assert_same(after, whole)
    assert_same_diff(sink, before, after, whole)
    assert len(sink.diff(before, after).changes) == 2
