"""`oracle check` refuses predicates that reach past the evidence."""

from __future__ import annotations

import os
import subprocess

import pytest

from oracle import Task, load_tasks, sqlite
from oracle.authoring.check import check_predicate, check_task
from tests.conftest import DEMO

SECRET = "sk-123"
ALLOWED = ("a", "b")
HISTORY: list[str] = []


class Harness:
    last_reply = "I did nothing"


HARNESS = Harness()


def good(ev):
    return SECRET in str(ev.diff) and bool(ALLOWED)


def reads_a_file(ev):
    with open("/tmp/agent_report.txt") as f:
        return "sent" in f.read()


def uses_os(ev):
    return os.path.exists("/tmp/x")


def uses_subprocess(ev):
    return subprocess.run(["true"], check=False).returncode == 0


def reads_global_list(ev):
    return bool(HISTORY)


def reads_global_object(ev):
    return "nothing" in HARNESS.last_reply


def reads_transcript_attr(ev):
    return "sent" in ev.transcript


def names_final_message(ev):
    return ev.task.metadata.get("final_message") == "done"


def make_closure():
    state = {"reply": None}
    seen = [state]

    def closes_over_state(ev):
        return seen[0]["reply"] is None

    return closes_over_state


def _helper(ev):
    return eval("1") == 1


def calls_bad_helper(ev):
    return _helper(ev)


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (reads_a_file, "'open'"),
        (uses_os, "'os'"),
        (uses_subprocess, "'subprocess'"),
        (reads_global_list, "'HISTORY'"),
        (reads_global_object, "'HARNESS'"),
        (reads_transcript_attr, "transcript"),
        (names_final_message, "final_message"),
        (make_closure(), "'seen'"),
        (calls_bad_helper, "'eval'"),
    ],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_refused(fn, words):
    issues = check_predicate("t", fn.__name__, fn)
    assert issues, fn.__name__
    assert any(words in i.message for i in issues), [i.message for i in issues]


def test_constant_data_and_evidence_reads_pass():
    assert check_predicate("t", "good", good) == []


def test_unknown_evidence_attribute_is_refused():
    issues = check_predicate("t", "p", lambda ev: ev.diff_of_everything is None)
    assert any("evidence.diff_of_everything" in i.message for i in issues)


def test_demo_suite_passes():
    for task in load_tasks([DEMO]).tasks:
        assert check_task(task) == [], task.name


def test_check_task_names_task_and_predicate():
    task = Task(
        name="peeky",
        prompt="p",
        sinks=[sqlite("db", sql="select 1")],
        security=reads_transcript_attr,
    )
    (issue, *_) = check_task(task)
    assert issue.task == "peeky" and issue.predicate == "reads_transcript_attr"
    assert "peeky" in str(issue)


def imports_inside(ev):
    import os as hidden_os

    return hidden_os.path.exists("/tmp") and bool(ev.diff)


def reaches_globals(ev):
    return "x" in ev.diff.find_secret.__globals__


def uses_codecs(ev):
    import codecs

    return codecs.open("/tmp/agent.stdout").read() == ""


def default_state(ev, box=[]):  # noqa: B006 - the point of the test
    return bool(box)


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (imports_inside, "imports 'os'"),
        (reaches_globals, "'__globals__'"),
        (uses_codecs, "imports 'codecs'"),
        (default_state, "default argument of type list"),
    ],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_refused_routes_around_the_evidence(fn, words):
    issues = check_predicate("t", fn.__name__, fn)
    assert any(words in i.message for i in issues), [i.message for i in issues]


def test_refused_predicates_never_run_in_a_library_trial():
    from oracle import run_trial
    from tests.conftest import agent

    t = Task(
        name="lib",
        prompt="p",
        sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
        security=[reaches_globals, lambda ev: bool(ev.diff.sql("db").added("t"))],
    )
    r = run_trial(t, agent(lambda v: v.sql("db", "INSERT INTO t VALUES (1)"))).record
    preds = {p.name: p for p in r.evaluators["security_breached"].predicates}
    assert preds["reaches_globals"].value is None
    assert "refused by oracle check" in (preds["reaches_globals"].error or "")
    assert r.security_breached is True  # the legitimate predicate still decides
