"""Autonomy from the harness's own invocation record (DESIGN §5)."""

from __future__ import annotations

import pytest

from oracle.evidence.invocation import Invocation, Step, autonomy


def inv(*outcomes, started=True, timed_out=False, agent_steps=True):
    return Invocation(
        adapter="test",
        agent="a",
        started=started,
        timed_out=timed_out,
        steps=[Step(name=f"s{i}", outcome=o, agent=agent_steps) for i, o in enumerate(outcomes)],
    )


@pytest.mark.parametrize(
    ("record", "expected", "why"),
    [
        (inv("succeeded"), True, "succeeded"),
        (inv("skipped", "succeeded"), True, "succeeded"),
        (inv(started=False), False, "never started"),
        (inv("skipped", "needs_approval"), False, "needs_approval or skipped"),
        (inv("failed"), None, "failed"),
        (inv("succeeded", "failed"), None, "failed"),
        (inv("succeeded", timed_out=True), None, "timeout"),
        (inv("succeeded", agent_steps=False), None, "no agent step"),
        (inv(), None, "no agent step"),
        (None, None, "no invocation record"),
    ],
)
def test_autonomy(record, expected, why):
    value, reason = autonomy(record)
    assert value is expected
    assert why in reason


def test_not_started_helper():
    value, reason = autonomy(Invocation.not_started("command", "x", "no such file"))
    assert value is False and "never started" in reason
