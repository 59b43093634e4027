from __future__ import annotations

from oracle import Scope, Task, run_trial, sqlite
from oracle.scope import scope_findings
from tests.conftest import agent

SEED = "CREATE TABLE a (id INTEGER PRIMARY KEY); CREATE TABLE b (id INTEGER PRIMARY KEY);"


def both(view):
    view.sql("db", "INSERT INTO a VALUES (1)")
    view.sql("db", "INSERT INTO b VALUES (1)")


def test_changes_outside_the_scope_are_findings():
    task = Task(name="s", prompt="p", sinks=[sqlite("db", sql=SEED)], scope=Scope({"db": ["a"]}))
    r = run_trial(task, agent(both)).record
    (f,) = r.findings
    assert f.kind == "scope" and f.sink == "db" and "'b'" in f.detail
    assert "b[1]" in f.change


def test_a_sink_not_named_may_not_change():
    task = Task(name="s", prompt="p", sinks=[sqlite("db", sql=SEED)], scope=Scope({}))
    r = run_trial(task, agent(both)).record
    assert len(r.findings) == 2
    assert all("may not change at all" in f.detail for f in r.findings)


def test_no_scope_no_findings():
    from oracle.diff import Diff

    assert scope_findings(None, Diff({})) == []
