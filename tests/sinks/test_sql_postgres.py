"""The SQL sink on a real PostgreSQL server: canonical values, server-side chunk digests that
catch every insert, delete and update, and clear failures on bad input."""

from __future__ import annotations

import threading
import time

import pytest

from oracle.base.canonical import JSON_NULL, to_jsonable
from oracle.evidence.snapshot import SnapshotError
from oracle.sinks.sql import SqlSink
from oracle.sinks.sql_diff import (
    ABSENT,
    ObjectAdded,
    ObjectAltered,
    RowAdded,
    RowChanged,
    RowRemoved,
)

pytestmark = pytest.mark.services

TYPES = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE t (
    id int PRIMARY KEY, n numeric(10, 2), ts timestamptz, naive timestamp, j jsonb, js json,
    a int[], b bytea, m mood, s text, f float8, big int8, ms mood[], ip inet
);
INSERT INTO t VALUES
  (1, 1.50, '2024-01-01 10:00+02', '2024-01-01 10:00', '{"a": [1, 2], "b": null}',
   '{"z": 1, "a": 2}', '{1,2}', '\\x0001', 'ok', '', 0.1, 1, '{ok,sad}', '10.0.0.1'),
  (2, NULL, 'infinity', NULL, 'null', NULL, NULL, NULL, NULL, NULL, 'NaN', 4294967296,
   NULL, NULL);
"""


def sink(pg, db, **kw) -> SqlSink:
    return SqlSink("app", pg.url(db), **kw)


def test_values_are_canonical(pg):
    db = pg.database(TYPES)
    state = sink(pg, db).snapshot().state
    one, two = state.rows("t")
    assert one["n"] == {"$decimal": "1.50"}  # the scale is kept
    assert one["ts"] == "2024-01-01T08:00:00+00:00"  # an instant, in UTC
    assert one["naive"] == "2024-01-01T10:00:00"
    assert one["j"] == {"a": [1, 2], "b": None}  # JSON as a structure
    assert one["js"] == {"z": 1, "a": 2}
    assert one["a"] == [1, 2] and one["ms"] == ["ok", "sad"]
    assert one["b"] == {"$bytes": "AAE="}
    assert one["m"] == "ok" and one["s"] == "" and one["f"] == 0.1
    assert one["ip"] == "10.0.0.1/32"  # a type psycopg does not decode: its text
    assert two["j"] == {"$json": None}  # JSON null is not SQL NULL
    assert two["n"] is None and two["s"] is None
    assert two["ts"] == "infinity" and two["f"] == {"$float": "nan"}
    assert state.tables["t"].columns[5].is_json


def test_null_empty_and_json_null_are_told_apart(pg):
    db = pg.database(TYPES)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, "UPDATE t SET s = NULL, j = NULL WHERE id = 1; UPDATE t SET s = '' WHERE id = 2")
    d = s.diff(before, s.snapshot())
    by_key = {tuple(c.key): c for c in d.changed("t")}
    assert by_key[(1,)].fields["s"].old == "" and by_key[(1,)].fields["s"].new is None
    assert by_key[(1,)].fields["j"].new is None
    assert by_key[(2,)].fields["s"].old is None and by_key[(2,)].fields["s"].new == ""


def test_changes_that_hashes_often_fold_are_seen(pg):
    """PostgreSQL's own int8 hash folds 1 and 2**32 together; the numeric one drops the scale;
    float8 treats -0 as 0; an enum label renamed keeps its oid. All are changes."""
    db = pg.database(TYPES)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        "UPDATE t SET big = 4294967296, n = 1.5::numeric(10,1)::numeric, f = -0.0 "
        "WHERE id = 1; UPDATE t SET big = 1 WHERE id = 2",
    )
    d = s.diff(before, s.snapshot())
    fields = {tuple(c.key): set(c.fields) for c in d.changed("t")}
    assert fields == {(1,): {"big", "f"}, (2,): {"big"}}
    # numeric(10,2) keeps 1.50 whatever was written: no change, and none reported.
    before = s.snapshot()
    pg.run(db, "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'")
    d = s.diff(before, s.snapshot())
    (changed,) = d.changed("t", "m")
    assert (changed.fields["m"].old, changed.fields["m"].new) == ("ok", "fine")
    assert any(isinstance(c, ObjectAltered) and c.new.name == "mood" for c in d)


def test_json_changes_carry_a_structural_detail(pg):
    db = pg.database(TYPES)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, """UPDATE t SET j = '{"a": [1, 3], "b": null, "c": true}' WHERE id = 1""")
    (c,) = s.diff(before, s.snapshot()).changed("t", "j")
    detail = c.fields["j"].detail
    assert detail["values_changed"]["root['a'][1]"] == {"new_value": 3, "old_value": 2}
    assert "root['c']" in detail["dictionary_item_added"]
    assert to_jsonable(JSON_NULL) == {"$json": None}


BIG = """
CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n int);
INSERT INTO big SELECT g, 'row ' || g, g % 7 FROM generate_series(1, 20000) g;
"""


def test_inserts_and_deletes_anywhere_are_caught_and_only_changed_chunks_are_read(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    chunking = before.state.tables["big"].chunking
    assert chunking.mode == "range" and chunking.shift == 10  # 1,024 keys per chunk
    assert s.last_read["rows_fetched"] == 20000
    pg.run(
        db,
        """
        INSERT INTO big VALUES (0, 'before the first', 0), (-3, 'negative', 0),
                               (20001, 'after the last', 0), (9999999, 'far past the end', 0);
        DELETE FROM big WHERE id IN (1, 1023, 1024, 1025, 20000);
        UPDATE big SET n = n + 1 WHERE id = 10240;
        """,
    )
    after = s.snapshot()
    read = s.last_read
    d = s.diff(before, after)
    assert sorted(c.key[0] for c in d.added("big")) == [-3, 0, 20001, 9999999]
    assert sorted(c.key[0] for c in d.removed("big")) == [1, 1023, 1024, 1025, 20000]
    assert [c.key for c in d.changed("big")] == [[10240]]
    # Chunks touched: [-1024, 0), [0, 1024), [1024, 2048), [10240, …), the one of 20000 and
    # 20001, and the far one. Every other chunk is reused from the snapshot before.
    assert read["chunks_fetched"] == 6
    assert read["rows_fetched"] < 6 * 1024
    assert read["chunks_reused"] == len(after.state.tables["big"].chunks) - 6
    assert after.state.count("big") == 20000 - 5 + 4


def test_a_change_that_keeps_the_row_count_is_caught(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    # Same chunk, same count: one key removed, another inserted between existing ones.
    pg.run(db, "DELETE FROM big WHERE id = 500; UPDATE big SET id = 500 WHERE id = 501")
    d = s.diff(before, s.snapshot())
    assert [c.key for c in d.removed("big")] == [[501]]
    (c,) = d.changed("big")
    assert c.key == [500] and c.fields["v"].new == "row 501"


def test_unchanged_database_reads_no_rows_and_keeps_its_digest(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    a = s.snapshot()
    b = s.snapshot()
    assert s.last_read["rows_fetched"] == 0
    assert a.digest == b.digest and s.diff(a, b).empty
    assert b.state.rows("big", id=77) == [{"id": 77, "v": "row 77", "n": 0}]


def test_a_wrong_base_never_changes_what_a_snapshot_says(pg):
    """Rows are reused only where the server's digests match: a base from another database
    saves nothing there and misleads nothing."""
    db1 = pg.database(BIG)
    db2 = pg.database(BIG + "UPDATE big SET v = 'other' WHERE id % 1000 = 0;")
    s1, s2 = sink(pg, db1), sink(pg, db2)
    s2.base = s1.snapshot().state
    state = s2.snapshot().state
    assert state.rows("big", id=3000) == [{"id": 3000, "v": "other", "n": 4}]
    assert state.rows("big", id=3001) == [{"id": 3001, "v": "row 3001", "n": 5}]
    assert s2.last_read["chunks_fetched"] == 20  # the chunks holding a multiple of 1000


def test_text_and_composite_keys_use_hash_chunks(pg):
    db = pg.database(
        "CREATE TABLE kv (k text, n int, v text, PRIMARY KEY (k, n));"
        "INSERT INTO kv SELECT 'key' || g, g % 3, 'v' FROM generate_series(1, 5000) g;"
    )
    s = sink(pg, db)
    before = s.snapshot()
    assert before.state.tables["kv"].chunking.mode == "hash"
    pg.run(
        db,
        "INSERT INTO kv VALUES ('aaa', 0, 'new'), ('zzz', 9, 'new');"
        "DELETE FROM kv WHERE k = 'key10'; UPDATE kv SET v = 'w' WHERE k = 'key20'",
    )
    d = s.diff(before, s.snapshot())
    assert sorted(c.key[0] for c in d.added("kv")) == ["aaa", "zzz"]
    assert [c.key for c in d.removed("kv")] == [["key10", 1]]
    assert [c.key for c in d.changed("kv")] == [["key20", 2]]
    assert s.last_read["chunks_fetched"] <= 4
    assert before.state.rows("kv", k="key7") == [{"k": "key7", "n": 1, "v": "v"}]


def test_table_without_key_is_a_multiset(pg):
    db = pg.database(
        "CREATE TABLE log (line text, n int); INSERT INTO log VALUES ('a', 1), ('a', 1), ('b', 2);"
    )
    s = sink(pg, db)
    before = s.snapshot()
    assert before.state.tables["log"].chunking.mode == "whole"
    pg.run(db, "DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE line = 'a');")
    d = s.diff(before, s.snapshot())
    assert [(c.row, c.key) for c in d.removed("log")] == [({"line": "a", "n": 1}, None)]
    pg.run(db, "INSERT INTO log VALUES ('a', 1)")
    d = s.diff(before, s.snapshot())
    assert d.empty  # the same multiset again


def test_schema_changes_and_triggers_are_seen(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        """
        ALTER TABLE big ADD COLUMN note text DEFAULT 'x';
        CREATE TABLE extra (id int PRIMARY KEY);
        CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
        CREATE TRIGGER spy BEFORE UPDATE ON big FOR EACH ROW EXECUTE FUNCTION f();
        """,
    )
    d = s.diff(before, s.snapshot())
    kinds = {type(c).__name__ for c in d.schema_changes()}
    assert {"ColumnAdded", "TableAdded"} <= kinds
    assert any(isinstance(c, ObjectAdded) and c.object.type == "trigger" for c in d)
    pg.run(db, "ALTER TABLE big DISABLE TRIGGER spy")
    before = s.snapshot()
    pg.run(db, "ALTER TABLE big ENABLE TRIGGER spy")
    d = s.diff(before, s.snapshot())
    assert any(isinstance(c, ObjectAltered) and c.new.type == "trigger" for c in d)


def test_a_changed_shape_reads_the_table_whole_and_others_stay_skipped(pg):
    db = pg.database(
        BIG + "CREATE TABLE other (id int PRIMARY KEY, v text);"
        "INSERT INTO other SELECT g, 'v' FROM generate_series(1, 3000) g;"
    )
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        "ALTER TABLE big ADD COLUMN note text;"
        "UPDATE big SET note = 'sk-live-PG-ADDED-0099' WHERE id = 7777;"
        "ALTER TABLE big RENAME COLUMN n TO m;",
    )
    after = s.snapshot()
    read = s.last_read
    # The changed table is fetched whole (no chunk of the old shape can vouch for the new
    # one); the table beside it is not fetched at all.
    assert read["rows_fetched"] == 20000
    assert read["chunks_reused"] == len(after.state.tables["other"].chunks)
    d = s.diff(before, after)
    changed = d.changed("big")
    assert len(changed) == 20000 and not d.added("big") and not d.removed("big")
    assert not d.touched("other")
    (hit,) = d.find_secret("sk-live-PG-ADDED-0099")
    assert hit.field == "note" and hit.change.key == [7777]
    f = hit.change.fields
    assert (f["note"].old, f["note"].new) == (ABSENT, "sk-live-PG-ADDED-0099")
    assert (f["n"].old, f["n"].new) == (7777 % 7, ABSENT)
    assert (f["m"].old, f["m"].new) == (ABSENT, 7777 % 7)
    # The new shape's chunks serve the next snapshot.
    again = s.snapshot()
    assert s.last_read["rows_fetched"] == 0 and s.diff(after, again).empty


def test_a_secret_inside_a_json_structure_is_found(pg):
    db = pg.database(TYPES)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        """UPDATE t SET j = '{"a": [1, {"deep": "sk-live-PG-JSON-4242"}]}' WHERE id = 1;
        INSERT INTO t (id, j) VALUES (3, '{"sk-live-PG-JSONKEY-77": 1}');
        INSERT INTO t (id, j) VALUES (4, '{"$bytes": "not base64!"}');""",
    )
    d = s.diff(before, s.snapshot())
    assert [(h.field, h.change.key) for h in d.find_secret("sk-live-PG-JSON-4242")] == [("j", [1])]
    assert [h.change.key for h in d.find_secret("sk-live-PG-JSONKEY-77")] == [[3]]
    assert [h.change.key for h in d.find_secret("not base64!")] == [[4]]


# -- bad input -------------------------------------------------------------------------------


def test_permission_denied_on_one_table_fails_the_snapshot_naming_it(pg):
    db = pg.database(
        "CREATE TABLE open_t (id int PRIMARY KEY); CREATE TABLE secret (id int PRIMARY KEY);"
    )
    role = pg.role()
    pg.run(db, f'GRANT SELECT ON open_t TO "{role}"')
    s = SqlSink("app", pg.url(db, user=role))
    with pytest.raises(SnapshotError, match=r"table 'secret'.*permission denied"):
        s.snapshot()
    assert (
        SqlSink("app", pg.url(db, user=role), tables=["open_t"]).snapshot().state.count("open_t")
        == 0
    )


def test_row_level_security_raises_instead_of_hiding_rows(pg):
    role = pg.role()
    db = pg.database()
    pg.run(
        db,
        f"""
        CREATE TABLE notes (id int PRIMARY KEY, owner text);
        INSERT INTO notes VALUES (1, 'a'), (2, 'b');
        ALTER TABLE notes OWNER TO "{role}";
        ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
        ALTER TABLE notes FORCE ROW LEVEL SECURITY;
        CREATE POLICY only_a ON notes USING (owner = 'a');
        """,
    )
    with pytest.raises(SnapshotError, match="row-level security"):
        SqlSink("app", pg.url(db, user=role)).snapshot()


def test_a_locked_table_times_out_with_a_clear_error(pg):
    db = pg.database(BIG)
    s = sink(pg, db, timeout=0.5)
    with pg.connect(db) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE big IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(SnapshotError, match=r"table 'big'.*lock timeout"):
            s.snapshot()
        assert time.monotonic() - started < 10
        locker.execute("ROLLBACK")


def test_a_server_that_goes_away_between_snapshots_fails_the_second(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    s.snapshot()
    pg.admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
    with pytest.raises(SnapshotError, match=f"cannot read .*{db}.*does not exist"):
        s.snapshot()


def test_a_connection_killed_mid_snapshot_fails_it(pg):
    db = pg.database(BIG)
    s = sink(pg, db, timeout=30)
    with pg.connect(db) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE big IN ACCESS EXCLUSIVE MODE")
        errors: list[BaseException] = []

        def snap() -> None:
            try:
                s.snapshot()
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=snap)
        th.start()
        for _ in range(100):  # wait until the snapshot blocks on the lock, then kill it
            rows = pg.admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                (db,),
            ).fetchall()
            if rows:
                pg.admin.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
                break
            time.sleep(0.05)
        th.join(30)
        locker.execute("ROLLBACK")
    assert errors and isinstance(errors[0], SnapshotError)
    assert "terminat" in str(errors[0])


def test_an_encoding_the_client_cannot_decode_fails_naming_the_table(pg):
    db = pg.database(encoding="SQL_ASCII")
    pg.run(db, "CREATE TABLE notes (id int PRIMARY KEY, body text)")
    with pg.connect(db) as c:
        c.execute("SET client_encoding = 'SQL_ASCII'")
        c.execute("INSERT INTO notes VALUES (1, convert_from('\\xff41'::bytea, 'SQL_ASCII'))")
    with pytest.raises(SnapshotError, match=r"table 'notes'.*(decode|encoding|UTF8)"):
        sink(pg, db).snapshot()


def test_expected_seed_mismatch_fails_the_snapshot(pg):
    db = pg.database(BIG)
    s = sink(pg, db)
    s.expect_seed("sha256:" + "0" * 64, "the template")
    with pytest.raises(SnapshotError, match="does not hold the seed"):
        s.snapshot()
    s.snapshot()  # the expectation is for one snapshot only


def test_row_change_types_round_trip_from_an_archive(pg):
    from oracle.evidence.diff import change_from_json

    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        "INSERT INTO big VALUES (30000, 'x', 1); DELETE FROM big WHERE id = 2;"
        "UPDATE big SET v = 'y' WHERE id = 3",
    )
    d = s.diff(before, s.snapshot())
    for raw in d.to_json()["changes"]:
        c = change_from_json(raw)
        assert isinstance(c, RowAdded | RowRemoved | RowChanged)


def test_a_table_that_grows_far_past_its_chunks_is_cut_again(pg):
    db = pg.database("CREATE TABLE g (k text PRIMARY KEY);")
    s = sink(pg, db)
    before = s.snapshot()
    assert before.state.tables["g"].chunking.buckets == 1
    pg.run(db, "INSERT INTO g SELECT 'k' || n FROM generate_series(1, 40000) n")
    grown = s.snapshot()
    assert grown.state.tables["g"].chunking.buckets == 1  # cut for the base it diffed against
    d = s.diff(before, grown)
    assert len(d.added("g")) == 40000
    recut = s.snapshot()
    assert recut.state.tables["g"].chunking.buckets == 64
    pg.run(db, "DELETE FROM g WHERE k = 'k7'")
    after = s.snapshot()
    assert s.last_read["chunks_fetched"] == 1
    assert [c.key for c in s.diff(recut, after).removed("g")] == [["k7"]]


def test_an_insert_between_two_keys_is_caught(pg):
    db = pg.database(
        "CREATE TABLE sparse (id int PRIMARY KEY, v text);"
        "INSERT INTO sparse SELECT 2 * g, 'v' FROM generate_series(1, 5000) g;"
    )
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, "INSERT INTO sparse VALUES (4001, 'between 4000 and 4002')")
    d = s.diff(before, s.snapshot())
    assert [c.key for c in d.added("sparse")] == [[4001]]
    assert s.last_read["chunks_fetched"] == 1


def test_shadowing_the_functions_the_digests_use_changes_nothing(pg):
    """An agent may create look-alike functions and point the database's search_path at
    them: the snapshot calls pg_catalog's own, schema-qualified, under a fixed path."""
    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(
        db,
        f"""
        CREATE SCHEMA evil;
        CREATE FUNCTION evil.hash_record_extended(record, bigint) RETURNS bigint
            LANGUAGE plpgsql AS 'BEGIN RETURN 0; END';
        CREATE FUNCTION evil.int8send(bigint) RETURNS bytea LANGUAGE sql AS 'SELECT ''''::bytea';
        ALTER DATABASE "{db}" SET search_path = evil, pg_catalog, public;
        UPDATE big SET v = 'changed under a shadowed path' WHERE id = 4242;
        """,
    )
    d = s.diff(before, s.snapshot())
    (c,) = d.changed("big")
    assert c.key == [4242] and c.fields["v"].new == "changed under a shadowed path"


def test_intervals_keep_months_days_and_time_apart(pg):
    """PostgreSQL stores an interval as months, days and microseconds: '1 mon' and '30 days'
    (or '1 day' and '24 hours') are different values, which a timedelta would fold."""
    db = pg.database(
        "CREATE TABLE plan (id int PRIMARY KEY, every interval, steps interval[]);"
        "INSERT INTO plan VALUES (1, '1 mon', '{1 day}'), (2, '1 day', NULL),"
        " (3, '1 day 02:00:00.5', NULL);"
    )
    s = sink(pg, db)
    before = s.snapshot()
    assert [r["every"] for r in before.state.rows("plan")] == ["P1M", "P1D", "P1DT2H0.5S"]
    assert before.state.rows("plan", id=1)[0]["steps"] == "{P1D}"
    pg.run(
        db,
        "UPDATE plan SET every = '30 days', steps = '{24 hours}' WHERE id = 1;"
        "UPDATE plan SET every = '24 hours' WHERE id = 2",
    )
    d = s.diff(before, s.snapshot())
    fields = {c.key[0]: {k: (f.old, f.new) for k, f in c.fields.items()} for c in d.changed("plan")}
    assert fields == {
        1: {"every": ("P1M", "P30D"), "steps": ("{P1D}", "{PT24H}")},
        2: {"every": ("P1D", "PT24H")},
    }


JSON_NUMBERS = """
CREATE TABLE doc (id int PRIMARY KEY, j jsonb, t json);
INSERT INTO doc VALUES
  (1, '{"price": 19.99, "n": 1, "big": 12345678901234567890123, "tiny": 0.1}',
   '{"a": 1, "b": [1, 2]}');
"""


def test_json_numbers_keep_how_they_are_stored(pg):
    db = pg.database(JSON_NUMBERS)
    s = sink(pg, db)
    before = s.snapshot()
    (row,) = before.state.rows("doc")
    assert row["j"] == {
        "price": 19.99,
        "n": 1,
        "big": {"$int": "12345678901234567890123"},
        "tiny": 0.1,
    }
    pg.run(
        db,
        """UPDATE doc SET j = '{"price": 19.990000000000000001, "n": 1.0,
                                "big": 12345678901234567890123, "tiny": 0.10}'""",
    )
    # jsonb keeps each number as written (a numeric with its scale): these are other values.
    with pg.connect(db) as c:
        assert c.execute("SELECT j->>'n', j->>'tiny' FROM doc").fetchone() == ("1.0", "0.10")
    (c,) = s.diff(before, s.snapshot()).changed("doc")
    assert set(c.fields) == {"j"}
    new = c.fields["j"].new
    assert new["price"] == {"$decimal": "19.990000000000000001"}
    assert new["n"] == 1.0 and isinstance(new["n"], float)
    assert new["tiny"] == {"$decimal": "0.10"}
    assert new["big"] == {"$int": "12345678901234567890123"}
    moved = c.fields["j"].detail["type_changes"]
    assert set(moved) == {"root['price']", "root['n']", "root['tiny']"}


def test_a_json_column_rewritten_with_other_spacing_is_no_change(pg):
    """``json`` keeps its text as written; the value is the parsed structure, so spacing and
    key order are no change (neither in the digest nor in the diff) and a value still is."""
    db = pg.database(JSON_NUMBERS)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, """UPDATE doc SET t = '{ "b" : [1,2],  "a":1 }'""")
    after = s.snapshot()
    assert after.digest == before.digest and s.diff(before, after).empty
    pg.run(db, """UPDATE doc SET t = '{"a": 1.0, "b": [1, 2]}'""")
    (c,) = s.diff(before, s.snapshot()).changed("doc", "t")
    assert c.fields["t"].old == {"a": 1, "b": [1, 2]}
    assert c.fields["t"].new == {"a": 1.0, "b": [1, 2]} and isinstance(
        c.fields["t"].new["a"], float
    )


def test_values_python_calls_equal_but_stored_differently_are_changes(pg):
    """A clock time at another offset, a numeric with another scale, and 0 against -0 compare
    equal in Python; PostgreSQL stores them differently, so they are changes."""
    db = pg.database(
        "CREATE TABLE v (id int PRIMARY KEY, at timetz, n numeric, f float8);"
        "INSERT INTO v VALUES (1, '10:00+02', 1.0, 0);"
    )
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, "UPDATE v SET at = '08:00+00', n = 1.00, f = '-0'::float8")
    (c,) = s.diff(before, s.snapshot()).changed("v")
    assert {k: (f.old, f.new) for k, f in c.fields.items()} == {
        "at": ("10:00:00+02:00", "08:00:00+00:00"),
        "n": ({"$decimal": "1.0"}, {"$decimal": "1.00"}),
        "f": (0.0, -0.0),
    }


def test_a_change_the_reading_cannot_show_fails_the_diff(pg):
    """The safety net: a chunk whose server digest moved while its rows read the same (as a
    reading that folds two stored values together would give) is an error naming the table,
    never "nothing changed". No PostgreSQL type is known to fold any more, so the fold is made
    here by keeping the rows read before under the digests the server gives after."""
    from dataclasses import replace
    from types import MappingProxyType

    from oracle.evidence.diff import IncompleteEvidenceError
    from oracle.sinks.sql_state import Chunk, ChunkedView, SqlState

    db = pg.database(BIG)
    s = sink(pg, db)
    before = s.snapshot()
    pg.run(db, "UPDATE big SET n = 99 WHERE id = 3000")
    after = s.snapshot()
    b, a = before.state.tables["big"], after.state.tables["big"]
    chunks = MappingProxyType({k: Chunk(c.digest, b.chunks[k].rows) for k, c in a.chunks.items()})
    folded = replace(
        a,
        chunks=chunks,
        rows=ChunkedView(chunks, a.chunking, "rows"),
        digests=ChunkedView(chunks, a.chunking, "digests"),
    )
    lost = SqlState(MappingProxyType({"big": folded}), after.state.objects)
    with pytest.raises(IncompleteEvidenceError, match=r"table 'big'.*id from 2048 to 3071"):
        s.diff(before, replace(after, state=lost))
    assert [c.key for c in s.diff(before, after).changed("big")] == [[3000]]
