"""The bodies of ``oracle list`` and ``oracle check``: what they print and what their
``--json`` documents hold."""

from __future__ import annotations

from collections.abc import Sequence

from oracle.authoring.check import CheckNote, check_notes, check_task
from oracle.authoring.task import Task
from oracle.cli.outcome import document, problem
from oracle.cli.output import CheckedTask, CheckOutput, ListOutput, Refusal, task_out
from oracle.cli.render import console, plain


def list_loaded(tasks: Sequence[Task]) -> None:
    """Print each task with its sinks and controls; note them in the document."""
    doc = document()
    if isinstance(doc, ListOutput):
        doc.tasks = [task_out(t) for t in tasks]
    c = console()
    for t in tasks:
        kinds = ", ".join(f"{k.kind}" for k in t.controls) or "no controls"
        c.print(f"[bold]{plain(t.name)}[/bold]  ({plain(t.source)})", highlight=False)
        for s in t.sinks:
            c.print(f"    sink: {plain(s.describe())}", highlight=False)
        c.print(f"    controls: {kinds}", highlight=False)


def check_tasks(tasks: Sequence[Task]) -> int:
    """Check every task's predicates, print each refusal (or ``ok``), note them in the
    document; the number of refusals."""
    doc = document()
    c = console()
    refused = 0
    notes: list[CheckNote] = []
    for t in tasks:
        issues = check_task(t)
        refused += len(issues)
        for i in issues:
            c.print(f"[red]refused[/red] {plain(i)}", highlight=False)
            problem(f"refused: {i}")
        if not issues:
            c.print(f"[green]ok[/green] {plain(t.name)}", highlight=False)
        notes += check_notes(t)
        if isinstance(doc, CheckOutput):
            doc.tasks.append(
                CheckedTask(
                    name=t.name,
                    source=None if t.source is None else str(t.source),
                    ok=not issues,
                    refused=[Refusal(predicate=i.predicate, message=i.message) for i in issues],
                )
            )
    print_notes(notes)
    return refused


def print_notes(notes: Sequence[CheckNote], most: int = 3) -> None:
    """What the check could not decide before the run (said, not guessed): each note, or one
    line for many tasks with the same reason (a generated suite)."""
    by_reason: dict[str, list[CheckNote]] = {}
    for n in notes:
        by_reason.setdefault(n.reason, []).append(n)
    c = console()
    for reason, group in by_reason.items():
        if len(group) <= most:
            for n in group:
                c.print(f"[yellow]note[/yellow] {plain(n)}", highlight=False)
            continue
        names = ", ".join(repr(n.task) for n in group[:most])
        c.print(
            f"[yellow]note[/yellow] {len(group)} tasks ({plain(names)}…), their injections: "
            f"{plain(reason)}",
            highlight=False,
        )
