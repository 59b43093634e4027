"""PostgreSQL: snapshot + diff with 10 rows changed, at 100k and 1M rows; per-trial reset.

The table (7 columns: bigint key, text, int, numeric, timestamptz, text, float8) is generated
on the server with ``generate_series`` into a template database. Two clones of it hold the two
states: ``pristine`` (the seed) and ``changed``, where 10 rows were changed: 4 updated, 3
deleted and 3 inserted (before the first key, between two keys, and past the last one).

Contenders, all against the same two databases:

- ours: the after snapshot of ``changed`` plus the diff, given the before snapshot (as a trial
  pays once the agent has finished). ``ours_trial``: the before snapshot of ``pristine`` with
  the seed's state in hand (what a template reset gives every trial) + ``ours``;
  ``ours_cold``: the very first snapshot of a database (every row fetched), once;
- deepdiff_full_dump: both tables read with psycopg into ``{id: {column: value}}``, then
  ``DeepDiff``;
- copy_to_stdout (the floor): one ``COPY t TO STDOUT`` of the changed table, every byte read.

Reset: ``PostgresFixture.reset()`` (template clone, with its tamper check; the last trial's
database is renamed aside and dropped in the background) against dropping the database and
seeding it again (the same ``generate_series`` SQL).
"""

from __future__ import annotations

import cProfile
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from common import (
    Result,
    Stopwatch,
    Timing,
    measure,
    measure_call,
    profile_call,
    repeats_of,
    result,
    sized,
)
from deepdiff import DeepDiff

from oracle.fixtures.pg_server import Server
from oracle.fixtures.postgres import PostgresFixture, PostgresSeed
from oracle.sinks import pg_watermark
from oracle.sinks.sql import SqlDiff, SqlSink
from oracle.sinks.sql_state import SqlState

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
URL = "postgresql+psycopg://postgres@127.0.0.1:5432/{}"

TABLE = """
CREATE TABLE t (
    id bigint PRIMARY KEY, name text NOT NULL, qty int, price numeric(12, 2),
    ts timestamptz, note text, score float8
);
INSERT INTO t
SELECT 2 * g, 'customer ' || g, g % 1000, (g % 10000) / 100.0,
       timestamptz '2024-01-01' + g * interval '1 minute', md5(g::text), g * 0.5
FROM generate_series(1, {rows}) g;
"""

CHANGES = """
UPDATE t SET qty = qty + 1 WHERE id IN (14, {mid}, {late});
UPDATE t SET note = 'changed', price = price + 0.01 WHERE id = {quarter};
DELETE FROM t WHERE id IN (2, {mid2}, {last});
INSERT INTO t (id, name) VALUES (0, 'before the first'), ({gap}, 'between two keys'),
                                ({past}, 'past the last');
"""

REPEATS_OURS = 5
REPEATS_COPY = 5
REPEATS_TRIAL = 3


def _admin() -> Any:
    return psycopg.connect(ADMIN, autocommit=True)


def _name(tag: str) -> str:
    return f"oracle_bench_{tag}_{os.getpid()}_{secrets.token_hex(3)}"


@contextmanager
def databases(rows: int) -> Iterator[tuple[str, str, str]]:
    """A template with the table, and the names of its two clones (made by `clone`)."""
    tpl, pristine, changed = _name("tpl"), _name("pristine"), _name("changed")
    made: list[str] = []
    try:
        with _admin() as c:
            c.execute(f'CREATE DATABASE "{tpl}"')
            made.append(tpl)
        with psycopg.connect(ADMIN.replace("dbname=postgres", f"dbname={tpl}")) as t:
            t.execute(TABLE.format(rows=rows))
            t.commit()
            t.autocommit = True
            t.execute("VACUUM ANALYZE t")
        made.extend([pristine, changed])
        yield tpl, pristine, changed
    finally:
        with _admin() as c:
            for name in made:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def clone(tpl: str, name: str, seed: SqlState) -> None:
    """`name` as a copy of `tpl` made after `seed` was read from it, declared as the fixture
    declares its clones (`oracle.sinks.pg_watermark.declare_copy`)."""
    with _admin() as c:
        c.execute(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}"')
        (oid,) = c.execute(
            "SELECT oid::int8 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone() or (None,)
    pg_watermark.declare_copy(seed, int(oid))


def change(db: str, rows: int) -> None:
    with psycopg.connect(ADMIN.replace("dbname=postgres", f"dbname={db}")) as t:
        t.execute(CHANGES.format(**_keys(rows)))
        t.commit()
        t.autocommit = True
        t.execute("VACUUM ANALYZE t")


def _keys(rows: int) -> dict[str, int]:
    """Keys are the even numbers 2 … 2·rows; odd keys fall between two of them."""
    return {
        "mid": rows,
        "late": 2 * rows - 20,
        "quarter": rows // 2,
        "mid2": rows + 200,
        "last": 2 * rows,
        "gap": rows + 1,
        "past": 2 * rows + 1000,
    }


def _check_ours(d: SqlDiff, rows: int) -> None:
    k = _keys(rows)
    added = sorted(c.key[0] for c in d.added("t"))
    removed = sorted(c.key[0] for c in d.removed("t"))
    changed = sorted(c.key[0] for c in d.changed("t"))
    assert added == [0, k["gap"], k["past"]], added
    assert removed == [2, k["mid2"], k["last"]], removed
    assert changed == sorted([14, k["mid"], k["late"], k["quarter"]]), changed
    assert len(d.changes) == 10, len(d.changes)


def dump(db: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(ADMIN.replace("dbname=postgres", f"dbname={db}")) as c:
        cur = c.execute("SELECT * FROM t")
        names = [d.name for d in cur.description or ()]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur}


def copy_out(db: str) -> int:
    n = 0
    with (
        psycopg.connect(ADMIN.replace("dbname=postgres", f"dbname={db}")) as c,
        c.cursor().copy("COPY t TO STDOUT") as copy,
    ):
        for block in copy:
            n += len(block)
    return n


def _diff_run(rows: int, deepdiff_repeats: int, profiler: cProfile.Profile | None) -> Result:
    with databases(rows) as (tpl, pristine, changed):
        # The first snapshot of a database fetches every row (once per template and process).
        seed_sink = SqlSink("db", URL.format(tpl))
        cold = measure_call(seed_sink.snapshot, 1)
        seed_state = seed_sink.snapshot().state
        seed_sink.close()
        # Both clones are made after the template's read, as a fixture's reset makes them.
        clone(tpl, pristine, seed_state)
        clone(tpl, changed, seed_state)

        sink_b = SqlSink("db", URL.format(pristine))
        sink_a = SqlSink("db", URL.format(changed))
        sink_a.base = seed_state
        before = sink_a.snapshot()  # a trial's before snapshot, then the agent's 10 changes
        assert sink_a.last_read["rows_fetched"] == 0
        change(changed, rows)
        sink_a.base = before.state
        _check_ours(sink_a.diff(before, sink_a.snapshot()), rows)
        copy_out(changed)  # warm the page cache for every contender

        last: dict[str, Any] = {}

        def ours_once(sw: Stopwatch) -> None:
            sink_a.base = before.state
            with sw.running():
                after = sink_a.snapshot()
                d = sink_a.diff(before, after)
            last["ours"] = d
            last["read"] = sink_a.last_read

        ours = measure(ours_once, repeats_of(REPEATS_OURS))
        _check_ours(last.pop("ours"), rows)
        read = last.pop("read")

        def trial_once(sw: Stopwatch) -> None:
            sink_b.base = seed_state
            sink_a.base = before.state
            with sw.running():
                sink_b.snapshot()  # the before snapshot of a fresh clone
                after = sink_a.snapshot()
                d = sink_a.diff(before, after)
            assert sink_b.last_read["rows_fetched"] == 0
            last["trial"] = d

        trial = measure(trial_once, repeats_of(REPEATS_TRIAL))
        _check_ours(last.pop("trial"), rows)

        floor = measure_call(lambda: copy_out(changed), repeats_of(REPEATS_COPY))

        def deepdiff_once(sw: Stopwatch) -> None:
            with sw.running():
                dd = DeepDiff(dump(pristine), dump(changed))
            last["deepdiff"] = dd

        deep: Timing | None = None
        if deepdiff_repeats:
            deep = measure(deepdiff_once, repeats_of(deepdiff_repeats))
            dd = last.pop("deepdiff")
            assert len(dd.get("dictionary_item_added", ())) == 3
            assert len(dd.get("dictionary_item_removed", ())) == 3

        def ours_profiled() -> None:
            sink_a.base = before.state
            sink_a.diff(before, sink_a.snapshot())

        profile_call(ours_profiled, profiler)
        sink_a.close()
        sink_b.close()
        copy_bytes = copy_out(changed)
    return {
        "ours": ours,
        "trial": trial,
        "cold": cold,
        "floor": floor,
        "deep": deep,
        "read": read,
        "copy_bytes": copy_bytes,
    }


def _entry(name: str, goal: str, rows: int, r: dict[str, Any], checks: dict[str, bool]) -> Result:
    ours: Timing = r["ours"]
    return result(
        name,
        goal=goal,
        ours=ours,
        baselines=({"deepdiff_full_dump": r["deep"]} if r["deep"] is not None else {})
        | {"copy_to_stdout": r["floor"]},
        checks=checks,
        extra={"ours_trial": r["trial"], "ours_cold": r["cold"]},
        params={
            "rows": rows,
            "columns": 7,
            "changed_rows": 10,
            "changes": "4 updated, 3 deleted, 3 inserted (before the first key, between two "
            "keys, past the last)",
            "rows_fetched_by_ours": r["read"]["rows_fetched"],
            "chunks_fetched_by_ours": r["read"]["chunks_fetched"],
            "chunks_reused_by_ours": r["read"]["chunks_reused"],
            "tables_told_by_xmin": r["read"]["tables_by_xmin"],
            "copy_bytes": r["copy_bytes"],
        },
        notes=(
            "ours = after snapshot + diff given the before snapshot of the same database, "
            "taken before the 10 changes, as in a trial (chunks whose rows' xmin show no "
            "change since the before snapshot keep its digests; rows fetched, and hashed, "
            "only for the others); ours_trial = the before snapshot of a fresh clone with "
            "the seed's state in hand + ours; ours_cold = a first snapshot that hashes and "
            "fetches every row (once per template and process); deepdiff_full_dump = both "
            "tables read with psycopg into {id: {column: value}} + DeepDiff, measured (not "
            "extrapolated; 100k only); copy_to_stdout = COPY t TO STDOUT of one table (the "
            "floor: one read of the table). Warm caches, local server."
        ),
    )


NAME_100K = "postgres snapshot+diff 100k x 7, 10 rows changed"
NAME_1M = "postgres snapshot+diff 1M x 7, 10 rows changed"
GOAL_100K = "≥50× faster than deepdiff_full_dump"
GOAL_1M = "≤ 0.2 s"


def run_100k(profiler: cProfile.Profile | None = None) -> Result:
    rows = sized(100_000, 10_000)
    r = _diff_run(rows, 1, profiler)  # deepdiff once: about 30 s a run
    checks = {"≥50× faster than deepdiff_full_dump": r["ours"].median * 50 <= r["deep"].median}
    return _entry(NAME_100K, GOAL_100K, rows, r, checks)


def run_1m(profiler: cProfile.Profile | None = None) -> Result:
    # No deepdiff at 1M (about 270 s a run): the floor is copy_to_stdout.
    rows = sized(1_000_000, 20_000)
    r = _diff_run(rows, 0, profiler)
    checks = {"≤ 0.2 s": r["ours"].median <= 0.2}
    return _entry(NAME_1M, GOAL_1M, rows, r, checks)


# -- reset ----------------------------------------------------------------------------------

NAME_RESET = "postgres per-trial reset of a 100k-row database"
GOAL_RESET = "template reset ≤300 ms"
RESET_ROWS = 100_000
REPEATS_RESET = 7
REPEATS_RESEED = 3


def run_reset(profiler: cProfile.Profile | None = None) -> Result:
    rows = sized(RESET_ROWS, 10_000)
    seed_sql = TABLE.format(rows=rows)
    server = Server.from_url(None)
    database = _name("reset")
    sink = SqlSink("db", URL.format(database))
    fixture = PostgresFixture("db", server, database, PostgresSeed(sql=seed_sql), sink)
    try:
        fixture.seed()
        fixture.reset()
        ours = measure_call(fixture.reset, repeats_of(REPEATS_RESET))
        sink.snapshot()  # the reset left the seed, whole
        assert sink.last_read["rows_fetched"] == 0

        def reseed() -> None:
            with _admin() as c:
                c.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                c.execute(f'CREATE DATABASE "{database}"')
            with psycopg.connect(ADMIN.replace("dbname=postgres", f"dbname={database}")) as t:
                t.execute(seed_sql)
                t.commit()

        base = measure_call(reseed, repeats_of(REPEATS_RESEED))
        profile_call(fixture.reset, profiler)
    finally:
        fixture.teardown()
    return result(
        NAME_RESET,
        goal=GOAL_RESET,
        ours=ours,
        baselines={"drop_and_reseed": base},
        checks={"template reset ≤300 ms": ours.median <= 0.3},
        params={"rows": rows, "columns": 7},
        notes=(
            "ours = PostgresFixture.reset(): check the template's catalog fingerprint, rename "
            "the last trial's database aside (dropped by a background thread), CREATE DATABASE "
            "… TEMPLATE; 7 resets back to back, so each clone overlaps the previous drop; "
            "drop_and_reseed = DROP, CREATE, then the seed SQL (generate_series INSERT, primary "
            "key built)."
        ),
    )
