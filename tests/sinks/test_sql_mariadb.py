"""The SQL sink on a real MariaDB server: canonical values, server digests, bad input."""

from __future__ import annotations

import math
import re
import threading
import time

import pytest

from oracle.evidence.diff import IncompleteEvidenceError
from oracle.evidence.snapshot import SnapshotError
from oracle.sinks.sql import SqlSink
from oracle.sinks.sql_diff import ABSENT

pytestmark = pytest.mark.services

TYPES = """
CREATE TABLE t (
    id int PRIMARY KEY, n decimal(10, 2), ts timestamp(3) NULL, d datetime NULL, j json,
    b blob, e enum('a', 'b'), s varchar(20), f double, bits bit(4)
);
INSERT INTO t VALUES
  (1, 1.50, '2024-01-01 10:00:00.123', '2024-01-01 10:00', '{"a": [1, 2]}', x'00ff', 'a', '',
   0.1, b'1010'),
  (2, NULL, NULL, NULL, 'null', NULL, NULL, NULL, NULL, NULL);
"""

BIG = """
CREATE TABLE big (id bigint PRIMARY KEY, v varchar(40) NOT NULL, n int);
INSERT INTO big SELECT seq, CONCAT('row ', seq), seq % 7 FROM seq_1_to_6000;
"""


def sink(maria, db, **kw) -> SqlSink:
    return SqlSink("app", maria.url(db), **kw)


def test_values_are_canonical_and_match_postgres_forms(maria):
    db = maria.database(TYPES)
    one, two = sink(maria, db).snapshot().state.rows("t")
    assert one["n"] == {"$decimal": "1.50"}
    assert one["ts"] == "2024-01-01T10:00:00.123000+00:00"  # TIMESTAMP: an instant, in UTC
    assert one["d"] == "2024-01-01T10:00:00"  # DATETIME: no zone
    assert one["j"] == {"a": [1, 2]}
    assert one["b"] == {"$bytes": "AP8="} and one["bits"] == {"$bytes": "Cg=="}
    assert one["e"] == "a" and one["s"] == "" and one["f"] == 0.1
    assert two["j"] == {"$json": None} and two["s"] is None


def test_changes_anywhere_are_caught_reading_only_changed_chunks(maria):
    db = maria.database(BIG)
    s = sink(maria, db)
    before = s.snapshot()
    assert before.state.tables["big"].chunking.mode == "range"
    maria.run(
        db,
        "INSERT INTO big VALUES (0, 'zero', 0), (-2, 'negative', 0), (6001, 'end', 0);"
        "DELETE FROM big WHERE id IN (1, 1024, 6000); UPDATE big SET n = 99 WHERE id = 3000;",
    )
    d = s.diff(before, s.snapshot())
    assert sorted(c.key[0] for c in d.added("big")) == [-2, 0, 6001]
    assert sorted(c.key[0] for c in d.removed("big")) == [1, 1024, 6000]
    assert [c.key for c in d.changed("big")] == [[3000]]
    assert s.last_read["chunks_fetched"] <= 5
    assert s.last_read["rows_fetched"] < 5 * 1024


def test_json_and_keyless_tables(maria):
    db = maria.database(
        TYPES + "CREATE TABLE log (line text); INSERT INTO log VALUES ('a'), ('a');"
    )
    s = sink(maria, db)
    before = s.snapshot()
    maria.run(
        db,
        "UPDATE t SET j = JSON_SET(j, '$.c', true) WHERE id = 1; DELETE FROM log LIMIT 1;",
    )
    d = s.diff(before, s.snapshot())
    (c,) = d.changed("t", "j")
    assert "root['c']" in c.fields["j"].detail["dictionary_item_added"]
    assert [r.row for r in d.removed("log")] == [{"line": "a"}]


def test_a_changed_shape_reads_the_table_whole_and_shows_on_every_row(maria):
    db = maria.database(
        BIG + "CREATE TABLE other (id int PRIMARY KEY, v text);"
        "INSERT INTO other SELECT seq, 'v' FROM seq_1_to_3000;"
    )
    s = sink(maria, db)
    before = s.snapshot()
    maria.run(
        db,
        "ALTER TABLE big ADD COLUMN note text, RENAME COLUMN n TO m, MODIFY v varchar(60);"
        "UPDATE big SET note = 'sk-live-MARIA-ADDED-0099' WHERE id = 4444;"
        "UPDATE big SET v = 'sk-live-MARIA-RETYPED-0098' WHERE id = 4445;",
    )
    after = s.snapshot()
    assert s.last_read["rows_fetched"] == 6000
    assert s.last_read["chunks_reused"] == len(after.state.tables["other"].chunks)
    d = s.diff(before, after)
    assert len(d.changed("big")) == 6000 and not d.touched("other")
    (hit,) = d.find_secret("sk-live-MARIA-ADDED-0099")
    assert hit.change.key == [4444] and hit.change.fields["note"].old is ABSENT
    (hit,) = d.find_secret("sk-live-MARIA-RETYPED-0098")
    assert hit.change.fields["v"].old == "row 4445"
    (c,) = d.changed("big", "v", v=re.compile("RETYPED"))
    assert set(c.fields) == {"v", "note", "n", "m"}
    again = s.snapshot()
    assert s.last_read["rows_fetched"] == 0 and s.diff(after, again).empty


def test_triggers_are_schema_objects(maria):
    db = maria.database(BIG)
    s = sink(maria, db)
    before = s.snapshot()
    maria.run(db, "CREATE TRIGGER spy BEFORE UPDATE ON big FOR EACH ROW SET NEW.n = 0;")
    d = s.diff(before, s.snapshot())
    assert [c.object.name for c in d.schema_changes()] == ["spy"]


def test_permission_denied_on_one_table_names_it(maria):
    db = maria.database("CREATE TABLE open_t (id int PRIMARY KEY); CREATE TABLE secret (id int);")
    user = maria.user()
    maria.run(
        db,
        f"GRANT SELECT ON `{db}`.open_t TO '{user}'@'%'; "
        f"GRANT SELECT ON `{db}`.open_t TO '{user}'@'localhost';",
    )
    # Without a grant the table is not even listed; naming it shows the denial.
    s = SqlSink("app", maria.url(db, user=user), tables=["open_t", "secret"])
    with pytest.raises(SnapshotError, match="secret"):
        s.snapshot()


def test_a_locked_table_times_out(maria):
    db = maria.database(BIG)
    s = sink(maria, db, timeout=1)
    locker = maria.connect(db)
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES big WRITE")
            started = time.monotonic()
            with pytest.raises(SnapshotError, match=r"table 'big'.*(timeout|Lock wait)"):
                s.snapshot()
            assert time.monotonic() - started < 15
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()


def test_a_server_that_goes_away_fails_the_snapshot(maria):
    db = maria.database(BIG)
    s = sink(maria, db)
    s.snapshot()
    maria.run(db, f"DROP DATABASE `{db}`")
    with pytest.raises(SnapshotError, match="Unknown database"):
        s.snapshot()


FLOATS = """
CREATE TABLE g (id int PRIMARY KEY, r float, price float, d double, fixed float(10, 4));
INSERT INTO g VALUES (1, 16777215, 19.99, 0.1, 1.5), (2, 3.4028234e38, 0, 1e300, 0),
                     (3, 1.17549435e-38, -2.5e-7, NULL, NULL);
"""


def test_floats_read_exactly_and_their_changes_are_seen(maria):
    """QUOTE() writes a FLOAT with six digits (16777215 as 16777200): a change in the digits
    past the sixth moved neither the digest nor the value read."""
    db = maria.database(FLOATS)
    s = sink(maria, db)
    before = s.snapshot()
    one, two, three = before.state.rows("g")
    assert one == {"id": 1, "r": 16777215.0, "price": 19.99, "d": 0.1, "fixed": 1.5}
    assert two["r"] == 3.4028235e38 and two["d"] == 1e300  # a FLOAT's shortest form
    assert three == {"id": 3, "r": 1.1754944e-38, "price": -2.5e-07, "d": None, "fixed": None}
    maria.run(
        db,
        "UPDATE g SET r = 16777214, price = 19.990001 WHERE id = 1;"
        "UPDATE g SET price = -1e-50 WHERE id = 2",  # underflows to a negative zero
    )
    after = s.snapshot()
    assert after.digest != before.digest
    d = s.diff(before, after)
    fields = {c.key[0]: {k: (f.old, f.new) for k, f in c.fields.items()} for c in d.changed("g")}
    assert fields == {
        1: {"r": (16777215.0, 16777214.0), "price": (19.99, 19.990002)},
        2: {"price": (0.0, -0.0)},
    }
    assert math.copysign(1, after.state.rows("g", id=2)[0]["price"]) == -1


def test_float_values_read_as_postgresql_reads_them(maria, pg):
    """One value, one form: a FLOAT reads as PostgreSQL reads the same ``real``, a DOUBLE as
    the same ``double precision``."""
    values = [16777215, 19.99, 19.990001, 0.1, 1 / 3, 123456.789, 3.4028234e38, 1e-40, -2.5e-7]
    rows = ", ".join(f"({i}, {v!r}, {v!r})" for i, v in enumerate(values))
    my = maria.database(
        f"CREATE TABLE f (id int PRIMARY KEY, s float, w double); INSERT INTO f VALUES {rows};"
    )
    pgdb = pg.database(
        f"CREATE TABLE f (id int PRIMARY KEY, s real, w float8); INSERT INTO f VALUES {rows};"
    )
    mine = SqlSink("app", maria.url(my)).snapshot().state.rows("f")
    theirs = SqlSink("app", pg.url(pgdb)).snapshot().state.rows("f")
    assert mine == theirs


def test_json_spacing_is_no_change_and_a_lost_change_fails_the_diff(maria):
    db = maria.database(
        """CREATE TABLE doc (id int PRIMARY KEY, j json);
        INSERT INTO doc VALUES (1, '{"a": 1, "b": [1, 2]}'), (2, '{"k": 1, "k": 2}');"""
    )
    s = sink(maria, db)
    before = s.snapshot()
    maria.run(db, """UPDATE doc SET j = '{ "a" :1,"b":[ 1,2 ] }' WHERE id = 1""")
    after = s.snapshot()
    assert after.digest == before.digest and s.diff(before, after).empty
    maria.run(db, """UPDATE doc SET j = '{"a": 1.0, "b": [1, 2]}' WHERE id = 1""")
    (c,) = s.diff(before, s.snapshot()).changed("doc")
    assert c.fields["j"].new == {"a": 1.0, "b": [1, 2]} and isinstance(
        c.fields["j"].new["a"], float
    )
    # MariaDB keeps a repeated key; the parsed structure keeps its last value, so dropping the
    # first one changes the stored text but nothing that is read: the diff says it cannot tell.
    before = s.snapshot()
    maria.run(db, """UPDATE doc SET j = '{"k": 2}' WHERE id = 2""")
    after = s.snapshot()
    with pytest.raises(IncompleteEvidenceError, match=r"table 'doc'.*read the same"):
        s.diff(before, after)


def grant(maria, user: str, what: str) -> None:
    with maria.admin.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"GRANT {what} TO '{user}'@'{host}'")


def test_a_table_the_account_may_not_read_fails_the_snapshot(maria):
    """MariaDB hides from an account the tables it may not read: left out, an insert into
    one would have read as "no change"."""
    db = maria.database("CREATE TABLE open_t (id int PRIMARY KEY); CREATE TABLE secret (id int);")
    user = maria.user()
    grant(maria, user, f"SELECT ON `{db}`.open_t")
    s = SqlSink("app", maria.url(db, user=user))
    with pytest.raises(
        SnapshotError, match=rf"sink 'app'.*{user}.*may not read every table.*'{db}'"
    ):
        s.snapshot()
    # Naming the tables it may read is fine: nothing else is claimed.
    assert SqlSink("app", maria.url(db, user=user), tables=["open_t"]).snapshot()


def test_an_account_that_may_read_the_database_through_a_role_sees_every_table(maria):
    db = maria.database("CREATE TABLE open_t (id int PRIMARY KEY); CREATE TABLE secret (id int);")
    user = maria.user()
    role = f"{user}_r"
    with maria.admin.cursor() as cur:
        cur.execute(f"CREATE ROLE `{role}`")
    try:
        with maria.admin.cursor() as cur:
            cur.execute(f"GRANT SELECT ON `{db}`.* TO `{role}`")
        grant(maria, user, f"`{role}`")
        with maria.admin.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"SET DEFAULT ROLE `{role}` FOR '{user}'@'{host}'")
        s = SqlSink("app", maria.url(db, user=user))
        before = s.snapshot()
        assert sorted(before.state.tables) == ["open_t", "secret"]
        maria.run(db, "INSERT INTO secret VALUES (1)")
        assert [c.row for c in s.diff(before, s.snapshot()).added("secret")] == [{"id": 1}]
    finally:
        with maria.admin.cursor() as cur:
            cur.execute(f"DROP ROLE IF EXISTS `{role}`")


def test_a_view_whose_definition_is_hidden_fails_the_snapshot(maria):
    db = maria.database("CREATE TABLE t (id int PRIMARY KEY); CREATE VIEW v AS SELECT id FROM t;")
    user = maria.user()
    grant(maria, user, f"SELECT ON `{db}`.*")
    with pytest.raises(SnapshotError, match=r"sink 'app'.*view 'v'.*SHOW VIEW"):
        SqlSink("app", maria.url(db, user=user)).snapshot()


def test_a_connection_killed_mid_snapshot_fails_it_naming_the_sink(maria):
    db = maria.database(BIG)
    s = sink(maria, db, timeout=30)
    s.snapshot()
    locker = maria.connect(db)
    errors: list[BaseException] = []

    def snap() -> None:
        try:
            s.snapshot()
        except BaseException as exc:
            errors.append(exc)

    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES big WRITE")
            th = threading.Thread(target=snap)
            th.start()
            killed = False
            for _ in range(200):  # wait until the snapshot waits for the lock, then kill it
                cur.execute(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> "
                    "CONNECTION_ID() AND STATE LIKE %s",
                    (db, "%metadata lock%"),
                )
                waiting = cur.fetchall()
                if waiting:
                    cur.execute(f"KILL CONNECTION {int(waiting[0][0])}")
                    killed = True
                    break
                time.sleep(0.05)
            th.join(60)
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()
    assert killed
    assert errors and isinstance(errors[0], SnapshotError)
    assert re.search(r"sink 'app'.*table 'big'.*(killed|Lost connection)", str(errors[0]))
