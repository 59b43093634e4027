"""An untested security predicate's reason suggests ``fires=`` where a breach control without
it tripped other predicates and not this one."""

from __future__ import annotations

from pathlib import Path

from oracle import load_tasks
from oracle.controls.run import classify, run_controls
from tests.cli.test_cli import oracle

TASK = """
from oracle import Task, breach, clean, sqlite

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"


def deleted(ev):
    return bool(ev.diff.sql("db").removed("t"))


def changed(ev):
    return bool(ev.diff.sql("db").changed("t"))


def added(ev):
    return bool(ev.diff.sql("db").added("t"))


def wipe(sb):
    sb.sql("db", "DELETE FROM t")


def touch(sb):
    sb.sql("db", "UPDATE t SET v = 'z'")


def insert(sb):
    sb.sql("db", "INSERT INTO t VALUES (2, 'b')")


task = Task(
    name="hint",
    prompt="p",
    sinks=[sqlite("db", sql=SEED)],
    utility=added,
    security=[deleted, changed],
    controls=[breach(wipe, undoes_utility=True), {touch}clean(insert, utility=True)],
)
"""


def reasons(write_task, touch: str) -> dict[str, tuple[str, str]]:
    path = write_task(TASK.replace("{touch}", touch), "task_hint.py")
    (task,) = load_tasks([path]).tasks
    runs, error = run_controls(task)
    assert error is None
    return {s.predicate: (s.status, s.reason) for s in classify(task, runs)}


def test_a_breach_meant_for_another_predicate_is_told_to_say_so(write_task):
    got = reasons(write_task, 'breach(touch, fires=["changed"]), ')
    status, why = got["changed"]
    assert status == "untested"
    assert why == (
        "did not fire on 'wipe', 'insert, then wipe', 'wipe, then insert'; if 'wipe' is meant "
        "for 'deleted' alone, say so: breach(wipe, fires=['deleted'])"
    )
    assert got["deleted"][0] == "proven"


def test_no_hint_where_the_breach_names_the_predicate_already(write_task):
    """A breach that says it must make `changed` fire, and does not: the predicate or the
    control is wrong, and fires= is no way out."""
    got = reasons(write_task, 'breach(touch, fires=["changed"]), ')
    path_task = TASK.replace("{touch}", 'breach(touch, fires=["changed"]), ').replace(
        "breach(wipe, undoes_utility=True)",
        'breach(wipe, undoes_utility=True, fires=["deleted", "changed"])',
    )
    path = write_task(path_task, "task_hint_named.py")
    (task,) = load_tasks([path]).tasks
    runs, _ = run_controls(task)
    (s,) = [s for s in classify(task, runs) if s.predicate == "changed"]
    assert s.status == "untested" and s.reason.startswith("did not fire on 'wipe'")
    assert "fires=" not in s.reason and "say so" in got["changed"][1]


def test_no_breach_aimed_at_it_says_how_to_add_one(write_task):
    path = write_task(
        TASK.replace("{touch}", "").replace(
            "breach(wipe, undoes_utility=True)",
            'breach(wipe, undoes_utility=True, fires=["deleted"])',
        ),
        "task_hint_none.py",
    )
    (task,) = load_tasks([path]).tasks
    runs, _ = run_controls(task)
    (s,) = [s for s in classify(task, runs) if s.predicate == "changed"]
    assert s.status == "untested"
    assert s.reason == (
        "no breach control exercises it: every breach control names other predicates in "
        "fires=; add one that does what 'changed' checks, breach(fn, fires=['changed'])"
    )


def test_oracle_controls_prints_the_hint(write_task, tmp_path: Path):
    path = write_task(TASK.replace("{touch}", 'breach(touch, fires=["changed"]), '), "task_hint.py")
    out = oracle("controls", str(path), "--scorer", "in-process")
    assert out.returncode == 1
    flat = " ".join(line.strip("│ ") for line in out.stdout.splitlines())
    assert "say so: breach(wipe," in flat.replace("│", "")
