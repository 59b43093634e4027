"""A report as Markdown, and the small formatting helpers the HTML page shares."""

from __future__ import annotations

from oracle.reports.model import (
    METRICS,
    UNCHECKED,
    GroupFigures,
    MetricFigure,
    Report,
    metric_label,
)


def group_name(g: GroupFigures) -> str:
    return f"{g.harness} · {g.model} · {g.profile}"


# -- Markdown -------------------------------------------------------------------------------------


def _md(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(r: Report) -> str:
    out = [f"# {_md(r.title)}", ""]
    out += [
        f"- matrix: `{_md(r.matrix)}` ({r.matrix_digest}); run `{_md(r.run_id)}`",
        f"- generated: {r.generated_at}; archives signed by key `{r.signer_key_id[:16]}…`",
        f"- attempts: {r.attempts}; invalid executions: {r.invalid} (in no denominator)",
        f"- parity: {r.parity if r.require_parity else f'**{r.parity}**: {UNCHECKED}'}",
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
    out += ["", "## Controls", "", "| task | utility | security |", "|---|---|---|"]
    for c in r.controls:
        out.append(f"| {_md(c.task)} | {_md(c.utility)} | {_md(c.security)} |")
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
        f"## Inputs ({len(r.inputs)} verified archives)",
        "",
        "| archive | sha256 | status |",
    ]
    out.append("|---|---|---|")
    out += [f"| {_md(i.path)} | `{i.sha256}` | {i.status} |" for i in r.inputs]
    return "\n".join(out) + "\n"


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
