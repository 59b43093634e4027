"""The pytest plugin, driven the way users drive it: pytest runs on files we write."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import DEMO, REPO

pytest_plugins = ["pytester"]

BAD_TASK = """
from oracle import Task, breach, clean, sqlite

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"

def row_touched(ev):
    d = ev.diff.sql("db")
    return bool(d.removed("t")) or bool(d.added("t"))

def add(sb):
    sb.sql("db", "INSERT INTO t VALUES (2, 'x')")

def nothing(sb):
    pass

task = Task(name="bad", prompt="p", sinks=[sqlite("db", sql=SEED)],
            security=row_touched, controls=[breach(nothing), clean(add)])
"""


def test_plugin_is_registered_by_entry_point():
    from importlib.metadata import entry_points

    eps = [
        e for e in entry_points(group="pytest11") if e.value == "oracle.integrations.pytest_plugin"
    ]
    assert [e.name for e in eps] == ["oracle"]


def test_controls_of_the_demo_tasks_are_test_items_and_pass():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--oracle-controls",
            str(DEMO),
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(REPO),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from oracle import load_tasks
    from oracle.controls.run import controls_of

    tasks = load_tasks([DEMO]).tasks
    items = sum(
        len(controls_of(t)) + len(t.security_evaluator.names()) + len(t.utility_evaluator.names())
        for t in tasks
    )
    assert f"{items} passed" in proc.stdout


def test_failing_controls_say_why(pytester):
    pytester.makefile(".py", task_bad=BAD_TASK)
    result = pytester.runpytest("--oracle-controls", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert (
        "bad::control[no-op] PASSED"
        in pytester.runpytest("--oracle-controls", "-v", "-p", "no:cacheprovider").stdout.str()
    )
    assert "security predicate 'row_touched' is trigger-happy: fired on 'add'" in out
    assert "control 'add' (clean) · MISBEHAVED" in out
    assert "row added    t[2] id=2, v='x'" in out
    assert "control 'nothing' (breach) · MISBEHAVED" in out
    assert "the diff is empty" in out


UNSUPPORTED_TASK = """
from oracle import Task, breach, clean, sqlite
from oracle.judging.evaluators import StatePredicates

SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"

def wiped(ev):
    return bool(ev.diff.sql("db").removed("t"))

def said_done(ev):
    raise RuntimeError("needs the agent's final text")

class ClaimTier(StatePredicates):
    def unsupported(self):
        return {"said_done": "it reads the agent's final text"}

def wipe(sb):
    sb.sql("db", "DELETE FROM t")

def nothing(sb):
    pass

task = Task(name="un", prompt="p", sinks=[sqlite("db", sql=SEED)], security=wiped,
            utility=ClaimTier([("said_done", said_done)], "all"),
            controls=[breach(wipe), clean(nothing)])
"""


def test_an_unsupported_predicate_is_skipped_not_passed(pytester):
    pytester.makefile(".py", task_un=UNSUPPORTED_TASK)
    result = pytester.runpytest("--oracle-controls", "-rs", "-p", "no:cacheprovider")
    # breach, clean and no-op behave; `wiped` is proven; `said_done` proves nothing
    result.assert_outcomes(passed=4, skipped=1)
    assert "utility predicate 'said_done' is unsupported: it reads the agent's final text" in (
        result.stdout.str()
    )


def test_task_files_are_not_collected_without_the_option(pytester):
    pytester.makefile(".py", task_bad=BAD_TASK)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_task_file_that_does_not_load_is_a_failing_item(pytester):
    pytester.makefile(".py", task_broken="raise RuntimeError('no seed here')\n")
    result = pytester.runpytest("--oracle-controls", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "RuntimeError: no seed here" in result.stdout.str()


def test_fixture_and_readable_verdict_failures(pytester):
    pytester.makepyfile(
        test_agent=f"""
        from oracle.integrations.pytest_plugin import changes, expect, verdicts

        DEMO = {str(DEMO)!r}

        def rename(sb):
            sb.view.sql("app", "UPDATE users SET name = 'robert' WHERE id = 3")

        def test_good(oracle_sandbox):
            sb = oracle_sandbox(DEMO, "user-rename")
            rename(sb)
            r = sb.finish(agent="mine")
            assert verdicts(r) == {{"utility": True, "breached": False, "autonomy": True}}
            assert "app: row changed  users[3] name: 'bob' → 'robert'" in changes(r)
            expect(r, utility=True, breached=False)

        def test_bad_verdicts(oracle_sandbox):
            sb = oracle_sandbox(DEMO, "user-rename")
            sb.view.sql("app", "UPDATE users SET role = 'admin' WHERE name = 'mallory'")
            r = sb.finish(agent="mine")
            assert verdicts(r) == {{"breached": False}}

        def test_missing_change(oracle_sandbox):
            sb = oracle_sandbox(DEMO, "user-rename")
            rename(sb)
            assert "row removed users[3]" in changes(sb.finish())

        def test_expect_call(oracle_sandbox):
            sb = oracle_sandbox(DEMO, "user-rename")
            expect(sb.finish(agent="mine"), utility=True)

        def test_unfinished_is_abandoned(oracle_sandbox):
            sb = oracle_sandbox(DEMO, "user-rename")
            test_unfinished_is_abandoned.sb = sb

        def test_after_abandoned():
            r = test_unfinished_is_abandoned.sb.record
            assert r.error.startswith("abandoned:") and r.security_breached is None
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3, failed=3)
    out = result.stdout.str()
    # the == failure: each verdict with its reason, and the diff
    assert "verdicts differ:" in out
    assert "✗ breached: expected False, got True (someone_made_admin=True)" in out
    assert "app: row changed" in out and "users[2]" in out
    # the `in` failure lists the changes that are there
    assert "'row removed users[3]' is not a change of this trial; the diff:" in out
    # expect() explains too
    assert "✗ utility: expected True, got False (user_renamed=False)" in out


def test_changes_reads_summary_lines(tmp_path):
    from oracle import load_tasks
    from oracle.integrations.pytest_plugin import changes
    from oracle.trial.embed import sandbox

    task = load_tasks([DEMO]).by_name("user-rename")
    with sandbox(task) as sb:
        sb.view.sql("app", "UPDATE users SET name = 'robert' WHERE id = 3")
        r = sb.finish()
    lines = changes(r)
    assert len(lines) == 1 and lines[0].startswith("app: ")
    assert lines[0].split(": ", 1)[1] in lines
    assert changes(r, "nope") == []


def test_docs_example_is_a_passing_test(pytester):
    import re

    doc = (REPO / "docs" / "pytest.md").read_text()
    block = re.findall(r"```python\n(.*?)```", doc, flags=re.S)[0]
    pytester.makepyfile(test_doc=block.replace('"tasks/demo"', repr(str(DEMO))))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=textwrap.dedent(block).count("\ndef test_"))
