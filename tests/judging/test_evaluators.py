"""Evaluators: a real bool or an error, never a value read as False."""

from __future__ import annotations

import json

import pytest

from oracle import Task, run_trial, smtp, sqlite
from oracle.evidence.diff import Diff
from oracle.evidence.evidence import ClaimNotEvidenceError, Evidence, HarnessRecords, TaskFacts
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.snapshot import States
from oracle.evidence.tools import tool
from oracle.judging.evaluators import (
    Fixed,
    PredicateResult,
    StatePredicates,
    Unconfigured,
    as_evaluator,
    combine,
    run_predicate,
)
from oracle.judging.verdict import Outcome
from oracle.trial.agent import CallableAgent


def evidence() -> Evidence:
    inv = Invocation(
        adapter="callable", agent="a", started=True, steps=[Step(name="run", outcome="succeeded")]
    )
    return Evidence(
        diff=Diff({}),
        before=States({}, "before"),
        after=States({}, "after"),
        harness=HarnessRecords(invocation=inv),
        task=TaskFacts(name="t", prompt="p"),
    )


@pytest.mark.parametrize("value", [0, 1, "false", "true", None, {}, [], 0.0, "", object()])
def test_non_bool_is_an_error_never_a_verdict(value):
    r = run_predicate("p", lambda ev: (ev.diff, value)[1], evidence())
    assert r.value is None
    assert "not a bool" in (r.error or "")


@pytest.mark.parametrize("value", [True, False])
def test_real_bool_is_a_verdict(value):
    r = run_predicate("p", lambda ev: ev.diff.empty is value, evidence())
    assert r.value is value
    assert r.error is None
    assert r.tiers == frozenset({"environment"})


def test_exception_is_an_error_with_its_message():
    def boom(ev):
        raise RuntimeError("table vanished")

    r = run_predicate("boom", boom, evidence())
    assert r.value is None
    assert "RuntimeError: table vanished" in (r.error or "")
    assert "boom" in (r.error or "")


def test_predicate_that_reads_nothing_is_refused():
    r = run_predicate("const", lambda ev: False, evidence())
    assert r.value is None
    assert "without reading environment or boundary evidence" in (r.error or "")


def test_predicate_that_reads_only_harness_records_is_refused():
    r = run_predicate("calls", lambda ev: ev.harness.invocation is not None, evidence())
    assert r.value is None
    assert r.tiers == frozenset({"harness"})


def test_claim_attributes_do_not_exist():
    ev = evidence()
    for name in ("transcript", "final_message", "messages", "claims"):
        with pytest.raises(ClaimNotEvidenceError, match="claim"):
            getattr(ev, name)


def test_predicate_reaching_for_the_transcript_is_unknown_not_false():
    r = run_predicate("peek", lambda ev: "sent nothing" in ev.transcript, evidence())
    assert r.value is None
    assert "ClaimNotEvidenceError" in (r.error or "")


def test_each_predicate_gets_its_own_record_of_reads():
    ev = evidence()
    first = run_predicate("a", lambda e: e.diff.empty, ev)
    second = run_predicate("b", lambda e: e.harness is not None and e.before is not None, ev)
    assert first.tiers == frozenset({"environment"})
    assert second.tiers == frozenset({"harness", "environment"})


def test_unconfigured_is_unknown():
    outcome, preds = Unconfigured("utility_achieved").evaluate(evidence())
    assert outcome.value is None and outcome.kind == "unconfigured"
    assert "utility_achieved" in (outcome.error or "")
    assert preds == []


@pytest.mark.parametrize("value", [True, False])
def test_fixed_is_an_assertion(value):
    outcome, _ = Fixed(value).evaluate(evidence())
    assert outcome.value is value
    assert outcome.kind == "assertion"


def test_fixed_refuses_non_bool():
    with pytest.raises(TypeError):
        Fixed(1)  # type: ignore[arg-type]


def R(value, error=None):
    return PredicateResult("p", value, error if value is None else None, frozenset({"environment"}))


@pytest.mark.parametrize(
    ("how", "values", "expected"),
    [
        ("any", [False, False], False),
        ("any", [False, True], True),
        ("any", [None, True], True),  # an established breach stands beside a broken predicate
        ("any", [None, False], None),
        ("all", [True, True], True),
        ("all", [True, False], False),
        ("all", [None, False], False),
        ("all", [None, True], None),
    ],
)
def test_three_valued_combination(how, values, expected):
    outcome = combine([R(v, "broke") for v in values], how)
    assert outcome.value is expected
    if expected is None:
        assert "broke" in (outcome.error or "")


def test_state_predicates_record_each_result():
    sp = StatePredicates([("a", lambda ev: ev.diff.empty), ("b", lambda ev: 1)], "all")
    outcome, results = sp.evaluate(evidence())
    assert [r.name for r in results] == ["a", "b"]
    assert results[0].value is True and results[1].value is None
    assert outcome.value is None


def test_as_evaluator_coerces_what_authors_write():
    def p(ev):
        return True

    assert isinstance(as_evaluator(None, "m", "any"), Unconfigured)
    assert isinstance(as_evaluator(True, "m", "any"), Fixed)
    assert as_evaluator(p, "m", "any").names() == ["p"]
    assert as_evaluator([p], "m", "any").names() == ["p"]
    with pytest.raises(TypeError, match="m"):
        as_evaluator(1, "m", "any")
    with pytest.raises(TypeError, match=r"m\[1\]"):
        as_evaluator([p, "x"], "m", "any")
    with pytest.raises(ValueError, match="repeated"):
        as_evaluator([p, p], "m", "any")


def test_the_diff_and_the_states_cannot_be_rebound_or_refilled():
    from oracle.evidence.diff import SinkDiff

    d = SinkDiff("db", [])
    with pytest.raises(AttributeError):
        d.changes = ()  # type: ignore[misc]
    diff = Diff({"db": d})
    with pytest.raises(TypeError):
        diff._sinks["db"] = d  # type: ignore[index]
    states = States({}, "after")
    with pytest.raises(TypeError):
        states._snapshots["x"] = None  # type: ignore[index]


# -- every predicate gets its own copy of the evidence ------------------------------------------

ISOLATION_SEED = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');"


@tool(effects=["db", "outbox"])
def wipe_and_mail(view, note: dict) -> str:
    view.sql("db", "DELETE FROM t")
    view.send_mail(["billing@shop.test", "ops@shop.test"], "s", "b")
    return "done"


def _vandal(ev) -> bool:
    """Writes everywhere it can reach, past every read-only guard."""
    from types import MappingProxyType

    removed = ev.diff.sql("db").removed("t")[0]
    dict.__setitem__(removed.row, "v", "rewritten")
    list.append(removed.key, 99)
    object.__setattr__(removed, "table", "elsewhere")
    sent = ev.boundary.mail("outbox").all()[0]
    sent.envelope_to.append("attacker@evil.test")
    ev.after.mail("outbox").accepted[0].envelope_to.clear()
    object.__setattr__(ev.before.sql("db").tables["t"], "rows", MappingProxyType({}))
    object.__setattr__(ev.before.sql("db"), "tables", MappingProxyType({}))
    ev.diff.sql("db")._changes = ()
    object.__setattr__(ev.diff, "_sinks", MappingProxyType({}))
    dict.__setitem__(ev.harness.tool_calls[0].arguments, "note", "forged")
    dict.__setitem__(ev.task.metadata, "source", "forged")
    return True


def _witness(ev) -> bool:
    """True only when it sees the evidence as the agent left it."""
    (removed,) = ev.diff.sql("db").removed("t")
    (sent,) = ev.boundary.mail("outbox").all()
    return (
        (removed.table, dict(removed.row), list(removed.key)) == ("t", {"id": 1, "v": "a"}, [1])
        and sent.envelope_to == ["billing@shop.test", "ops@shop.test"]
        and ev.after.mail("outbox").accepted[0].envelope_to == sent.envelope_to
        and ev.before.sql("db").rows("t") == [{"id": 1, "v": "a"}]
        and ev.harness.tool_calls[0].arguments["note"] == {"k": 1}
        and dict(ev.task.metadata) == {"source": "test"}
    )


def _named(fn, name):
    def predicate(ev):
        return fn(ev)

    predicate.__name__ = name
    return predicate


def test_a_predicate_that_writes_past_the_guards_changes_nothing_the_next_one_or_the_archive_sees():
    t = Task(
        name="iso",
        prompt="p",
        sinks=[sqlite("db", sql=ISOLATION_SEED), smtp("outbox")],
        security=[_vandal, _witness, _named(_vandal, "again"), _named(_witness, "still")],
        metadata={"source": "test"},
    )
    result = run_trial(t, CallableAgent(lambda v: wipe_and_mail(v, {"k": 1})))
    r = result.record
    preds = [(p.name, p.value, p.error) for p in r.evaluators["security_breached"].predicates]
    assert [v for _, v, _ in preds] == [True, True, True, True], preds
    (removed,) = r.diff["db"]["changes"]
    assert removed == {
        "change": "row_removed",
        "table": "t",
        "key": [1],
        "row": {"id": 1, "v": "a"},
    }
    assert r.diff["outbox"]["changes"][0]["mail"]["envelope_to"] == [
        "billing@shop.test",
        "ops@shop.test",
    ]
    after = json.loads(result.files["snapshots/after/outbox.json"])
    assert after["state"]["messages"][0]["envelope_to"] == ["billing@shop.test", "ops@shop.test"]
    before = json.loads(result.files["snapshots/before/db.json"])
    assert before["state"]["tables"]["t"]["rows"] == [[1, "a"]]
    assert r.tool_calls is not None and r.tool_calls[0].arguments["note"] == {"k": 1}
    # What the oracle itself reads afterwards is untouched too.
    assert [d for d in result.diff["db"]] and result.diff["db"].changes[0].row == {
        "id": 1,
        "v": "a",
    }


class _RowEvaluator:
    """An evaluator of its own (no StatePredicates): it reads the evidence it is handed."""

    kind = "predicate"

    def __init__(self, vandal: bool) -> None:
        self.vandal = vandal

    def names(self) -> list[str]:
        return []

    def evaluate(self, evidence):
        (removed,) = evidence.diff.sql("db").removed("t")
        if self.vandal:
            dict.__setitem__(removed.row, "v", "rewritten")
        value = removed.row["v"] == "a"
        return Outcome(value, "predicate", tiers=frozenset({"environment"})), []


def test_an_evaluator_of_its_own_gets_its_own_copy_too():
    t = Task(
        name="own",
        prompt="p",
        sinks=[sqlite("db", sql=ISOLATION_SEED)],
        utility=_RowEvaluator(vandal=True),
        security=_RowEvaluator(vandal=False),
    )
    r = run_trial(t, CallableAgent(lambda v: v.sql("db", "DELETE FROM t"))).record
    assert r.security_breached is True  # it saw the row as the agent left it
    assert r.diff["db"]["changes"][0]["row"] == {"id": 1, "v": "a"}
