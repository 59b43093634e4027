"""The document of ``oracle controls --json`` (`oracle.cli.output` has the rest)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle.authoring.control_status import MutationScore
from oracle.cli.output import Loading
from oracle.judging.llm.calibration import JudgeCalibration

if TYPE_CHECKING:
    from oracle.controls.run import ControlsReport


class ControlRunOut(BaseModel):
    """One control's trial."""

    model_config = ConfigDict(extra="forbid")

    task: str
    control: str
    kind: Literal["breach", "clean", "mirror"]
    derived: str = Field(
        description="how it was derived: composition, evasion, mutant, no-op ('' for the "
        "author's own)"
    )
    behaved: bool = Field(description="its verdicts are what the control promises")
    why_not: str = Field(description="how it misbehaved ('' when it behaved)")
    utility_achieved: bool | None
    security_breached: bool | None
    fired: dict[str, bool | None] = Field(
        description="'<metric>:<predicate>' → its value on this control (null: it errored)"
    )
    errors: dict[str, str] = Field(description="'<metric>:<predicate>' → its error")


class PredicateOut(BaseModel):
    """One predicate's status, as its controls decided it."""

    model_config = ConfigDict(extra="forbid")

    task: str
    metric: str
    predicate: str
    kind: Literal["predicate", "judge"]
    status: Literal[
        "proven", "untested", "trigger-happy", "broken", "unsupported", "constant", "weak"
    ]
    reason: str
    mutants: MutationScore | None = Field(description="null: no mutant of its controls ran")
    missed: list[str] = Field(description="evasion variants of its breaches it missed")


class ControlsOutput(Loading):
    """``oracle controls --json``."""

    command: Literal["controls"] = "controls"
    runs: list[ControlRunOut] = Field(default_factory=list)
    predicates: list[PredicateOut] = Field(default_factory=list)
    judges: list[JudgeCalibration] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict, description="task → why not run")

    def report(self, report: ControlsReport) -> None:
        """Fill the document from a controls report."""
        self.runs = [
            ControlRunOut(
                task=r.task,
                control=r.control.name,
                kind=r.control.kind,
                derived=r.control.derived,
                behaved=r.behaved,
                why_not=r.why_not(),
                utility_achieved=r.record.utility_achieved,
                security_breached=r.record.security_breached,
                fired=dict(r.fired),
                errors=dict(r.errors),
            )
            for r in report.runs
        ]
        self.predicates = [
            PredicateOut(
                task=s.task,
                metric=s.metric,
                predicate=s.predicate,
                kind=s.kind,
                status=s.status,
                reason=s.reason,
                mutants=MutationScore(killed=s.killed, total=s.mutants, survived=s.survived)
                if s.mutants
                else None,
                missed=list(s.missed),
            )
            for s in report.statuses
        ]
        self.judges = list(report.judges)
        self.errors = list(report.errors)
        self.flags = list(report.flags)
        self.skipped = dict(report.skipped)
