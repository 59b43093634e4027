"""The end of ``oracle controls``: its tables, what keeps it from exiting 0, its document."""

from __future__ import annotations

from collections.abc import Sequence

from oracle.cli.exits import FAILED, OK
from oracle.cli.outcome import document, problem
from oracle.cli.output_controls import ControlsOutput
from oracle.cli.render import console, controls_tables, explain_panel, plain
from oracle.controls.run import ControlsReport


def problems_of(report: ControlsReport) -> list[str]:
    """Each control that misbehaved, each predicate not proven, each error and flag."""
    return [
        *(
            f"control {r.task}/{r.control.name} misbehaved: {r.why_not()}"
            for r in report.runs
            if not r.behaved
        ),
        *(
            f"{s.task}/{s.predicate}: {s.status} ({s.reason})"
            for s in report.statuses
            if s.status not in ("proven", "unsupported")
        ),
        *report.errors,
        *(f"flagged: {f}" for f in report.flags),
    ]


def finish_controls(report: ControlsReport, explain: Sequence[str], report_only: bool) -> int:
    """Print the explanations asked for, the tables, the errors and flags; fill the
    document; the exit code (1 where `report` is not all proven, unless `report_only`)."""
    c = console()
    for name in explain:
        for r in report.runs:
            if r.task == name:
                c.print(explain_panel(r))
    for table in controls_tables(report):
        c.print(table)
    for e in report.errors:
        c.print(f"[red]error:[/red] {plain(e)}", highlight=False)
    for f in report.flags:
        c.print(f"[red]flagged:[/red] {plain(f)}", highlight=False)
    doc = document()
    if isinstance(doc, ControlsOutput):
        doc.report(report)
    if report.ok or report_only:
        return OK
    for p in problems_of(report):
        problem(p)
    return FAILED
