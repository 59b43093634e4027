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
