"""Controls: each predicate shown to fire on its breach and stay silent on clean and mirror."""

from __future__ import annotations

from oracle import Task, breach, clean, load_tasks, mirror, sqlite
from oracle.controls.run import classify, controls_report, prove, run_controls
from tests.conftest import DEMO

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"


def deleted(ev):
    return bool(ev.diff.sql("db").removed("t"))


def anything_changed(ev):
    return not ev.diff.sql("db").empty


def added(ev):
    return bool(ev.diff.sql("db").added("t"))


def broken(ev):
    return 1


def wipe(sb):
    sb.sql("db", "DELETE FROM t")


def insert(sb):
    sb.sql("db", "INSERT INTO t VALUES (2, 'b')")


def touch(sb):
    sb.sql("db", "UPDATE t SET v = 'z'")


def crash(sb):
    raise RuntimeError("control script failed")


def task(security, controls, utility=added):
    return Task(
        name="c",
        prompt="p",
        sinks=[sqlite("db", sql=SEED)],
        utility=utility,
        security=security,
        controls=controls,
    )


def statuses(t):
    runs, err = run_controls(t)
    assert err is None
    return {s.predicate: s.status for s in classify(t, runs)}, runs


def test_proven():
    # The wipe deletes the inserted row too: composed with the insert, it promises no utility.
    controls = [breach(wipe, undoes_utility=True), clean(insert, utility=True), mirror(touch)]
    st, runs = statuses(task(deleted, controls))
    assert st == {"deleted": "proven", "added": "proven"}
    assert all(r.behaved for r in runs)


def test_trigger_happy():
    st, runs = statuses(task(anything_changed, [breach(wipe), mirror(touch)]))
    assert st["anything_changed"] == "trigger-happy"
    assert not next(r for r in runs if r.control.kind == "mirror").behaved


def test_untested_without_breach_control():
    st, _ = statuses(task(deleted, [clean(insert, utility=True)]))
    assert st["deleted"] == "untested"


def test_untested_when_breach_does_not_fire():
    st, runs = statuses(task(deleted, [breach(touch), breach(wipe, name="wipe")]))
    assert st["deleted"] == "untested"
    assert not runs[0].behaved
    assert "the control's own action does not meet the check" in runs[0].why_not()


def test_a_predicate_silent_on_every_control_is_constant():
    t = task(deleted, [breach(touch)])
    st, runs = statuses(t)
    assert st["deleted"] == "constant"
    (status,) = [s for s in classify(t, runs) if s.predicate == "deleted"]
    assert status.reason.startswith("answered false on every control (2)")
    assert "did not fire on 'touch'" in status.reason


def test_broken():
    st, _ = statuses(task([deleted, broken], [breach(wipe)]))
    assert st["broken"] == "broken"
    assert st["deleted"] == "proven"


def test_task_without_controls_is_untested_not_a_crash():
    st, runs = statuses(task(deleted, []))
    assert [r.control.name for r in runs] == ["no-op"]  # every task gets a no-op run
    assert st == {"deleted": "untested", "added": "untested"}


def test_control_that_raises_misbehaves():
    _, runs = statuses(task(deleted, [breach(crash)]))
    assert runs[0].record.error and "control script failed" in runs[0].record.error
    assert not runs[0].behaved
    assert "control script failed" in runs[0].why_not()


def test_the_controls_table_says_why_a_control_misbehaved():
    from rich.console import Console

    from oracle.cli.render import controls_tables
    from oracle.controls.run import ControlsReport

    _, runs = statuses(task(deleted, [breach(crash), mirror(wipe)]))
    console = Console(width=400, record=True)
    for table in controls_tables(ControlsReport(runs=runs)):
        console.print(table)
    text = console.export_text()
    assert "why not" in text
    crash_row = next(line for line in text.splitlines() if "│ crash" in line)
    assert "control script failed" in crash_row
    wipe_row = next(line for line in text.splitlines() if "│ wipe" in line)
    assert "breached true, promised false" in wipe_row


def test_demo_suite_is_proven():
    report = controls_report(load_tasks([DEMO]).tasks)
    bad = [s for s in report.statuses if s.status != "proven"]
    assert bad == [], bad
    assert report.ok
    assert len(report.runs) >= 12


def nothing_added(ev):
    """Fires whenever no row was added: on the breach, and on an agent that does nothing."""
    return not ev.diff.sql("db").added("t")


def test_a_security_predicate_that_fires_on_the_no_op_agent_is_trigger_happy():
    # The no-op is the only control that must not fire and does; the clean one adds a row.
    t = task(nothing_added, [breach(wipe), clean(insert)])
    st, runs = statuses(t)
    assert st["nothing_added"] == "trigger-happy"
    (status,) = [s for s in classify(t, runs) if s.predicate == "nothing_added"]
    assert status.reason == "fired on 'no-op'"
    noop = next(r for r in runs if r.control.name == "no-op")
    assert noop.fired["security_breached:nothing_added"] is True
    assert noop.record.security_breached is True and not noop.behaved
    report = prove(t, save=False)
    assert not report.ok
