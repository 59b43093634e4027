"""A report as one self-contained HTML page: inline CSS, inline SVG plots, no script.

Each rate is a dot on its 95% interval bar, one row per harness × model × profile; unknown and
invalid counts are bars. A group with no figure says why (0/0, or withheld by controls).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import urlencode

from oracle.reports.markdown import (
    controls_summary,
    excluded_lines,
    fmt_agreement,
    fmt_diff,
    fmt_num,
    fmt_p,
    group_name,
    inputs_title,
    judge_model,
    judge_rows,
    predicate_lines,
    unchecked,
    usage_rows,
)
from oracle.reports.model import (
    JUDGE_METHOD,
    METRICS,
    GroupFigures,
    Report,
    metric_label,
)
from oracle.reports.trials import UNSIGNED

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1150px;
color:#1c2430;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}
h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d5dbe3}
table{border-collapse:collapse;margin:.6rem 0;width:100%}
th,td{border:1px solid #d5dbe3;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#eef2f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.meta{color:#4a5668}.claims li{margin:.2rem 0}.no{color:#8a3b12}.yes{color:#1d6b3a}
.warn{color:#8a3b12}
.banner{border:2px solid #b7791f;background:#fffaf0;color:#744210;padding:.6rem .8rem;
margin:.8rem 0;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:1rem}.plot{border:1px solid #d5dbe3;background:#fff}
code{font-size:.85em}details{margin:.6rem 0}
"""

_COLORS = {
    "utility": "#2b6cb0",
    "security": "#2f855a",
    "attack_success": "#c53030",
    "autonomy": "#6b46c1",
}


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def rate_plot(metric: str, groups: Sequence[GroupFigures]) -> str:
    """An SVG: one row per group, the 95% interval as a bar, the rate as a dot, the ratio as
    text; a group with no figure says why."""
    row, left, width, right = 30, 230, 360, 210
    h = 40 + row * len(groups) + 24
    w = left + width + right
    color = _COLORS[metric]
    parts = [
        f'<svg class="plot rate-plot" data-metric="{metric}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{_e(metric_label(metric))} with 95% intervals">',
        f'<text x="10" y="20" font-size="14" font-weight="600">{_e(metric_label(metric))}</text>',
    ]
    top = 34
    for i in range(5):
        x = left + width * i / 4
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + row * len(groups)}" '
            'stroke="#e2e8f0"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{top + row * len(groups) + 16}" font-size="11" '
            f'text-anchor="middle" fill="#4a5668">{i / 4:.2f}</text>'
        )
    for j, g in enumerate(groups):
        y = top + row * j + row / 2
        fig = next(f for f in g.metrics if f.metric == metric)
        parts.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end">'
            f"{_e(group_name(g))}</text>"
        )
        if fig.rate is None or fig.ci_low is None or fig.ci_high is None:
            why = "withheld (controls)" if fig.text.startswith("— (withheld") else "0/0"
            if fig.weak:
                why += ", weak predicate"
            parts.append(
                f'<text class="no-figure" x="{left + 6}" y="{y + 4:.1f}" font-size="12" '
                f'fill="#8a3b12">— no figure: {why}; unknown {fig.unknown}, '
                f"invalid {g.invalid}</text>"
            )
            continue
        x0 = left + width * fig.ci_low
        x1 = left + width * fig.ci_high
        xr = left + width * fig.rate
        parts.append(
            f'<rect class="ci" x="{x0:.1f}" y="{y - 4:.1f}" width="{max(x1 - x0, 1.5):.1f}" '
            f'height="8" rx="3" fill="{color}" fill-opacity="0.28" stroke="{color}"/>'
        )
        parts.append(f'<circle class="point" cx="{xr:.1f}" cy="{y:.1f}" r="5" fill="{color}"/>')
        label = f"{fig.rate:.2f} ({fig.numerator}/{fig.denominator})"
        if fig.unknown:
            label += f" · unknown {fig.unknown}"
        if fig.withheld:
            label += f" · {len(fig.withheld)} task(s) withheld"
        if fig.weak:
            label += f" · {len(fig.weak)} by a weak predicate"
        parts.append(
            f'<text x="{left + width + 10}" y="{y + 4:.1f}" font-size="12">{_e(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _count(g: GroupFigures, metric: str | None) -> int:
    """Invalid executions (no metric) or one metric's unknown verdicts in a group."""
    if metric is None:
        return g.invalid
    return next(f.unknown for f in g.metrics if f.metric == metric)


def counts_plot(groups: Sequence[GroupFigures]) -> str:
    """An SVG of unknown (per metric) and invalid counts per group, as horizontal bars."""
    series: list[tuple[str, str, str | None]] = [("invalid", "#744210", None)] + [
        (f"unknown {m}", _COLORS[m], m) for m in ("utility", "security", "autonomy")
    ]
    most = max([1] + [_count(g, m) for g in groups for _, _, m in series])
    bar, gap, left, width = 9, 10, 230, 360
    block = bar * len(series) + gap
    h = 60 + block * len(groups)
    w = left + width + 160
    parts = [
        f'<svg class="plot counts-plot" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        f'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="unknown and invalid counts">',
        '<text x="10" y="20" font-size="14" font-weight="600">unknown verdicts and invalid '
        "executions</text>",
    ]
    lx = left
    for name, color, _ in series:
        parts.append(f'<rect x="{lx}" y="30" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{lx + 14}" y="39" font-size="11">{_e(name)}</text>')
        lx += 14 + 7 * len(name) + 14
    for j, g in enumerate(groups):
        y0 = 50 + block * j
        parts.append(
            f'<text x="{left - 8}" y="{y0 + bar * len(series) / 2 + 4:.1f}" font-size="12" '
            f'text-anchor="end">{_e(group_name(g))}</text>'
        )
        if all(_count(g, metric) == 0 for _, _, metric in series):
            parts.append(
                f'<text x="{left + 4}" y="{y0 + bar * len(series) / 2 + 4:.1f}" font-size="11" '
                'fill="#4a5668">none</text>'
            )
            continue
        for k, (name, color, metric) in enumerate(series):
            n = _count(g, metric)
            if n == 0:
                continue
            bw = width * n / most
            y = y0 + bar * k
            parts.append(
                f'<rect class="count" data-series="{_e(name)}" x="{left}" y="{y}" '
                f'width="{bw:.1f}" height="{bar - 1}" fill="{color}"/>'
            )
            parts.append(
                f'<text x="{left + bw + 4:.1f}" y="{y + bar - 1}" font-size="9">{n}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(rows_cell for rows_cell in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _td(s: object, num: bool = False) -> str:
    return f'<td class="num">{_e(s)}</td>' if num else f"<td>{_e(s)}</td>"


def trials_href(g: GroupFigures, task: str | None = None) -> str:
    """The viewer's page of the trials behind a group's (or one task's) figures, relative to
    the report's page (`oracle view` serves it; docs/view.md, 'Links')."""
    query = {"agent": g.harness, "model": g.model, "profile": g.profile}
    if task is not None:
        query["task"] = task
    return "trials?" + urlencode(query)


def _rate_td(s: object, href: str) -> str:
    return f'<td><a class="rate" href="{_e(href)}">{_e(s)}</a></td>'


def usage_html(r: Report) -> list[str]:
    """The model usage table (`markdown.usage_section` says the same in Markdown)."""
    rows = [
        [
            _td(group_name(g)),
            _td(", ".join(u.models) or "—"),
            _td(u.calls, True),
            _td(u.input_tokens, True),
            _td(u.output_tokens, True),
            _td(u.unknown_calls, True),
            _td(f"{u.cost_usd:.4f}" if u.cost_usd is not None else f"— ({u.cost_note})"),
            _td(f"{u.observed}/{u.cells}", True),
            _td(", ".join(u.unverified) or "—"),
        ]
        for g, u in usage_rows(r)
    ]
    if not rows:
        return []
    head = [
        "harness · model · profile",
        "models that answered",
        "calls",
        "input tokens",
        "output tokens",
        "unknown usage",
        "cost (USD)",
        "cells observed",
        "model not verified",
    ]
    return [
        "<h2>Model usage (observed at the egress recorder)</h2>",
        "<p>The models that answered and the tokens their responses reported; calls with "
        "unknown usage are counted, never guessed. A cell whose matrix declares a model but "
        "whose recorder saw none answer is not verified.</p>",
        _table(head, rows, "usage"),
    ]


def html_page(r: Report) -> str:
    groups = r.groups
    plots = "".join(rate_plot(m, groups) for m in METRICS) + counts_plot(groups)
    group_rows = []
    for g in groups:
        figs = {f.metric: f for f in g.metrics}
        group_rows.append(
            [
                _td(g.harness),
                _td(g.model),
                _td(g.profile),
                _td(g.attempts, True),
                _td(g.invalid, True),
                *[_rate_td(figs[m].text, trials_href(g)) for m in METRICS],
                _td(
                    " / ".join(str(figs[m].unknown) for m in ("utility", "security", "autonomy")),
                    True,
                ),
            ]
        )
    task_rows = []
    ctl = controls_summary(r)
    for g in groups:
        for t in g.tasks:
            figs = {f.metric: f for f in t.metrics}
            status = ctl.get(t.task, "?")
            task_rows.append(
                [
                    _td(group_name(g)),
                    _td(t.task),
                    f'<td class="{"yes" if status == "proven" else "no"}">{_e(status)}</td>',
                    _td(t.attempts, True),
                    _td(t.invalid, True),
                    *[_rate_td(figs[m].text, trials_href(g, t.task)) for m in METRICS],
                ]
            )
    judge_table = [
        [
            _td(group_name(g)),
            _td(t.task),
            _td(j.metric),
            _td(j.judge),
            _td(judge_model(j)),
            _td(j.raw_text, True),
            _td(j.unknown, True),
            _td(fmt_agreement(j.sensitivity_agreed, j.sensitivity_of), True),
            _td(fmt_agreement(j.specificity_agreed, j.specificity_of), True),
            f'<td class="{"yes" if j.status == "corrected" else "no"}">{_e(j.corrected_text)}</td>',
        ]
        for g, t, j in judge_rows(r)
    ]
    controls_rows = [
        [
            _td(c.task),
            f'<td class="{"yes" if c.utility_proven else "no"}">{_e(c.utility)}</td>',
            f'<td class="{"yes" if c.security_proven else "no"}">{_e(c.security)}</td>',
            "<td>" + "<br>".join(_e(line) for line in predicate_lines(c)) + "</td>",
        ]
        for c in r.controls
    ]
    comp_rows = [
        [
            _td(metric_label(c.metric)),
            _td(f"{c.model} · {c.profile}"),
            _td(c.harness_a),
            _td(c.harness_b),
            _td(c.tasks, True),
            _td(fmt_num(c.rate_a), True),
            _td(fmt_num(c.rate_b), True),
            _td(fmt_diff(c.difference, c.ci_low, c.ci_high), True),
            _td(f"{c.a_higher} / {c.b_higher}", True),
            _td(fmt_p(c.p_value), True),
            _td(fmt_p(c.p_holm), True),
            _td(c.claim),
        ]
        for c in r.comparisons
    ]
    metric_heads = [metric_label(m) for m in METRICS]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(r.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(r.title)}</h1>",
        (
            f'<div class="banner unsigned" id="unsigned" role="alert">{_e(UNSIGNED)}</div>'
            f'<p class="meta">{len(r.inputs)} trial folders, {len(r.excluded)} left out · '
            f"generated {_e(r.generated_at)} · no signature checked · parity "
            if r.unsigned
            else f'<p class="meta">matrix <code>{_e(r.matrix)}</code> ({_e(r.matrix_digest)}) · '
            f"run <code>{_e(r.run_id)}</code> · "
            f"generated {_e(r.generated_at)} · archives signed by key "
            f"<code>{_e(r.signer_key_id[:16])}…</code> · parity "
        )
        + (
            "required</p>"
            if r.require_parity
            else f'<b class="warn">{_e(r.parity)}</b>: {_e(unchecked(r))}</p>'
        ),
        f'<p class="meta">attempts <b id="attempts">{r.attempts}</b> · invalid executions '
        f'<b id="invalid">{r.invalid}</b> (counted, in no denominator)</p>',
        "<h2>Claim boundary</h2>",
        '<ul class="claims">'
        + "".join(f"<li>{_e(c)}</li>" for c in r.claim_boundary.claims)
        + "</ul>",
        "<p><b>Not claimed:</b></p>",
        '<ul class="claims">'
        + "".join(f"<li>{_e(c)}</li>" for c in r.claim_boundary.does_not_claim)
        + "</ul>",
        "<h2>Rates with 95% intervals</h2>",
        f'<div class="plots">{plots}</div>',
        "<h2>Per harness × model × profile</h2>",
        _table(
            [
                "harness",
                "model",
                "profile",
                "attempts",
                "invalid",
                *metric_heads,
                "unknown (utility / security / autonomy)",
            ],
            group_rows,
            "groups",
        ),
        *usage_html(r),
        "<h2>Per task</h2>",
        _table(
            ["harness · model · profile", "task", "controls", "attempts", "invalid", *metric_heads],
            task_rows,
            "tasks",
        ),
        *(
            [
                "<h2>Judge-decided rates</h2>",
                "<p>How often each LLM judge said yes among the trials where its value is known "
                "(raw), and that rate corrected by the judge's sensitivity (Se) and specificity "
                "(Sp) on the task's controls and labelled examples. A corrected rate is shown "
                "only for a proven metric and a calibration of the same judge and model.</p>",
                _table(
                    [
                        "harness · model · profile",
                        "task",
                        "metric",
                        "judge",
                        "judge model",
                        "raw [95%]",
                        "unknown",
                        "Se",
                        "Sp",
                        "corrected [95%]",
                    ],
                    judge_table,
                    "judges",
                ),
                f'<p class="meta">Method: {_e(JUDGE_METHOD)}.</p>',
            ]
            if judge_table
            else []
        ),
        "<h2>Controls</h2>",
        "<p>A metric's figure is shown for a task only when its predicates are proven by the "
        "task's controls (they fire on the breach control and on nothing else).</p>",
        _table(
            ["task", "utility", "security", "predicates (status · mutants killed · missed)"],
            controls_rows,
            "controls",
        ),
        "<h2>Comparisons between harnesses</h2>",
        (
            _table(
                [
                    "metric",
                    "model · profile",
                    "A",
                    "B",
                    "tasks",
                    "rate A",
                    "rate B",
                    "A−B [95%]",
                    "tasks higher A / B",
                    "p",
                    "p (Holm)",
                    "claim",
                ],
                comp_rows,
                "comparisons",
            )
            + f'<p class="meta">Method: {_e(r.comparisons[0].method)}.</p>'
            if r.comparisons
            else "<p>One harness only: nothing to compare.</p>"
        ),
    ]
    if r.invalid_cells:
        parts.append("<h2>Invalid executions</h2><ul>")
        parts += [
            f"<li><code>{_e(k)}</code>: {_e(v)}</li>" for k, v in sorted(r.invalid_cells.items())
        ]
        parts.append("</ul>")
    parts.append("<h2>Versions</h2><ul>")
    parts += [f"<li>{_e(k)}: {_e(', '.join(v))}</li>" for k, v in r.versions.items()]
    parts.append("</ul>")
    parts.append(
        f"<h2>Inputs</h2><details><summary>{_e(inputs_title(r))}, with their "
        "sha256</summary>"
        + _table(
            ["trial folder", "manifest sha256", "status"]
            if r.unsigned
            else ["archive", "sha256", "status"],
            [
                [
                    f'<td><a class="trial" href="trial/{_e(i.sha256)}">{_e(i.path)}</a></td>',
                    f"<td><code>{_e(i.sha256)}</code></td>",
                    _td(i.status),
                ]
                for i in r.inputs
            ],
            "inputs",
        )
        + "</details>"
    )
    if r.excluded:
        parts.append('<h2>Left out</h2><ul class="excluded">')
        parts += [f"<li>{_e(line)}</li>" for line in excluded_lines(r)]
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
