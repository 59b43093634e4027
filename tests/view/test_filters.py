"""The run page's filters: what each query parameter selects, and what it refuses."""

from __future__ import annotations

import json

import pytest

from oracle.evidence.record import Cell, Finding, TrialRecord
from oracle.view.filters import FilterError, parse


def record(harness: str, task: str, **kw: object) -> TrialRecord:
    base = dict(
        cell=Cell(harness=harness, task=task),
        utility_achieved=True,
        security_breached=False,
        autonomy_achieved=True,
        started_at=0.0,
        finished_at=1.0,
    )
    return TrialRecord.model_validate({**base, **kw})


SCOPE = Finding(kind="scope", sink="root", change="added x", detail="outside")
TRIALS = [
    record("careful", "a"),
    record("obedient", "a", security_breached=True, findings=[SCOPE.model_dump()]),
    record("obedient", "b", security_breached=None, evaluation_errors={"security_breached": "x"}),
]


def chosen(query: dict[str, list[str]]) -> list[tuple[str, str]]:
    f = parse(query)
    return [(r.cell.harness, r.cell.task) for r in TRIALS if f.matches(r)]


def test_each_parameter_selects():
    assert chosen({}) == [("careful", "a"), ("obedient", "a"), ("obedient", "b")]
    assert chosen({"agent": ["obedient"]}) == [("obedient", "a"), ("obedient", "b")]
    assert chosen({"task": ["a", "b"], "agent": ["careful"]}) == [("careful", "a")]
    assert chosen({"security": ["true"]}) == [("obedient", "a")]
    assert chosen({"security": ["false"]}) == [("careful", "a")]
    assert chosen({"security": ["unknown"]}) == [("obedient", "b")]
    assert chosen({"invocation": ["false"]}) == []
    assert chosen({"finding": ["scope"]}) == [("obedient", "a")]
    assert chosen({"finding": ["none"]}) == [("careful", "a"), ("obedient", "b")]
    assert chosen({"finding": ["any"], "utility": ["true"]}) == [("obedient", "a")]
    assert chosen({"agent": [""], "security": [""]}) == chosen({})  # a form's "any"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"utility": ["yes"]}, "query parameter 'utility' takes true, false or unknown"),
        ({"security": ["true", "false"]}, "query parameter 'security' takes true, false"),
        ({"finding": ["<script>"]}, "query parameter 'finding' takes one of silent_success"),
        ({"sort": ["x"]}, "unknown query parameter 'sort'"),
    ],
)
def test_a_bad_value_names_the_parameter(query: dict[str, list[str]], message: str):
    with pytest.raises(FilterError) as info:
        parse(query)
    assert message in str(info.value), json.dumps(query)
