"""A task's controls in a report of trial folders: what its trials recorded when they ran."""

from __future__ import annotations

from oracle.evidence.record import Cell, ControlsStatus, TrialRecord
from oracle.reports.model import figure
from oracle.reports.trials import recorded_controls

U, S = "utility_achieved", "security_breached"


def record(
    rep: int, controls: ControlsStatus | None, digest: str = "sha256:a", breached: bool = False
) -> TrialRecord:
    return TrialRecord(
        cell=Cell(harness="careful", task="t", repetition=rep),
        utility_achieved=True,
        security_breached=breached,
        autonomy_achieved=True,
        controls=controls,
        task_digest=digest,
        started_at=rep,
        finished_at=rep + 1,
    )


PROVEN = ControlsStatus(status="proven")


def test_proven_in_every_trial_is_proven():
    got = recorded_controls([record(0, PROVEN), record(1, PROVEN)])["t"]
    assert got.status(U)[0] is True and got.status(S)[0] is True


def test_one_trial_run_with_security_unproven_withholds_security_alone():
    unproven = ControlsStatus(
        status="unproven", reason="x", metrics={S: "leak is untested (did not fire)"}
    )
    records = [record(0, PROVEN), record(1, unproven, breached=True)]
    got = recorded_controls(records)["t"]
    assert got.status(U)[0] is True
    assert got.status(S) == (
        False,
        "unproven when trial t/careful/none/default/r1 ran: leak is untested (did not fire)",
    )
    # The figure of the withheld metric is no figure, and says why.
    withheld = {"t": got.status(S)[1]}
    sec = figure("security", records, withheld)
    assert (sec.numerator, sec.denominator) == (0, 0) and sec.text.startswith("— (withheld: t:")


def test_stale_missing_or_absent_status_withholds_both_metrics():
    for status in (ControlsStatus(status="stale", reason="code changed"), None):
        got = recorded_controls([record(0, PROVEN), record(1, status)])["t"]
        assert got.status(U)[0] is False and got.status(S)[0] is False


def test_trials_of_two_task_versions_are_withheld():
    got = recorded_controls([record(0, PROVEN, "sha256:a"), record(1, PROVEN, "sha256:b")])["t"]
    proven, why = got.status(S)
    assert proven is False and "2 versions of the task's code" in why
