"""MariaDB: per-trial reset of a 10,000-row database, two strategies.

- ours (``MariaFixture.reset``): drop the database, create it, replay the seed script (SQL
  text with multi-row INSERTs, as a task ships it) from the oracle's memory;
- template_copy: keep a template schema on the server and copy every table from it
  (``CREATE TABLE … LIKE`` + ``INSERT … SELECT``), after dropping and creating the database.

The replay relies on nothing the agent can write. A template schema sits on the same server as
the agent's database; an agent with the administrator's account could alter it, one confined
to its own database (what the fixture now hands out) cannot.
"""

from __future__ import annotations

import cProfile
import os
import secrets

from common import Result, measure_call, profile_call, repeats_of, result, sized

from oracle.fixtures.mariadb import MariaFixture, MariaSeed, MariaServer, run_script
from oracle.sinks.sql import SqlSink

NAME = "mariadb per-trial reset of a 10k-row database"
GOAL = "measured: replay against template copy (no goal set)"
ROWS = 10_000
QUICK_ROWS = 1_000
REPEATS = 5


def seed_sql(rows: int) -> str:
    parts = [
        "CREATE TABLE t (id bigint PRIMARY KEY, name varchar(40) NOT NULL, qty int, "
        "price decimal(12, 2), note varchar(40));"
    ]
    for start in range(1, rows + 1, 1000):
        values = ", ".join(
            f"({i}, 'customer {i}', {i % 1000}, {(i % 10000) / 100:.2f}, 'note {i}')"
            for i in range(start, min(start + 1000, rows + 1))
        )
        parts.append(f"INSERT INTO t VALUES {values};")
    return "\n".join(parts)


def run(profiler: cProfile.Profile | None = None) -> Result:
    rows = sized(ROWS, QUICK_ROWS)
    server = MariaServer.from_url(None)
    tag = f"{os.getpid()}_{secrets.token_hex(3)}"
    database, template = f"oracle_bench_my_{tag}", f"oracle_bench_mytpl_{tag}"
    seed = MariaSeed(sql=seed_sql(rows))
    sink = SqlSink("db", server.sqlalchemy_url(database))
    fixture = MariaFixture("db", server, database, seed, sink)
    try:
        fixture.seed()
        ours = measure_call(fixture.reset, repeats_of(REPEATS))
        with server.connect() as conn:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{template}`")
                cur.execute(f"CREATE DATABASE `{template}`")
                cur.execute(f"USE `{template}`")
            run_script(conn, seed.sql or "")

            def template_copy() -> None:
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
                    cur.execute(f"CREATE DATABASE `{database}`")
                    cur.execute(
                        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                        (template,),
                    )
                    for (table,) in cur.fetchall():
                        new, old = f"`{database}`.`{table}`", f"`{template}`.`{table}`"
                        cur.execute(f"CREATE TABLE {new} LIKE {old}")
                        cur.execute(f"INSERT INTO {new} SELECT * FROM {old}")

            other = measure_call(template_copy, repeats_of(REPEATS))
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{template}`")
        profile_call(fixture.reset, profiler)
    finally:
        fixture.teardown()
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"template_copy": other},
        checks={},
        params={"rows": rows, "columns": 5, "seed": "SQL text, INSERTs of 1,000 rows"},
        notes=(
            "ours = MariaFixture.reset(): DROP DATABASE, CREATE DATABASE, the seed script "
            "replayed from memory; template_copy = DROP/CREATE, then CREATE TABLE … LIKE and "
            "INSERT … SELECT from a template schema on the same server."
        ),
    )
