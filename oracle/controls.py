"""Running a task's controls and judging each predicate by them (DESIGN §6).

Every control runs as a real trial in the task's sandbox (reset before each). A security
predicate is

- *proven* when it fired on every breach control that targets it and on no clean or mirror
  control;
- *untested* when no breach control targets it, or one did and it stayed silent;
- *trigger-happy* when it fired on a clean or mirror control;
- *broken* when it raised or returned something other than a bool on any control.

Utility predicates are judged the same way by the controls that declare ``utility=True`` (the
predicate must pass) and ``utility=False`` (the metric must not pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from oracle.agent import CallableAgent
from oracle.record import Cell, TrialRecord
from oracle.sandbox import Sandbox
from oracle.task import Control, Task
from oracle.trial import TrialResult, run_trial
from oracle.verdict import Metric

Status = Literal["proven", "untested", "trigger-happy", "broken"]


@dataclass
class ControlRun:
    """One control's trial and what each predicate said on it."""

    task: str
    control: Control
    record: TrialRecord
    fired: dict[str, bool | None]
    errors: dict[str, str]
    result: TrialResult

    @property
    def expected_security(self) -> bool:
        return self.control.kind == "breach"

    @property
    def behaved(self) -> bool:
        """Whether the trial's verdicts are what the control promises."""
        r = self.record
        if r.error is not None:
            return False
        if r.security_breached is not self.expected_security:
            return False
        return self.control.utility is None or r.utility_achieved is self.control.utility


@dataclass
class PredicateStatus:
    task: str
    metric: str
    predicate: str
    status: Status
    reason: str


@dataclass
class ControlsReport:
    runs: list[ControlRun] = field(default_factory=list)
    statuses: list[PredicateStatus] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and all(r.behaved for r in self.runs)
            and all(s.status == "proven" for s in self.statuses)
        )


def run_controls(task: Task, *, out: Path | None = None) -> tuple[list[ControlRun], str | None]:
    """Run every control of `task` in one sandbox; ``(runs, error)``."""
    runs: list[ControlRun] = []
    try:
        sandbox = Sandbox(task)
        sandbox.open()
    except Exception as exc:
        return runs, f"task {task.name!r}: sandbox could not open: {exc}"
    try:
        for c in task.controls:
            agent = CallableAgent(c.run, name=f"control:{c.name}", adapter="control")
            cell = Cell(harness="controls", task=task.name, model=c.kind, profile=c.name)
            result = run_trial(task, agent, cell=cell, out=out, sandbox=sandbox)
            fired: dict[str, bool | None] = {}
            errors: dict[str, str] = {}
            for metric, preds in result.predicates.items():
                for p in preds:
                    key = f"{metric}:{p.name}"
                    fired[key] = p.value
                    if p.error:
                        errors[key] = p.error
            runs.append(ControlRun(task.name, c, result.record, fired, errors, result))
    finally:
        sandbox.close()
    return runs, None


def classify(task: Task, runs: Sequence[ControlRun]) -> list[PredicateStatus]:
    """The status of every predicate of `task` given its control runs."""
    out: list[PredicateStatus] = []
    for name in task.security_evaluator.names():
        key = f"{Metric.SECURITY}:{name}"
        must_fire = [r for r in runs if r.control.expected_security(name) is True]
        must_not = [r for r in runs if r.control.expected_security(name) is False]
        out.append(_judge(task.name, Metric.SECURITY, name, key, runs, must_fire, must_not))
    for name in task.utility_evaluator.names():
        key = f"{Metric.UTILITY}:{name}"
        must_fire = [r for r in runs if r.control.utility is True]
        must_not = [
            r for r in runs if r.control.utility is False and r.record.utility_achieved is True
        ]
        out.append(_judge(task.name, Metric.UTILITY, name, key, runs, must_fire, must_not))
    return out


def _judge(
    task: str,
    metric: str,
    name: str,
    key: str,
    runs: Sequence[ControlRun],
    must_fire: Sequence[ControlRun],
    must_not: Sequence[ControlRun],
) -> PredicateStatus:
    broken = [r for r in runs if key in r.errors]
    if broken:
        r = broken[0]
        return PredicateStatus(
            task, metric, name, "broken", f"on control {r.control.name!r}: {r.errors[key]}"
        )
    happy = [r for r in must_not if r.fired.get(key) is True]
    if happy:
        names = ", ".join(repr(r.control.name) for r in happy)
        return PredicateStatus(task, metric, name, "trigger-happy", f"fired on {names}")
    if not must_fire:
        what = "breach control" if metric == Metric.SECURITY else "control with utility=True"
        return PredicateStatus(task, metric, name, "untested", f"no {what} exercises it")
    silent = [r for r in must_fire if r.fired.get(key) is not True]
    if silent:
        names = ", ".join(repr(r.control.name) for r in silent)
        return PredicateStatus(task, metric, name, "untested", f"did not fire on {names}")
    names = ", ".join(repr(r.control.name) for r in must_fire)
    return PredicateStatus(task, metric, name, "proven", f"fired on {names}; silent elsewhere")


def controls_report(tasks: Sequence[Task], *, out: Path | None = None) -> ControlsReport:
    """Run and classify the controls of every task."""
    report = ControlsReport()
    for task in tasks:
        runs, error = run_controls(task, out=out)
        if error:
            report.errors.append(error)
        report.runs.extend(runs)
        report.statuses.extend(classify(task, runs))
    return report
