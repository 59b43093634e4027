"""Tasks that need a server: skipped with a message naming it when it is down, failed
instead under ORACLE_REQUIRE_SERVICES=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from oracle import Task, postgres, redis, sqlite
from oracle.services import Service, services_of, unreachable
from tests.conftest import REPO

CLOSED = "postgresql://postgres@127.0.0.1:1/postgres"


def anything(ev):
    return ev.diff.sql("db") is not None


def test_specs_declare_their_servers():
    specs = [
        postgres("db", sql="SELECT 1", url=CLOSED),
        redis("cache", url="redis://127.0.0.1:2"),
        sqlite("local", sql="SELECT 1"),
        postgres("db2", sql="SELECT 1", url=CLOSED),
    ]
    assert services_of(specs) == [
        Service("PostgreSQL", "127.0.0.1", 1),
        Service("Redis", "127.0.0.1", 2),
    ]


def test_unreachable_names_the_server_and_why():
    task = Task(
        name="needs-pg",
        prompt="x",
        sinks=[postgres("db", sql="SELECT 1", url=CLOSED)],
        security=anything,
    )
    (problem,) = unreachable(task)
    assert problem.startswith("PostgreSQL at 127.0.0.1:1 is not reachable")


TASK = f'''
from oracle import Task, clean, postgres

def anything(ev):
    return ev.diff.sql("db") is not None

def nothing(sb):
    pass

task = Task(name="needs-pg", prompt="x", sinks=[postgres("db", sql="SELECT 1", url="{CLOSED}")],
            security=anything, controls=[clean(nothing)])
'''


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["trial", "controls"])
def test_cli_skips_a_task_whose_server_is_down_and_fails_when_required(write_task, command):
    path = write_task(TASK)
    env = {k: v for k, v in os.environ.items() if k != "ORACLE_REQUIRE_SERVICES"}
    args = [sys.executable, "-m", "oracle.cli", command, str(path.parent)]
    if command == "trial":
        args += ["--out", str(path.parent / "runs")]
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "skipped needs-pg: PostgreSQL at 127.0.0.1:1 is not reachable" in out.stdout
    env["ORACLE_REQUIRE_SERVICES"] = "1"
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert "cannot run needs-pg" in out.stdout


TWO_TASKS = """
from oracle import Task, breach, clean, postgres, sqlite

def anything(ev):
    return not ev.diff.sql("db").empty

def add(sb):
    sb.sql("db", "INSERT INTO t VALUES (1)")

def nothing(sb):
    pass

# The PostgreSQL server comes from ORACLE_POSTGRES_URL.
pg = Task(name="needs-pg", prompt="x", sinks=[postgres("db", sql="CREATE TABLE t (x int);")],
          security=anything, controls=[breach(add), clean(nothing)])
local = Task(name="local-only", prompt="x", sinks=[sqlite("db", sql="CREATE TABLE t (x int);")],
             security=anything, controls=[breach(add), clean(nothing)])
"""


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["trial", "controls"])
def test_a_skipped_task_is_named_in_the_table_with_its_reason(write_task, command):
    path = write_task(TWO_TASKS)
    env = {k: v for k, v in os.environ.items() if k != "ORACLE_REQUIRE_SERVICES"}
    env.update(ORACLE_POSTGRES_URL=CLOSED, COLUMNS="250", NO_COLOR="1")
    args = [sys.executable, "-m", "oracle.cli", command, str(path.parent)]
    if command == "trial":
        args += ["--out", str(path.parent / "runs")]
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    # After the tables start, the skipped task has a row of its own that says why.
    tables = out.stdout[out.stdout.index("━") :]
    (row,) = [line for line in tables.splitlines() if "needs-pg" in line and "│" in line]
    assert "skipped: PostgreSQL at 127.0.0.1:1 is not reachable" in row
    assert any("local-only" in line for line in tables.splitlines())
    env["ORACLE_REQUIRE_SERVICES"] = "1"
    if command == "trial":  # a folder of its own: the first run's archives are kept
        args[-1] = str(path.parent / "runs-required")
    out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 1
    tables = out.stdout[out.stdout.index("━") :]
    (row,) = [line for line in tables.splitlines() if "needs-pg" in line and "│" in line]
    assert "not run: PostgreSQL at 127.0.0.1:1" in row and "ORACLE_REQUIRE_SERVICES=1" in row
