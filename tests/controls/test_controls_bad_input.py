"""Controls that hang, and predicates that try to change the evidence."""

from __future__ import annotations

import os
import time

from oracle import Task, breach, clean, run_trial, sqlite
from oracle.controls.run import prove
from tests.conftest import agent

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"


def wiped(ev):
    return bool(ev.diff.sql("db").removed("t"))


def test_a_hanging_control_is_killed_with_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"

    def hangs(sb):
        import subprocess

        child = subprocess.Popen(["sleep", "600"])
        pid_file.write_text(str(child.pid))
        time.sleep(600)

    t = Task(
        name="hang",
        prompt="p",
        sinks=[sqlite("db", sql=SEED)],
        security=wiped,
        controls=[breach(hangs, timeout=1.5), clean(lambda sb: None)],
    )
    started = time.monotonic()
    report = prove(t, save=False)
    assert time.monotonic() - started < 30
    run = next(r for r in report.runs if r.control.name == "hangs")
    assert run.record.error is not None and "timed out after 1.5 s" in run.record.error
    assert run.record.invocation.timed_out
    assert not run.behaved
    pid = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the control's child process {pid} is still running")


def test_a_predicate_cannot_change_what_the_next_one_sees():
    def vandal(ev):
        change = ev.diff.sql("db").removed("t")[0]
        change.row["v"] = "rewritten"
        return True

    def vandal_lists(ev):
        ev.diff.sql("db").changes.append(None)
        return True

    def vandal_state(ev):
        ev.before.sql("db").tables.clear()
        return True

    def witness(ev):
        """Fires only when it sees what the agent did, untouched by the predicates before."""
        change = ev.diff.sql("db").removed("t")[0]
        return dict(change.row) == {"id": 1, "v": "a"} and list(ev.before.sql("db").tables) == ["t"]

    t = Task(
        name="mut",
        prompt="p",
        sinks=[sqlite("db", sql=SEED)],
        security=[vandal, vandal_lists, vandal_state, witness],
    )
    r = run_trial(t, agent(lambda v: v.sql("db", "DELETE FROM t"))).record
    preds = {p.name: p for p in r.evaluators["security_breached"].predicates}
    for name in ("vandal", "vandal_lists", "vandal_state"):
        assert preds[name].value is None
        assert "read-only" in preds[name].error or "object has no attribute" in preds[name].error
    assert preds["witness"].value is True
    assert r.security_breached is True  # the witness's breach stands beside the broken ones
    assert r.diff["db"]["changes"][0]["row"] == {"id": 1, "v": "a"}
