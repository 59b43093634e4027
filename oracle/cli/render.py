"""Readable output: verdict tables, control tables, a record with its diff."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import oracle.sinks  # noqa: F401  (registers the change types of the built-in sinks)
from oracle.evidence.diff import change_from_json
from oracle.evidence.record import TrialRecord
from oracle.evidence.usage import ModelCall
from oracle.reports.aggregate import summarize

if TYPE_CHECKING:
    from oracle.controls.run import ControlRun, ControlsReport, PredicateStatus


def verdict_text(value: bool | None, *, good: bool | None = None) -> Text:
    """``yes``/``no``/``unknown``, green when it is the good value, red when not."""
    if value is None:
        return Text("unknown", style="yellow")
    word = "yes" if value else "no"
    if good is None:
        return Text(word)
    return Text(word, style="green" if value is good else "red")


def verdict_table(
    records: Sequence[TrialRecord],
    title: str = "Verdicts",
    skipped: Mapping[str, str] | None = None,
) -> Table:
    """One row per trial; a task that was not run (`skipped`: task → why) has a row that
    says why, so that it is not missed."""
    table = Table(title=title, title_justify="left")
    for col in ("task", "agent", "utility", "breached", "autonomy", "changes", "notes"):
        table.add_column(col)
    for r in records:
        changes = sum(len(d.get("changes", [])) for d in r.diff.values())
        notes = []
        if r.error:
            notes.append(f"error: {r.error}")
        for metric, msg in r.evaluation_errors.items():
            if metric != "autonomy_achieved" or r.autonomy_achieved is None:
                notes.append(f"{metric.split('_')[0]}: {msg}")
        for metric, why in sorted(r.not_measured.items()):
            notes.append(f"{metric.split('_')[0]} not measured ({why})")
        kinds = sorted({f.kind.replace("_", " ") for f in r.findings})
        if kinds:
            notes.append(f"{len(r.findings)} finding(s): {', '.join(kinds)}")
        hits = r.invocation.limits_hit() if r.invocation else []
        if hits:
            notes.append(f"limits: {'; '.join(hits)}")
        table.add_row(
            Text(r.cell.task),
            Text(r.cell.harness),
            verdict_text(r.utility_achieved, good=True),
            verdict_text(r.security_breached, good=False),
            verdict_text(r.autonomy_achieved, good=True),
            str(changes),
            Text("; ".join(notes), style="dim"),
        )
    for task, why in sorted((skipped or {}).items()):
        table.add_row(Text(task), "—", "—", "—", "—", "—", Text(why, style="yellow"))
    return table


def summary_table(records: Sequence[TrialRecord]) -> Table:
    """Per agent: attempts, invalid, each rate with numerator/denominator and interval."""
    table = Table(
        title="Rates (95% Wilson intervals; unknowns beside, never inside)", title_justify="left"
    )
    for col in (
        "agent",
        "attempts",
        "invalid",
        "utility",
        "attack success",
        "security",
        "unknown u/s",
    ):
        table.add_column(col)
    agents = sorted({r.cell.harness for r in records})
    for agent in agents:
        s = summarize(r for r in records if r.cell.harness == agent)
        table.add_row(
            Text(agent),
            str(s.attempts),
            str(s.invalid),
            Text(s.utility.with_interval()),
            Text(s.attack_success.with_interval()),
            Text(s.security.with_interval()),
            f"{s.unknown['utility']}/{s.unknown['security']}",
        )
    return table


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def controls_tables(report: ControlsReport) -> list[Table]:
    runs = Table(title="Controls", title_justify="left")
    for col in ("task", "control", "kind", "utility", "breached", "predicates fired", "behaved"):
        runs.add_column(col)
    misbehaved = any(not r.behaved for r in report.runs)
    if misbehaved:
        runs.add_column("why not")
    for r in report.runs:
        fired = [k.split(":", 1)[1] for k, v in r.fired.items() if v is True]
        broken = [k.split(":", 1)[1] + "!" for k in r.errors]
        runs.add_row(
            Text(r.task),
            Text(r.control.name),
            Text(r.control.kind + (f" ({r.control.derived})" if r.control.derived else "")),
            verdict_text(r.record.utility_achieved),
            verdict_text(r.record.security_breached, good=r.expected_security),
            Text(", ".join(fired + broken) or "—"),
            Text("yes", style="green") if r.behaved else Text("NO", style="bold red"),
            *([Text(_short(r.why_not(), 160), style="red")] if misbehaved else []),
        )
    preds = Table(title="Predicates", title_justify="left")
    for col in ("task", "metric", "predicate", "status", "mutants killed", "why"):
        preds.add_column(col)
    styles = {
        "proven": "green",
        "untested": "yellow",
        "trigger-happy": "red",
        "constant": "red",
        "weak": "red",
        "broken": "red",
        "unsupported": "yellow",
    }
    for s in report.statuses:
        preds.add_row(
            Text(s.task),
            s.metric.split("_")[0],
            Text(s.predicate),
            Text(s.status, style=styles[s.status]),
            _mutation_text(s),
            Text(s.reason, style="dim"),
        )
    for task, why in sorted(report.skipped.items()):
        preds.add_row(
            Text(task), "—", "—", Text("not judged", style="yellow"), "—", Text(why, style="yellow")
        )
    tables = [runs, preds]
    if report.judges:
        tables.append(judges_table(report))
    return tables


def _mutation_text(s: PredicateStatus) -> Text:
    """``killed/total``, and the mutants that survived (it fired on them as on the control)."""
    if not s.mutants:
        return Text("—", style="dim")
    text = Text(s.mutation_score, style="green" if s.killed == s.mutants else "yellow")
    if s.survived:
        survivors = ", ".join(n.rsplit(" ~", 1)[-1] for n in s.survived)
        text.append(f" (survived: {survivors})", style="dim")
    return text


def judges_table(report: ControlsReport) -> Table:
    """Each LLM judge's agreement with the controls and labelled examples, as counts."""
    table = Table(title="Judges", title_justify="left")
    columns = ("task", "metric", "judge", "model", "sensitivity", "specificity", "examples")
    for col in (*columns, "unknown"):
        table.add_column(col)

    def counts(a: Any) -> str:
        return f"{a.agreed}/{a.of}" if a.of else "—"

    for c in report.judges:
        table.add_row(
            Text(c.task),
            c.metric.split("_")[0],
            Text(c.judge),
            Text(c.model) if c.model else Text("none configured", style="yellow"),
            counts(c.sensitivity),
            counts(c.specificity),
            counts(c.examples),
            str(c.unknown),
        )
    return table


def explain_panel(run: ControlRun) -> Panel:
    """One control for an author: what it promised, what it changed, what fired and why."""
    c = run.control
    lines: list[Any] = []
    promise = {
        "breach": "must make the security predicates fire",
        "clean": "must leave every security predicate silent",
        "mirror": "looks like the breach but is allowed: no security predicate may fire",
    }[c.kind]
    if c.utility is not None:
        promise += f"; utility must be {'achieved' if c.utility else 'not achieved'}"
    lines.append(Text(f"promise: {promise}"))
    if run.record.error:
        lines.append(Text(f"the control broke: {run.record.error}", style="red"))
    for key, value in run.fired.items():
        metric, name = key.split(":", 1)
        if value is None:
            text = Text(
                f"{metric.split('_')[0]} predicate {name}: error — {run.errors.get(key)}",
                style="red",
            )
        else:
            text = Text(
                f"{metric.split('_')[0]} predicate {name}: {'fired' if value else 'silent'}"
            )
        lines.append(text)
        judged = [p.judge for p in run.result.predicates.get(metric, []) if p.name == name]
        if judged and judged[0] is not None and judged[0].reasoning:
            j = judged[0]
            model = j.model or j.configured or "no model"
            lines.append(Text(f"  the judge ({model}) reasoned: {j.reasoning}", style="dim"))
    changes = 0
    for sink, d in run.record.diff.items():
        sink_lines = _change_lines(d)
        changes += len(sink_lines)
        if sink_lines:
            lines.append(Text(f"{sink}:", style="bold"))
            lines.extend(Text("  " + ln) for ln in sink_lines)
    if not changes:
        lines.append(Text("the diff is empty: the control changed nothing the sinks observe"))
    for sink, msg in run.record.observation_errors.items():
        lines.append(Text(f"observation of {sink} failed: {msg}", style="red"))
    verdict = "behaved" if run.behaved else "MISBEHAVED"
    return Panel(
        Group(*lines),
        title=Text(f"{run.task} · control {c.name!r} ({c.kind}) · {verdict}"),
        title_align="left",
        border_style="green" if run.behaved else "red",
    )


def _change_lines(diff: dict[str, Any]) -> list[str]:
    lines = []
    kind = diff.get("kind")
    for raw in diff.get("changes", []):
        try:
            change = change_from_json(raw, kind if isinstance(kind, str) else None)
        except ValueError:  # written by another version: show it as it is
            change = None
        if change is None:
            lines.append(f"{raw.get('change')}: {raw}")
            continue
        lines.append(change.summary())
        text_diff = getattr(change, "text_diff", None)
        if text_diff:
            lines.extend("    " + ln for ln in text_diff.rstrip("\n").splitlines())
    return lines


def record_panel(r: TrialRecord) -> Group:
    """A whole record for people: identity, verdicts with reasons, findings and the diff."""
    head = Table.grid(padding=(0, 2))
    head.add_row("cell", Text(r.cell.id))
    head.add_row("utility", verdict_text(r.utility_achieved, good=True))
    head.add_row("breached", verdict_text(r.security_breached, good=False))
    head.add_row(
        "autonomy",
        Text.assemble(verdict_text(r.autonomy_achieved, good=True), f"  ({r.autonomy_reason})"),
    )
    if r.error:
        head.add_row("error", Text(r.error, style="red"))
    for metric, msg in r.evaluation_errors.items():
        head.add_row(f"why {metric.split('_')[0]} unknown", Text(msg, style="yellow"))
    for metric, ev in r.evaluators.items():
        for p in ev.predicates:
            value = "error" if p.value is None else str(p.value)
            head.add_row(f"{metric.split('_')[0]} predicate", Text(f"{p.name} = {value}"))
    for metric, why in r.not_measured.items():
        head.add_row(f"{metric.split('_')[0]} not measured", Text(why, style="yellow"))
    if r.injection:
        inj = r.injection
        how = "; ".join(inj.reached_via) or inj.reach_note
        head.add_row(
            "injection",
            Text(  # plain text: a place like "cache:notes:*" is not an emoji code
                f"{inj.sink}:{inj.where} planted={inj.planted} reached={inj.reached} ({how})"
            ),
        )
    hits = r.invocation.limits_hit() if r.invocation else []
    if hits:
        head.add_row("limits", Text(f"limits: {'; '.join(hits)}", style="yellow"))
    if r.usage is not None and (r.usage.calls or not r.usage.complete):
        head.add_row("model usage", Text(r.usage.summary()))
        for model_call in r.usage.calls:
            head.add_row("model call", Text(usage_call_line(model_call)))
        if r.usage.cost_usd is None and r.usage.cost_note:
            head.add_row("cost", Text(r.usage.cost_note, style="dim"))
    if r.final_message:
        head.add_row("agent said", Text(r.final_message[:300], style="dim italic"))
    for call in r.tool_calls or ():
        head.add_row("tool call", Text(call.summary()))
    parts: list[Any] = [head]
    for f in r.findings:
        against = f" (against {'claim ' + repr(f.claim) if f.claim else 'call ' + str(f.call)})"
        parts.append(
            Text(
                f"finding ({f.kind.replace('_', ' ')}) {f.sink}: {f.change} — {f.detail}"
                + (against if f.claim or f.call else ""),
                style="magenta",
            )
        )
    for sink, d in r.diff.items():
        lines = _change_lines(d)
        body = "\n".join(lines) if lines else "(no change)"
        # Text: keys like "notes:ops:" and rows like "t[1]" are not markup or emoji codes.
        title = Text(f"{sink} ({d.get('kind')})")
        parts.append(Panel(Text(body), title=title, title_align="left"))
    for sink, msg in r.observation_errors.items():
        parts.append(Text(f"observation of {sink} failed: {msg}", style="red"))
    return Group(*parts)


def usage_call_line(c: ModelCall) -> str:
    """One model call: ``#3 openai chat.completions api.test → gpt-4o-mini 12 in / 4 out``."""
    tokens = (
        f"{c.input_tokens} in / {c.output_tokens} out"
        if c.input_tokens is not None and c.output_tokens is not None
        else "tokens unknown"
    )
    asked = f" (asked {c.requested_model})" if c.requested_model not in (None, c.model) else ""
    line = (
        f"#{c.request_id} {c.provider} {c.api} {c.host}{' streamed' if c.streamed else ''} → "
        f"{c.model or 'model unknown'}{asked} {tokens}"
    )
    return line + (f" — {c.note}" if c.note else "")


def plain(value: object) -> str:
    """`value` as text Rich prints as it is: brackets in an error (``Scope({sink: [globs]})``)
    are not taken for markup."""
    return escape(str(value))


def console() -> Console:
    """A console that is wide enough for the tables also when output goes to a file or CI."""
    c = Console(highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(highlight=False, soft_wrap=False, width=max(c.width, 160))
    return c


def _short_digest(d: str) -> str:
    return d.split(":", 1)[-1][:12] if d else "—"


def rescore_table(results: Sequence[Any]) -> Table:
    """One row per archived trial (`oracle.matrix.rescore.Rescored`): the archived verdicts beside
    the new ones, the task digest each ran, and whether the new verdicts count."""
    table = Table(title="Rescored (archived → now)", title_justify="left")
    for col in ("task", "agent", "utility", "breached", "autonomy", "task digest", "counted"):
        table.add_column(col)
    for r in results:
        if r.new is None or r.old is None:
            cell = r.cell
            table.add_row(
                Text(cell.task if cell else str(r.source.path)),
                Text(cell.harness if cell else "—"),
                "—",
                "—",
                "—",
                "—",
                Text(f"not rescored: {r.error}", style="red"),
            )
            continue
        old, new = r.old, r.new
        cols = []
        for metric, good in (
            ("utility_achieved", True),
            ("security_breached", False),
            ("autonomy_achieved", True),
        ):
            before = getattr(old, metric)
            after = getattr(new, metric)
            text = verdict_text(before, good=good)
            text.append(" → ")
            text.append_text(verdict_text(after, good=good))
            if before is not after:
                text.stylize("bold")
            cols.append(text)
        digest = f"{_short_digest(old.task_digest)} → {_short_digest(new.task_digest)}"
        if old.task_digest == new.task_digest:
            digest = f"{_short_digest(new.task_digest)} (same)"
        if new.not_measured:
            why = "; ".join(sorted(set(new.not_measured.values())))
            counted = Text(f"no: {why}", style="yellow")
        else:
            counted = Text("yes", style="green")
        if r.error:
            counted.append(f" ({r.error})", style="red")
        table.add_row(Text(new.cell.task), Text(new.cell.harness), *cols, digest, counted)
    return table
