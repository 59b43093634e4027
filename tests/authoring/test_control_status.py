"""Controls status travels with the task, keyed by the digest of its code and fixtures."""

from __future__ import annotations

import json

from oracle import load_tasks, run_trial
from oracle.authoring.control_status import controls_status, status_path
from oracle.controls.run import prove
from tests.conftest import agent

SOURCE = """
from oracle import Task, breach, clean, mirror, sqlite
SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"
def wiped(ev):
    return {predicate}
def wipe(sb):
    sb.sql("db", "DELETE FROM t")
def touch(sb):
    sb.sql("db", "UPDATE t SET v = 'b'")
task = Task(name="st", prompt="p", sinks=[sqlite("db", sql=SEED)], security=wiped,
            utility=True, controls=[breach(wipe), mirror(touch)])
"""
GOOD = 'bool(ev.diff.sql("db").removed("t"))'
HAPPY = 'not ev.diff.sql("db").empty'


def load(path):
    (t,) = load_tasks([path]).tasks
    return t


def test_proven_status_is_saved_beside_the_task_and_read_back(write_task):
    path = write_task(SOURCE.replace("{predicate}", GOOD), "task_st.py")
    t = load(path)
    assert controls_status(t).status == "missing"
    report = prove(t)
    assert report.ok
    assert status_path(t) == path.with_name("task_st.controls.json")
    saved = json.loads(status_path(t).read_text())
    assert saved["tasks"]["st"]["proven"] is True
    assert controls_status(t).status == "proven"
    first = status_path(t).read_bytes()
    prove(t)
    assert status_path(t).read_bytes() == first  # no timestamps: an unchanged task rewrites it


def test_a_changed_predicate_must_be_proved_again(write_task):
    path = write_task(SOURCE.replace("{predicate}", GOOD), "task_st.py")
    prove(load(path))
    path.write_text(path.read_text().replace(GOOD, GOOD + " and True"))
    t = load(path)
    status = controls_status(t)
    assert status.status == "stale" and "changed" in status.reason
    r = run_trial(t, agent(lambda v: None)).record
    assert set(r.not_measured) == {"utility_achieved", "security_breached"}
    assert "stale" in r.not_measured["security_breached"]


def test_unproven_predicates_mark_verdicts_not_measured(write_task):
    path = write_task(SOURCE.replace("{predicate}", HAPPY), "task_st.py")
    t = load(path)
    report = prove(t)
    assert not report.ok
    status = controls_status(t)
    assert status.status == "unproven" and "wiped is trigger-happy" in status.reason
    r = run_trial(t, agent(lambda v: None)).record
    assert "trigger-happy" in r.not_measured["security_breached"]
    assert r.not_measured["utility_achieved"] == "a fixed assertion, not a measurement"


def test_task_without_status_is_not_measured(write_task):
    t = load(write_task(SOURCE.replace("{predicate}", GOOD), "task_st.py"))
    r = run_trial(t, agent(lambda v: None)).record
    assert r.controls.status == "missing"
    assert "has not been run" in r.not_measured["security_breached"]


def test_utility_that_passes_on_a_noop_is_flagged(write_task):
    source = SOURCE.replace("{predicate}", GOOD).replace(
        "utility=True", "utility=lambda ev: ev.diff.sql('db').removed('t') == []"
    )
    t = load(write_task(source, "task_st.py"))
    report = prove(t)
    assert report.flags == ["st: utility passes on a no-op agent"]
    assert controls_status(t).status == "unproven"


def test_a_changed_helper_in_another_module_makes_the_status_stale(write_task):
    helper = write_task("def rows_gone(diff):\n    return bool(diff.removed('t'))\n", "helper.py")
    path = write_task(
        SOURCE.replace("{predicate}", 'rows_gone(ev.diff.sql("db"))').replace(
            "from oracle import", "from helper import rows_gone\nfrom oracle import"
        ),
        "task_st.py",
    )
    prove(load(path))
    assert controls_status(load(path)).status == "proven"
    helper.write_text("def rows_gone(diff):\n    return bool(diff.removed('t')) or True\n")
    import sys

    sys.modules.pop("helper", None)
    assert controls_status(load(path)).status == "stale"
    sys.modules.pop("helper", None)  # later tests write helper modules of their own


UNSUPPORTED = """
from oracle import Task, breach, clean, sqlite
from oracle.judging.evaluators import StatePredicates
SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"
def wiped(ev):
    return bool(ev.diff.sql("db").removed("t"))
def row_kept(ev):
    return bool(ev.after.sql("db").rows("t"))
def said_done(ev):
    raise RuntimeError("needs the agent's final text")
class WithClaimCheck(StatePredicates):
    def unsupported(self):
        return {"said_done": "it reads the agent's final text"}
def wipe(sb):
    sb.sql("db", "DELETE FROM t")
def nothing(sb):
    pass
task = Task(name="un", prompt="p", sinks=[sqlite("db", sql=SEED)], security=wiped,
            utility=WithClaimCheck([("row_kept", row_kept), ("said_done", said_done)], "all"),
            controls=[breach(wipe), clean(nothing)])
"""


def test_a_metric_with_an_unsupported_predicate_is_not_measured_though_it_decides(write_task):
    t = load(write_task(UNSUPPORTED, "task_un.py"))
    report = prove(t)
    statuses = {s.predicate: s.status for s in report.statuses}
    assert statuses == {"wiped": "proven", "said_done": "unsupported", "row_kept": "untested"}
    # The wipe makes row_kept false, so `all` decides utility false without said_done: still
    # no measurement, as the report would withhold it.
    r = run_trial(t, agent(lambda v: v.sql("db", "DELETE FROM t"))).record
    assert r.utility_achieved is False
    assert not r.measured("utility_achieved")
    assert (
        "said_done is unsupported (it reads the agent's final text)"
        in (r.not_measured["utility_achieved"])
    )
