"""What in a batch of trial records keeps `oracle trial` from exiting 0.

- A verdict not reached: a metric the task declares an evaluator for (and autonomy) that is
  unknown, with why. A metric the task declares nothing for is not asked, so its unknown
  verdict is no failure.
- A task whose controls do not prove it (no controls file, a stale digest, a predicate not
  proven): its verdicts are no measurement, so the run did not measure what it was asked to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from oracle.cli.exits import FAILED, OK
from oracle.evidence.record import TrialRecord

_METRICS = ("utility_achieved", "security_breached", "autonomy_achieved")


def unreached(records: Sequence[TrialRecord]) -> list[str]:
    """One line per trial with a verdict not reached: the cell, the metrics and why."""
    out = []
    for r in records:
        missing = []
        for metric in _METRICS:
            if getattr(r, metric) is not None:
                continue
            evaluator = r.evaluators.get(metric)
            if metric != "autonomy_achieved" and (
                evaluator is not None and evaluator.kind == "unconfigured"
            ):
                continue  # the task asks nothing of this metric
            why = (
                r.error
                or r.evaluation_errors.get(metric)
                or (r.autonomy_reason if metric == "autonomy_achieved" else "")
            )
            missing.append(f"{metric.split('_')[0]} unknown" + (f" ({why})" if why else ""))
        if missing:
            out.append(f"{r.cell.id}: {'; '.join(missing)}")
    return out


def unproven(records: Sequence[TrialRecord]) -> dict[str, str]:
    """Task → why its controls do not prove its predicates, for the tasks of `records`."""
    out: dict[str, str] = {}
    for r in records:
        status = r.controls
        if status is None or status.status in ("proven", "control"):
            continue
        out.setdefault(r.cell.task, f"controls {status.status}: {status.reason}".rstrip(": "))
    return out


def finish_trials(
    records: Sequence[TrialRecord],
    out: Path,
    *,
    refused: Sequence[str],
    skipped: Mapping[str, str],
    broken: Sequence[str],
    contained: Sequence[str],
    allow_unproven: bool = False,
) -> int:
    """Print the verdicts and rates, and every reason the run is not all as expected; fill
    the ``--json`` document; the exit code (1 for any reason, else 0; tasks whose controls
    do not prove them are printed, but no reason with `allow_unproven`)."""
    from oracle.cli.outcome import document, problem
    from oracle.cli.output import TrialOutput
    from oracle.cli.render import console, plain, summary_table, verdict_table

    c = console()
    c.print(verdict_table(records, skipped=skipped))
    c.print(summary_table(records))
    not_reached = unreached(records)
    not_proven = unproven(records)
    for why in contained:
        c.print(f"[red]predicate contained:[/red] {plain(why)}", highlight=False, soft_wrap=True)
    for line in not_reached:
        c.print(f"[red]verdict not reached:[/red] {plain(line)}", highlight=False, soft_wrap=True)
    for task, why in sorted(not_proven.items()):
        c.print(
            f"[red]not measured:[/red] {plain(task)}: {plain(why)} (`oracle controls` proves "
            "a task's predicates)",
            highlight=False,
            soft_wrap=True,
        )
    archived = bool(records) and out.is_dir()
    c.print(f"archives: {plain(out)}" if archived else "nothing was archived", highlight=False)
    problems = [
        *(f"refused: {r}" for r in refused),
        *(f"trial broke: {b}" for b in broken),
        *(f"predicate contained: {w}" for w in contained),
        *(f"verdict not reached: {line}" for line in not_reached),
        *(f"not measured: {t}: {w}" for t, w in sorted(not_proven.items()) if not allow_unproven),
    ]
    for p in problems:
        problem(p)
    doc = document()
    if isinstance(doc, TrialOutput):
        doc.archives = str(out) if archived else None
        doc.records = list(records)
        doc.refused = list(refused)
        doc.skipped = dict(skipped)
        doc.broken = list(broken)
        doc.contained = list(contained)
        doc.unproven = not_proven
    return FAILED if problems else OK
