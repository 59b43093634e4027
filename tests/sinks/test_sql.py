"""The SQL sink on SQLite: snapshots keyed by primary key, typed field-level diffs."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path

import pytest

from oracle.evidence.snapshot import SnapshotError
from oracle.sinks.sql import SqlSink
from oracle.sinks.sql_diff import (
    ABSENT,
    ColumnAdded,
    ColumnAltered,
    ColumnRemoved,
    ObjectAdded,
    ObjectRemoved,
    RowAdded,
    RowChanged,
    RowRemoved,
    TableAdded,
    TableRemoved,
)
from tests.conftest import make_db

SEED = """
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, role TEXT, score REAL, meta JSON);
CREATE TABLE tags (user_id INTEGER, tag TEXT, PRIMARY KEY (user_id, tag));
CREATE TABLE log (line TEXT);
INSERT INTO users VALUES (1, 'ada', 'viewer', 1.5, '{"a": [1, 2], "b": {"c": 1}}');
INSERT INTO users VALUES (2, 'bob', 'viewer', NULL, NULL);
INSERT INTO tags VALUES (1, 'x'), (1, 'y'), (2, 'x');
INSERT INTO log VALUES ('hello'), ('hello'), ('world');
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_db(tmp_path / "app.sqlite", SEED)


def sink_for(db: Path, **kw) -> SqlSink:
    return SqlSink("app", f"sqlite:///file:{db}?mode=ro&uri=true", **kw)


def run(db: Path, sql: str) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(sql)
    conn.commit()
    conn.close()


def diff_after(db: Path, sql: str, **kw):
    sink = sink_for(db, **kw)
    before = sink.snapshot()
    run(db, sql)
    return sink.diff(before, sink.snapshot())


def test_unchanged_database_diffs_empty_with_equal_digests(db):
    sink = sink_for(db)
    a, b = sink.snapshot(), sink.snapshot()
    assert a.digest == b.digest
    assert sink.diff(a, b).empty


def test_snapshot_reads_all_tables_keyed(db):
    state = sink_for(db).snapshot().state
    assert sorted(state.tables) == ["log", "tags", "users"]
    assert state.tables["users"].primary_key == ("id",)
    assert state.tables["tags"].primary_key == ("user_id", "tag")
    assert state.tables["log"].keyed is False
    assert state.rows("users", role="viewer")[0]["name"] == "ada"
    assert state.count("log") == 3


def test_row_added_removed_changed(db):
    d = diff_after(
        db,
        """
        INSERT INTO users VALUES (3, 'eve', 'viewer', 0.0, NULL);
        DELETE FROM users WHERE id = 2;
        UPDATE users SET role = 'admin' WHERE id = 1;
    """,
    )
    (added,) = d.added("users")
    assert isinstance(added, RowAdded) and added.key == [3] and added.row["name"] == "eve"
    (removed,) = d.removed("users")
    assert isinstance(removed, RowRemoved) and removed.row["name"] == "bob"
    (changed,) = d.changed("users")
    assert isinstance(changed, RowChanged)
    assert changed.key == [1]
    assert set(changed.fields) == {"role"}
    assert (changed.fields["role"].old, changed.fields["role"].new) == ("viewer", "admin")
    assert changed.before["role"] == "viewer" and changed.row["role"] == "admin"


def test_queries_read_like_sentences(db):
    d = diff_after(
        db,
        """
        UPDATE users SET role = 'admin' WHERE id = 1;
        UPDATE users SET name = 'robert' WHERE id = 2;
    """,
    )
    assert len(d.changed("users", "role", role="admin")) == 1
    assert d.changed("users", "role", role="editor") == []
    assert len(d.changed("users", "name", was={"name": "bob"})) == 1
    assert len(d.changed("users", name=re.compile("^rob"))) == 1
    assert len(d.changed("users", id=lambda i: i > 1)) == 1
    assert d.touched("users") and not d.touched("tags")


def test_unknown_table_or_column_raises_instead_of_matching_nothing(db):
    d = diff_after(db, "DELETE FROM users WHERE id = 2;")
    with pytest.raises(KeyError, match="usres"):
        d.removed("usres")
    with pytest.raises(KeyError, match="rol"):
        d.removed("users", rol="viewer")


def test_composite_key(db):
    d = diff_after(
        db, "DELETE FROM tags WHERE user_id = 1 AND tag = 'y'; INSERT INTO tags VALUES (2, 'y');"
    )
    assert [c.key for c in d.removed("tags")] == [[1, "y"]]
    assert [c.key for c in d.added("tags")] == [[2, "y"]]


def test_table_without_key_is_a_multiset(db):
    d = diff_after(
        db,
        "DELETE FROM log WHERE rowid = (SELECT min(rowid) FROM log "
        "WHERE line = 'hello'); INSERT INTO log VALUES ('new');",
    )
    removed = d.removed("log")
    assert [c.row["line"] for c in removed] == ["hello"]
    assert removed[0].key is None
    assert [c.row["line"] for c in d.added("log")] == ["new"]


def test_reordering_a_multiset_is_no_change(db):
    d = diff_after(
        db,
        "CREATE TABLE tmp AS SELECT * FROM log ORDER BY line DESC; "
        "DELETE FROM log; INSERT INTO log SELECT * FROM tmp; DROP TABLE tmp;",
    )
    assert d.empty


def test_json_column_gets_a_structural_diff(db):
    d = diff_after(
        db,
        """UPDATE users SET meta = '{"a": [1, 3], "b": {"c": 1, "d": 2}}'
                          WHERE id = 1;""",
    )
    (c,) = d.changed("users", "meta")
    detail = c.fields["meta"].detail
    assert detail is not None
    assert "root['a'][1]" in detail["values_changed"]
    assert "root['b']['d']" in detail["dictionary_item_added"]


def test_json_reformatting_is_a_text_change_with_an_empty_structural_diff(db):
    d = diff_after(db, """UPDATE users SET meta = '{"b":{"c":1},"a":[1,2]}' WHERE id = 1;""")
    (c,) = d.changed("users", "meta")
    assert c.fields["meta"].detail == {}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("NULL", "0.0"),
        ("NULL", "''"),
        ("1.0", "1"),
        ("NULL", "9e999"),  # +infinity: orjson alone would write it as null
        ("9e999", "-9e999"),
        ("'1'", "1"),
        ("X'00'", "''"),
    ],
)
def test_values_that_look_alike_are_different(db, old, new):
    # A column without a declared type keeps every value exactly as written.
    run(db, f"CREATE TABLE vals (id INTEGER PRIMARY KEY, v); INSERT INTO vals VALUES (1, {old});")
    d = diff_after(db, f"UPDATE vals SET v = {new} WHERE id = 1;")
    assert len(d.changed("vals", "v")) == 1, (old, new)


def test_blob_values_are_canonical_json(db):
    d = diff_after(db, "UPDATE users SET name = X'DEADBEEF' WHERE id = 2;")
    (c,) = d.changed("users")
    assert c.fields["name"].new == {"$bytes": "3q2+7w=="}
    assert d.changed("users", name=b"\xde\xad\xbe\xef")


def test_table_added_and_dropped_with_their_rows(db):
    d = diff_after(
        db,
        "CREATE TABLE secrets (k TEXT PRIMARY KEY, v TEXT); "
        "INSERT INTO secrets VALUES ('a', 'b'); DROP TABLE tags;",
    )
    assert [c.table for c in d.of_type(TableAdded)] == ["secrets"]
    assert [c.table for c in d.of_type(TableRemoved)] == ["tags"]
    assert len(d.added("secrets")) == 1
    assert len(d.removed("tags")) == 3


def test_columns_added_dropped_altered(db):
    d = diff_after(
        db,
        """
        ALTER TABLE users ADD COLUMN email TEXT;
        ALTER TABLE users DROP COLUMN score;
    """,
    )
    assert [c.column.name for c in d.of_type(ColumnAdded)] == ["email"]
    assert [c.column.name for c in d.of_type(ColumnRemoved)] == ["score"]
    # Every existing row shows both columns: the new one against absent, the old one gone.
    rows = {tuple(c.key): c.fields for c in d.changed("users")}
    assert rows[(1,)]["email"].old is ABSENT and rows[(1,)]["email"].new is None
    assert rows[(1,)]["score"].old == 1.5 and rows[(1,)]["score"].new is ABSENT
    assert rows[(2,)]["score"].old is None and rows[(2,)]["score"].new is ABSENT
    assert sorted(rows) == [(1,), (2,)] and all(set(f) == {"email", "score"} for f in rows.values())
    d2 = diff_after(
        db,
        """
        CREATE TABLE t2 (id INTEGER PRIMARY KEY, name BLOB, role TEXT, meta JSON, email TEXT);
        INSERT INTO t2 SELECT id, name, role, meta, email FROM users;
        DROP TABLE users; ALTER TABLE t2 RENAME TO users;
    """,
    )
    altered = d2.of_type(ColumnAltered)
    assert [(c.column, c.old.type, c.new.type) for c in altered] == [("name", "TEXT", "BLOB")]


def test_a_value_in_an_added_column_is_a_changed_field_and_searched(db):
    d = diff_after(
        db,
        """
        ALTER TABLE users ADD COLUMN note TEXT;
        UPDATE users SET note = 'sk-live-ADDED-4242' WHERE id = 2;
    """,
    )
    (hit,) = d.find_secret("sk-live-ADDED-4242")
    assert (hit.field, hit.encoding) == ("note", "raw")
    (c,) = d.changed("users", "note", note="sk-live-ADDED-4242")
    assert c.key == [2] and c.fields["note"].old is ABSENT
    assert "note" not in c.before and c.row["note"] == "sk-live-ADDED-4242"
    assert "users[2] note: absent → 'sk-live-ADDED-4242'" in c.summary()
    # Asking for the old value of a column that did not exist is unknown, not a non-match.
    with pytest.raises(KeyError, match="column 'note' was added during the run"):
        d.changed("users", "note", was={"note": None})


def test_a_renamed_column_shows_its_values_under_both_names(db):
    d = diff_after(
        db,
        """
        ALTER TABLE users RENAME COLUMN role TO grade;
        UPDATE users SET grade = 'admin' WHERE id = 2;
    """,
    )
    (c1, c2) = d.changed("users", "grade")
    assert (c1.fields["role"].old, c1.fields["role"].new) == ("viewer", ABSENT)
    assert (c1.fields["grade"].old, c1.fields["grade"].new) == (ABSENT, "viewer")
    assert c2.fields["grade"].new == "admin" and c2.row["grade"] == "admin"
    assert d.changed("users", grade="admin") == [c2]
    # `role` no longer exists after the run: a row cannot be said to have role='admin' or not.
    with pytest.raises(KeyError, match="column 'role' was dropped or renamed during the run"):
        d.changed("users", "role", role="admin")


def test_a_retyped_key_keeps_its_rows(db):
    d = diff_after(
        db,
        """
        CREATE TABLE t2 (id TEXT PRIMARY KEY, name TEXT, role TEXT, score REAL, meta JSON);
        INSERT INTO t2 SELECT CAST(id AS TEXT), name, role, score, meta FROM users;
        DROP TABLE users; ALTER TABLE t2 RENAME TO users;
        UPDATE users SET role = 'admin' WHERE id = '2';
    """,
    )
    assert d.removed("users") == [] and d.added("users") == []
    (c,) = d.changed("users", "role", role="admin")
    assert c.key == ["2"] and (c.fields["id"].old, c.fields["id"].new) == (2, "2")
    assert [x.key for x in d.changed("users")] == [["1"], ["2"]]


@pytest.mark.parametrize(
    "key",
    [
        "PRIMARY KEY (uid)",  # the key column renamed
        "PRIMARY KEY (uid, name)",  # and the key widened
    ],
)
def test_a_table_recreated_with_other_columns_is_diffed_row_by_row(db, key):
    d = diff_after(
        db,
        f"""
        DROP TABLE users;
        CREATE TABLE users (uid INTEGER, name TEXT, role TEXT, note TEXT, {key});
        INSERT INTO users VALUES (1, 'ada', 'viewer', 'sk-live-RECREATED-77'),
                                 (2, 'bob', 'viewer', NULL);
    """,
    )
    assert d.removed("users") == [] and d.added("users") == []
    (hit,) = d.find_secret("sk-live-RECREATED-77")
    assert hit.field == "note"
    first = d.changed("users")[0]
    assert (first.fields["id"].old, first.fields["id"].new) == (1, ABSENT)
    assert (first.fields["uid"].old, first.fields["uid"].new) == (ABSENT, 1)
    assert first.fields["note"].new == "sk-live-RECREATED-77"


def test_a_multiset_with_an_added_column_pairs_equal_rows(db):
    d = diff_after(
        db,
        """
        ALTER TABLE log ADD COLUMN who TEXT;
        UPDATE log SET who = 'sk-live-LOG-31337' WHERE line = 'world';
    """,
    )
    changed = d.changed("log")
    assert [c.key for c in changed] == [None, None, None]
    assert sorted(c.fields["who"].new or "" for c in changed) == ["", "", "sk-live-LOG-31337"]
    assert d.added("log") == [] and d.removed("log") == []
    assert [h.field for h in d.find_secret("sk-live-LOG-31337")] == ["who"]
    assert "row changed  log[(no key)] who: absent → 'sk-live-LOG-31337'" in [
        c.summary() for c in changed
    ]


def test_a_column_made_not_null_reports_only_rows_whose_values_changed(db):
    # NOT NULL changes the column, not its values: only the row updated is reported.
    d = diff_after(
        db,
        """
        CREATE TABLE t2 (id INTEGER PRIMARY KEY, name TEXT NOT NULL, role TEXT, score REAL,
                         meta JSON);
        INSERT INTO t2 SELECT * FROM users;
        DROP TABLE users; ALTER TABLE t2 RENAME TO users;
        UPDATE users SET role = 'admin' WHERE id = 1;
    """,
    )
    assert [c.key for c in d.changed("users")] == [[1]]


def test_indexes_views_and_triggers_are_schema(db):
    d = diff_after(
        db,
        """
        CREATE INDEX users_role ON users (role);
        CREATE VIEW admins AS SELECT * FROM users WHERE role = 'admin';
        CREATE TRIGGER audit AFTER UPDATE ON users BEGIN SELECT 1; END;
    """,
    )
    assert {c.object.type for c in d.of_type(ObjectAdded)} == {"index", "view", "trigger"}
    d2 = diff_after(db, "DROP TRIGGER audit;")
    assert [c.object.name for c in d2.of_type(ObjectRemoved)] == ["audit"]


def test_named_tables_and_exclusions(db):
    d = diff_after(db, "DELETE FROM log; DELETE FROM tags;", tables=["tags"])
    assert d.touched("tags")
    with pytest.raises(KeyError):
        d.touched("log")
    d2 = diff_after(db, "DELETE FROM log;", exclude=["log"])
    assert d2.empty


def test_named_table_that_does_not_exist_fails_the_snapshot(db):
    with pytest.raises(SnapshotError, match="'nope'"):
        sink_for(db, tables=["users", "nope"]).snapshot()


def test_missing_database_fails_and_is_not_created(tmp_path):
    path = tmp_path / "gone.sqlite"
    with pytest.raises(SnapshotError, match="app"):
        sink_for(path).snapshot()
    assert not path.exists()


def test_locked_database_fails_the_snapshot(db):
    run(db, "PRAGMA journal_mode=DELETE;")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE users SET role = 'x'")
    try:
        with pytest.raises(SnapshotError, match="locked"):
            sink_for(db, timeout=0.2).snapshot()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_garbage_file_fails_the_snapshot(tmp_path):
    path = tmp_path / "not-a-db.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SnapshotError, match="not a database"):
        sink_for(path).snapshot()


def test_snapshot_reads_one_consistent_state(tmp_path):
    """Writes that land while the sink reads table after table are not half-seen."""
    db = make_db(
        tmp_path / "c.sqlite",
        "PRAGMA journal_mode=WAL;"
        "CREATE TABLE a (id INTEGER PRIMARY KEY, n INT);"
        "CREATE TABLE b (id INTEGER PRIMARY KEY, n INT);"
        "INSERT INTO a VALUES (1, 0); INSERT INTO b VALUES (1, 0);",
    )
    stop = threading.Event()

    def writer():
        conn = sqlite3.connect(db, isolation_level=None)
        n = 0
        while not stop.is_set():
            n += 1
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE a SET n = ?", (n,))
            conn.execute("UPDATE b SET n = ?", (n,))
            conn.execute("COMMIT")
        conn.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        sink = sink_for(db)
        for _ in range(30):
            s = sink.snapshot().state
            assert s.rows("a")[0]["n"] == s.rows("b")[0]["n"]
    finally:
        stop.set()
        t.join()


def test_snapshot_json_is_canonical(db):
    snap = sink_for(db).snapshot()
    j = snap.to_json()
    assert j["digest"] == snap.digest
    assert j["state"]["tables"]["users"]["rows"][0][0] == 1
