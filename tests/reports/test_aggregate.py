"""Aggregation: each metric over its own known verdicts; unknowns and errors beside."""

from __future__ import annotations

import pytest

from oracle.evidence.record import Cell, EvaluatorRecord, TrialRecord
from oracle.reports.aggregate import Ratio, summarize


def rec(
    breached: bool | None = None,
    *,
    utility: bool | None = None,
    error: str | None = None,
    security_kind: str = "predicate",
    autonomy: bool | None = True,
) -> TrialRecord:
    return TrialRecord(
        cell=Cell(harness="h", task="t"),
        utility_achieved=utility,
        security_breached=breached,
        autonomy_achieved=autonomy,
        error=error,
        evaluators={"security_breached": EvaluatorRecord(kind=security_kind)},  # type: ignore[arg-type]
        not_measured={"security_breached": "a fixed assertion"}
        if security_kind == "assertion"
        else {},
        started_at=0.0,
        finished_at=1.0,
    )


def test_true_false_unknown():
    s = summarize([rec(True), rec(False), rec(None)])
    assert s.attempts == 3
    assert (s.security.numerator, s.security.denominator) == (1, 2)
    assert (s.attack_success.numerator, s.attack_success.denominator) == (1, 2)
    assert s.unknown["security"] == 1


def test_execution_error_counts_as_attempt_only():
    s = summarize([rec(False), rec(None), rec(True, error="the run broke"), rec(True)])
    assert str(s.security) == "0.50 (1/2)"
    assert str(s.attack_success) == "0.50 (1/2)"
    assert s.attempts == 4 and s.invalid == 1
    assert s.unknown["security"] == 1


def test_unknowns_are_never_blocked_attacks():
    s = summarize([rec(None), rec(None), rec(True)])
    assert str(s.security) == "0.00 (0/1)"
    assert str(s.attack_success) == "1.00 (1/1)"


def test_assertions_are_not_measured():
    s = summarize([rec(False, security_kind="assertion"), rec(True)])
    assert s.not_measured["security"] == 1
    assert str(s.attack_success) == "1.00 (1/1)"


def test_unproven_controls_keep_verdicts_out_of_the_rates():
    unproven = rec(True).model_copy(
        update={"not_measured": {"security_breached": "controls unproven: x is untested"}}
    )
    s = summarize([unproven, rec(False)])
    assert str(s.attack_success) == "0.00 (0/1)"
    assert s.not_measured["security"] == 1


def test_each_metric_has_its_own_denominator():
    s = summarize([rec(True, utility=None), rec(False, utility=True), rec(None, utility=False)])
    assert str(s.utility) == "0.50 (1/2)"
    assert str(s.attack_success) == "0.50 (1/2)"


def test_empty_denominator():
    r = Ratio(0, 0)
    assert r.value is None and r.interval() is None
    assert str(r) == "— (0/0)"


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [  # reference values of the Wilson score interval at 95%
        (1, 2, 0.0945, 0.9055),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_interval(k, n, low, high):
    lo, hi = Ratio(k, n).interval()  # type: ignore[misc]
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_interval_printed_beside_the_ratio():
    assert Ratio(1, 2).with_interval() == "0.50 (1/2) [0.09, 0.91]"
