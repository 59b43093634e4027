"""A SQLite sink read with the standard library gives what SQLAlchemy's reflection gives, or
hands the read to SQLAlchemy: every declared type against the dialect's own answer, whole
snapshots and diffs of awkward schemas both ways, and URLs it must not take."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import warnings

import pytest

from oracle.sinks import sqlite_schema
from oracle.sinks.sql import SqlSink, _type_name
from oracle.sinks.sqlite_schema import NotNative
from tests.conftest import DEMO, REPO

WORDS = [
    # every name of the dialect's table, and others each affinity rule catches
    "BIGINT", "BLOB", "BOOL", "BOOLEAN", "CHAR", "DATE", "DATE_CHAR", "DATETIME",
    "DATETIME_CHAR", "DOUBLE", "DECIMAL", "FLOAT", "INT", "INTEGER", "JSON", "JSONB",
    "NUMERIC", "REAL", "SMALLINT", "TEXT", "TIME", "TIME_CHAR", "TIMESTAMP", "VARCHAR",
    "NVARCHAR", "NCHAR", "TINYINT", "MEDIUMINT", "UNSIGNED BIG INT", "INT2", "INT8",
    "CHARACTER", "VARYING CHARACTER", "NATIVE CHARACTER", "CLOB", "MYTEXT", "MYBLOB", "",
    "DOUBLE PRECISION", "FLOATING", "MONEY", "UUID", "STRING", "VARCHAR ", "point",
    "integer", "varchar", "Json", "double_char", "BINARY", "TIMESTAMPTZ",
]  # fmt: skip
ARGS = ["", "(5)", "(10,2)", "(10, 2)", "(1,2,3)", " (8)", "(007)", "(x)", "(-1)", "()"]


def _sqlalchemy_name(declared: str) -> tuple[str, bool]:
    import sqlalchemy as sa
    from sqlalchemy.dialects.sqlite.base import SQLiteDialect

    dialect = SQLiteDialect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "could not instantiate type … with arguments"
        col_type = dialect._resolve_type_affinity(declared.upper())
    return _type_name(col_type, dialect), isinstance(col_type, sa.JSON)


def test_every_declared_type_is_named_as_sqlalchemy_names_it_or_left_to_it():
    answered = 0
    for word in WORDS:
        for args in ARGS:
            declared = word + args
            try:
                ours = sqlite_schema.type_name(declared)
            except NotNative:
                continue
            assert ours == _sqlalchemy_name(declared), declared
            answered += 1
    # Left to SQLAlchemy: only two or more arguments to a type named with its length, and
    # three or more to one named with its precision.
    assert answered >= len(WORDS) * len(ARGS) - 2 * len(WORDS)
    for declared in ("VARCHAR(5)", "DECIMAL(10, 2)", "INT", "", "JSON", "MONEY(3)"):
        sqlite_schema.type_name(declared)  # each answered here, not left out
    with pytest.raises(NotNative):
        sqlite_schema.type_name("VARCHAR(10,2)")


SCHEMA = [
    "CREATE TABLE plain (a, b INT, c varchar(20) NOT NULL DEFAULT 'x', d DECIMAL(10,2))",
    'CREATE TABLE "we""ird name" ("sel ect" TEXT PRIMARY KEY, "Mixed" JSON DEFAULT (json(\'{}\')))',
    "CREATE TABLE composite (k2 INT, k1 TEXT, v BLOB, ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP,"
    " PRIMARY KEY (k1, k2)) WITHOUT ROWID",
    "CREATE TABLE affinity (m MONEY(8,2), f FLOATING, u UNSIGNED BIG INT, n NATIVE CHARACTER(7))",
    "CREATE INDEX plain_b ON plain (b)",
    "CREATE VIEW v AS SELECT a FROM plain",
    "CREATE TRIGGER t AFTER INSERT ON plain BEGIN SELECT 1; END",
    "INSERT INTO plain VALUES (1, 2, 'y', 3.25), (NULL, 5, 'z', NULL), ('t', NULL, 'q', 7)",
    "INSERT INTO \"we\"\"ird name\" VALUES ('k', '{\"a\": [1, 2]}'), ('j', '[]')",
    "INSERT INTO composite VALUES (2, 'b', x'00ff', '2026-01-01'), (1, 'b', NULL, NULL)",
    "INSERT INTO affinity VALUES (1.5, 2, 3, 'abc')",
]
CHANGES = [
    "UPDATE plain SET c = 'changed' WHERE b = 5",
    "DELETE FROM composite WHERE k2 = 1",
    'INSERT INTO "we""ird name" VALUES (\'new\', \'{"b": null}\')',
    "ALTER TABLE affinity ADD COLUMN added VARCHAR(3) DEFAULT 'no'",
    "CREATE INDEX later ON composite (v)",
]


def _database(tmp_path, statements):  # type: ignore[no-untyped-def]
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as db:
        for s in statements:
            db.execute(s)
    return path


def _both(path):  # type: ignore[no-untyped-def]
    """A sink that reads with the standard library, and one that reads through SQLAlchemy
    (a URL with a query is left to it)."""
    native = SqlSink("db", f"sqlite:///{path}")
    through = SqlSink("db", f"sqlite:///{path}?timeout=5", display_url=f"sqlite:///{path}")
    return native, through


def _through_sqlalchemy(monkeypatch, native) -> list[bool]:  # type: ignore[no-untyped-def]
    """A list that gets, at each read through SQLAlchemy, whether it was `native`'s."""
    handed: list[bool] = []
    real = SqlSink._read_sqlite

    def spy(self, conn, inspector):  # type: ignore[no-untyped-def]
        handed.append(self is native)
        return real(self, conn, inspector)

    monkeypatch.setattr(SqlSink, "_read_sqlite", spy)
    return handed


def test_snapshots_and_diffs_are_the_same_both_ways(tmp_path, monkeypatch):
    path = _database(tmp_path, SCHEMA)
    native, through = _both(path)
    handed = _through_sqlalchemy(monkeypatch, native)
    before = [native.snapshot(), through.snapshot()]
    assert before[0].digest == before[1].digest
    assert before[0].state == before[1].state
    with sqlite3.connect(path) as db:
        for s in CHANGES:
            db.execute(s)
    after = [native.snapshot(), through.snapshot()]
    assert after[0].digest == after[1].digest
    assert after[0].state == after[1].state
    assert handed == [False, False]  # only the second sink went through SQLAlchemy
    diffs = [sink.diff(b, a) for sink, b, a in zip((native, through), before, after, strict=True)]
    assert diffs[0].changes == diffs[1].changes
    kinds = {type(c).__name__ for c in diffs[0].changes}
    assert {"RowChanged", "RowRemoved", "RowAdded"} <= kinds, kinds
    # The column types reflected, as both name them.
    cols = {c.name: (c.type, c.is_json) for c in after[0].state.tables["affinity"].columns}
    assert cols == {
        "m": ("NUMERIC(8, 2)", False),
        "f": ("REAL", False),
        "u": ("INTEGER", False),
        "n": ("TEXT(7)", False),
        "added": ("VARCHAR(3)", False),
    }
    weird = after[0].state.tables['we"ird name']
    assert [c.is_json for c in weird.columns] == [False, True]
    assert after[0].state.tables["composite"].primary_key == ("k1", "k2")


def test_a_generated_column_or_an_odd_type_is_read_through_sqlalchemy(tmp_path, monkeypatch):
    """What the standard-library reader cannot vouch for is read by SQLAlchemy, whole, and
    the two sinks still agree."""
    path = _database(
        tmp_path,
        [
            "CREATE TABLE g (a INT, b INT GENERATED ALWAYS AS (a * 2) VIRTUAL, c VARCHAR(5,2))",
            "INSERT INTO g (a, c) VALUES (1, 'x')",
        ],
    )
    native, through = _both(path)
    handed = _through_sqlalchemy(monkeypatch, native)
    a, b = native.snapshot(), through.snapshot()
    assert handed == [True, False]
    assert a.digest == b.digest
    assert [c.type for c in a.state.tables["g"].columns] == ["INTEGER", "INTEGER", "VARCHAR"]


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{path}?mode=ro",
        "sqlite:///file:{path}?mode=rw&uri=true",
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql://x/y",
    ],
)
def test_urls_other_than_the_fixtures_are_left_to_sqlalchemy(tmp_path, url):
    with pytest.raises(NotNative):
        sqlite_schema.open_url(url.format(path=tmp_path / "db.sqlite"), 1.0)


def test_the_read_only_url_of_the_fixture_opens_read_only(tmp_path):
    path = _database(tmp_path, ["CREATE TABLE t (x)"])
    db = sqlite_schema.open_url(f"sqlite:///file:{path}?mode=ro&uri=true", 1.0)
    try:
        assert sqlite_schema.table_names(db) == ["t"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.execute("INSERT INTO t VALUES (1)")
    finally:
        db.close()


TRIAL_WITHOUT_SQLALCHEMY = """
import contextlib
import io
import json
import sys
from oracle.cli.app import main
sys.argv = ["oracle", "trial", sys.argv[1], "--agent", "careful", "--agent", "obedient",
            "--out", sys.argv[2], "--json"]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    try:
        main()
    except SystemExit:
        pass
verdicts = [(r["cell"]["harness"], r["utility_achieved"], r["security_breached"])
            for r in json.loads(printed.getvalue())["records"]]
print(json.dumps({"verdicts": verdicts, "sqlalchemy": "sqlalchemy" in sys.modules}))
"""


def test_a_trial_of_a_sqlite_task_never_loads_sqlalchemy(tmp_path):
    """`oracle trial` on the SQLite demo task, careful and obedient, in one process: its
    verdicts as always, and SQLAlchemy (0.15-0.3 s to import) never loaded."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            TRIAL_WITHOUT_SQLALCHEMY,
            str(DEMO / "task_orders_cleanup.py"),
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["verdicts"] == [["careful", True, False], ["obedient", True, True]]
    assert seen["sqlalchemy"] is False
