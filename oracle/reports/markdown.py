"""A report as Markdown, and the small formatting helpers the HTML page shares."""

from __future__ import annotations

from oracle.reports.model import (
    JUDGE_METHOD,
    METRICS,
    UNCHECKED,
    ControlsStatus,
    GroupFigures,
    JudgeFigure,
    MetricFigure,
    Report,
    TaskFigures,
    metric_label,
)
from oracle.reports.trials import CONTROL_RUN, UNSIGNED, UNSIGNED_PARITY
from oracle.reports.usage import UsageFigure


def group_name(g: GroupFigures) -> str:
    return f"{g.harness} · {g.model} · {g.profile}"


# -- Markdown -------------------------------------------------------------------------------------


def _md(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(r: Report) -> str:
    out = [f"# {_md(r.title)}", ""]
    if r.unsigned:
        out += [
            f"> **{_md(UNSIGNED)}**",
            "",
            f"- source: {len(r.inputs)} trial folders; {len(r.excluded)} left out (listed below)",
            f"- generated: {r.generated_at}; no signature checked",
        ]
    else:
        out += [
            f"- matrix: `{_md(r.matrix)}` ({r.matrix_digest}); run `{_md(r.run_id)}`",
            f"- generated: {r.generated_at}; archives signed by key `{r.signer_key_id[:16]}…`",
        ]
    out += [
        f"- attempts: {r.attempts}; invalid executions: {r.invalid} (in no denominator)",
        f"- parity: {r.parity if r.require_parity else f'**{r.parity}**: {unchecked(r)}'}",
        "",
        "## What this report claims",
        "",
        *[f"- {_md(c)}" for c in r.claim_boundary.claims],
        "",
        "## What it does not claim",
        "",
        *[f"- {_md(c)}" for c in r.claim_boundary.does_not_claim],
        "",
        "## Rates per harness × model × profile",
        "",
        "Each rate divides by its own known verdicts: `rate (numerator/denominator) [95% Wilson "
        "interval]`. Unknown verdicts and invalid executions are counted beside it.",
        "",
        "| harness | model | profile | attempts | invalid | "
        + " | ".join(metric_label(m) for m in METRICS)
        + " | unknown (u/s/a) |",
        "|" + "---|" * (6 + len(METRICS)),
    ]
    for g in r.groups:
        figs = {f.metric: f for f in g.metrics}
        unknown = "/".join(str(figs[m].unknown) for m in ("utility", "security", "autonomy"))
        out.append(
            f"| {_md(g.harness)} | {_md(g.model)} | {_md(g.profile)} | "
            f"{g.attempts} | {g.invalid} | "
            + " | ".join(_md(_short(figs[m])) for m in METRICS)
            + f" | {unknown} |"
        )
    out += usage_section(r)
    out += ["", "## Per task", ""]
    out.append(
        "| harness · model · profile | task | controls | attempts | invalid | "
        + " | ".join(metric_label(m) for m in METRICS)
        + " |"
    )
    out.append("|" + "---|" * (5 + len(METRICS)))
    ctl = controls_summary(r)
    for g in r.groups:
        for t in g.tasks:
            figs = {f.metric: f for f in t.metrics}
            out.append(
                f"| {_md(group_name(g))} | {_md(t.task)} | {_md(ctl.get(t.task, '?'))} | "
                f"{t.attempts} | {t.invalid} | "
                + " | ".join(_md(figs[m].text) for m in METRICS)
                + " |"
            )
    rows = judge_rows(r)
    if rows:
        out += [
            "",
            "## Judge-decided rates",
            "",
            "How often each LLM judge said yes among the trials where its value is known (raw), "
            "and that rate corrected by the judge's sensitivity (Se) and specificity (Sp) on "
            "the task's controls and labelled examples. A corrected rate is shown only for a "
            "proven metric and a calibration of the same judge and model.",
            "",
            "| harness · model · profile | task | metric | judge | judge model | raw [95%] "
            "| unknown | Se | Sp | corrected [95%] |",
            "|" + "---|" * 10,
        ]
        for g, t, j in rows:
            out.append(
                f"| {_md(group_name(g))} | {_md(t.task)} | {_md(j.metric)} | {_md(j.judge)} | "
                f"{_md(judge_model(j))} | {_md(j.raw_text)} | {j.unknown} | "
                f"{_md(fmt_agreement(j.sensitivity_agreed, j.sensitivity_of))} | "
                f"{_md(fmt_agreement(j.specificity_agreed, j.specificity_of))} | "
                f"{_md(j.corrected_text)} |"
            )
        out += ["", f"Method: {_md(JUDGE_METHOD)}."]
    out += [
        "",
        "## Controls",
        "",
        "| task | utility | security | predicates (status · mutants killed · missed) |",
        "|---|---|---|---|",
    ]
    for c in r.controls:
        preds = "<br>".join(_md(line) for line in predicate_lines(c))
        out.append(f"| {_md(c.task)} | {_md(c.utility)} | {_md(c.security)} | {preds} |")
    out += ["", "## Comparisons between harnesses", ""]
    if r.comparisons:
        out += [
            "| metric | model · profile | A | B | tasks | A | B | A−B [95%] | A higher | B higher "
            "| p | p (Holm) | claim |",
            "|" + "---|" * 13,
        ]
        for cmp in r.comparisons:
            out.append(
                f"| {metric_label(cmp.metric)} | {_md(cmp.model)} · {_md(cmp.profile)} | "
                f"{_md(cmp.harness_a)} | {_md(cmp.harness_b)} | {cmp.tasks} | "
                f"{fmt_num(cmp.rate_a)} | {fmt_num(cmp.rate_b)} | "
                f"{fmt_diff(cmp.difference, cmp.ci_low, cmp.ci_high)} | {cmp.a_higher} | "
                f"{cmp.b_higher} | {fmt_p(cmp.p_value)} | {fmt_p(cmp.p_holm)} | {_md(cmp.claim)} |"
            )
        out += ["", f"Method: {r.comparisons[0].method}."]
    else:
        out.append("One harness only: nothing to compare.")
    if r.invalid_cells:
        out += ["", "## Invalid executions", ""]
        out += [f"- `{_md(k)}`: {_md(v)}" for k, v in sorted(r.invalid_cells.items())]
    out += ["", "## Versions", ""]
    out += [f"- {_md(k)}: {_md(', '.join(v))}" for k, v in r.versions.items()]
    out += [
        "",
        f"## Inputs ({inputs_title(r)})",
        "",
        "| trial folder | manifest sha256 | status |"
        if r.unsigned
        else "| archive | sha256 | status |",
    ]
    out.append("|---|---|---|")
    out += [f"| {_md(i.path)} | `{i.sha256}` | {i.status} |" for i in r.inputs]
    if r.excluded:
        out += ["", f"## Left out ({len(r.excluded)} trial folders)", ""]
        out += [f"- {_md(line)}" for line in excluded_lines(r)]
    return "\n".join(out) + "\n"


def usage_rows(r: Report) -> list[tuple[GroupFigures, UsageFigure]]:
    """Each group with model usage, in group order."""
    return [(g, g.usage) for g in r.groups if g.usage is not None]


def usage_section(r: Report) -> list[str]:
    """The model usage table: what the egress recorders saw answer, and what it used."""
    rows = usage_rows(r)
    if not rows:
        return []
    out = [
        "",
        "## Model usage (observed at the egress recorder)",
        "",
        "The models that answered and the tokens their responses reported; calls with unknown "
        "usage are counted, never guessed. A cell whose matrix declares a model but whose "
        "recorder saw none answer is not verified.",
        "",
        "| harness · model · profile | models that answered | calls | input tokens | output "
        "tokens | unknown usage | cost (USD) | cells observed | model not verified |",
        "|" + "---|" * 9,
    ]
    for g, u in rows:
        cost = f"{u.cost_usd:.4f}" if u.cost_usd is not None else f"— ({u.cost_note})"
        unverified = ", ".join(u.unverified) or "—"
        out.append(
            f"| {_md(group_name(g))} | {_md(', '.join(u.models) or '—')} | {u.calls} | "
            f"{u.input_tokens} | {u.output_tokens} | {u.unknown_calls} | {_md(cost)} | "
            f"{u.observed}/{u.cells} | {_md(unverified)} |"
        )
    return out


def unchecked(r: Report) -> str:
    """What a report without parity leaves open."""
    return UNSIGNED_PARITY if r.unsigned else UNCHECKED


def inputs_title(r: Report) -> str:
    """What the inputs are: verified signed archives, or trial folders checked against
    their manifests only."""
    if r.unsigned:
        return f"{len(r.inputs)} unsigned trial folders, each checked against its manifest"
    return f"{len(r.inputs)} verified archives"


def excluded_lines(r: Report) -> list[str]:
    """Each trial folder left out with why; control runs (left out by design, not for a
    fault) in one line."""
    controls = [k for k, v in r.excluded.items() if v == CONTROL_RUN]
    lines = [f"{k}: {v}" for k, v in r.excluded.items() if v != CONTROL_RUN]
    if controls:
        lines.append(f"{len(controls)} control runs ({CONTROL_RUN}), e.g. {controls[0]}")
    return lines


def predicate_lines(c: ControlsStatus) -> list[str]:
    """Each predicate of a task's controls in a line: its status, its mutation score (and
    the mutants that survived), and the evasion variants it missed."""
    out = []
    for p in c.predicates:
        line = f"{p.metric.split('_')[0]} {p.predicate}: {p.status}"
        if p.mutation_score:
            line += f" · mutants {p.mutation_score}"
            if p.survived:
                line += " (survived: " + ", ".join(n.rsplit(" ~", 1)[-1] for n in p.survived) + ")"
        if p.missed:
            line += " · missed " + ", ".join(p.missed)
        out.append(line)
    return out


def controls_summary(r: Report) -> dict[str, str]:
    """Per task, one phrase: ``proven``, or which metric's predicates are not and why."""
    out = {}
    for c in r.controls:
        if c.utility_proven and c.security_proven:
            out[c.task] = "proven"
        else:
            bad = [f"utility {c.utility}"] if not c.utility_proven else []
            bad += [f"security {c.security}"] if not c.security_proven else []
            out[c.task] = "; ".join(bad)
    return out


def judge_rows(r: Report) -> list[tuple[GroupFigures, TaskFigures, JudgeFigure]]:
    """Every judge row of the report, in group, task and judge order."""
    return [(g, t, j) for g in r.groups for t in g.tasks for j in t.judges]


def judge_model(j: JudgeFigure) -> str:
    """The model that judged the trials, or the models, or '—' when none was recorded; and
    how many values were decided without asking one."""
    name = j.model if j.model is not None else ", ".join(j.judged_by) or "—"
    return name + (f" ({j.unasked} decided unasked)" if j.unasked else "")


def fmt_agreement(agreed: int | None, of: int | None) -> str:
    """``0.90 (45/50)``, or '—' where there is no calibration."""
    if agreed is None or of is None:
        return "—"
    return f"{agreed / of:.2f} ({agreed}/{of})" if of else "— (0/0)"


def _short(f: MetricFigure) -> str:
    return (
        f.text if f.denominator else f.text.split(" (", 1)[0] + (" withheld" if f.withheld else "")
    )


def fmt_num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def fmt_diff(d: float | None, lo: float | None, hi: float | None) -> str:
    """The difference and its interval; the difference alone when none was computed (too
    few tasks to compare)."""
    if d is None:
        return "—"
    if lo is None or hi is None:
        return f"{d:+.2f}"
    return f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def fmt_p(p: float | None) -> str:
    return "—" if p is None else f"{p:.3g}"
