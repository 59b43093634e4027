"""``oracle report trials``: a report over `oracle trial` and `oracle demo` folders, unsigned.

    oracle report trials runs/20260101-120000                 # text on the terminal
    oracle report trials runs/a runs/b --format markdown      # Markdown on stdout
    oracle report trials runs/a --out reports/a               # report.json, .md and .html

Only typer and the standard library are imported at module level (`oracle --help` stays
fast); the command imports the reports when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from oracle.cli.exits import FAILED, USAGE

if TYPE_CHECKING:
    from oracle.reports.model import Report

FORMATS = ("text", "markdown", "html", "json")


def report_trials(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="trial folders, or folders holding them (oracle trial --out, oracle demo "
            "--out), searched recursively",
            metavar="PATH",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="folder to write report.json, report.md and report.html in (unsigned: no "
            "envelope); without it the report is printed"
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="what is printed without --out: text, markdown, html or json",
            metavar="FORMAT",
        ),
    ] = "text",
    title: Annotated[str | None, typer.Option(help="the report's title", metavar="TITLE")] = None,
) -> None:
    """Report the trials in trial folders, with the rates, denominators and intervals of a
    matrix report, marked everywhere as unsigned: each folder is checked against its
    manifest.sha256 (as `oracle show` does), not against a signature.

    A folder that does not verify, whose record is invalid or contradicts the verdict rules,
    or that holds the same trial as another is left out and named; control runs are left out
    and counted. Exits 1 when a folder was left out for a fault (the report of the others is
    still made) or none verified, 2 when a path does not exist or holds no trial folder (or
    control runs only)."""
    from rich.console import Console

    from oracle.cli.render import plain
    from oracle.reports.trials import NoTrials, gather, unsigned_report

    # Messages on stderr: stdout holds the report alone, whatever its format.
    c = Console(stderr=True, highlight=False, soft_wrap=True)
    if fmt not in FORMATS:
        c.print(f"[red]error:[/red] --format must be {', '.join(FORMATS)}, not {plain(fmt)}")
        raise typer.Exit(USAGE)
    missing = [p for p in paths if not p.exists()]
    if missing:
        c.print(f"[red]error:[/red] no such folder: {plain(', '.join(map(str, missing)))}")
        raise typer.Exit(USAGE)
    if out is not None:
        inside = [p for p in paths if out.resolve().is_relative_to(p.resolve())]
        if inside:
            c.print(
                f"[red]error:[/red] {plain(out)} is inside {plain(inside[0])}: put the report "
                "elsewhere (the trial folders are read, never written)"
            )
            raise typer.Exit(USAGE)
    try:
        gathered = gather(paths)
    except NoTrials as exc:
        c.print(f"[red]error:[/red] {plain(exc)}")
        raise typer.Exit(USAGE) from None
    refused = gathered.refused
    for where, why in refused.items():
        c.print(
            f"[red]left out[/red] {plain(where)}: {plain(why)}", highlight=False, soft_wrap=True
        )
    controls = len(gathered.excluded) - len(refused)
    if controls:
        c.print(f"{controls} control runs left out (scripted, not agents' trials)")
    if not gathered.trials and not refused:
        c.print(
            "[red]error:[/red] only control runs under "
            f"{plain(', '.join(map(str, paths)))}: no agent's trial to report"
        )
        raise typer.Exit(USAGE)
    if not gathered.trials:
        c.print("[red]no trial folder verified: no report was made[/red]")
        raise typer.Exit(FAILED)
    report = unsigned_report(gathered, title=title)
    if out is not None:
        from oracle.reports.pages import write_unsigned

        try:
            written = write_unsigned(report, out)
        except (FileExistsError, OSError) as exc:
            c.print(f"[red]error:[/red] {plain(exc)}")
            raise typer.Exit(USAGE) from None
        c.print(
            f"[yellow]unsigned[/yellow] report of {len(gathered.trials)} trial folders "
            f"({report.invalid} invalid executions): "
            + ", ".join(plain(p) for p in written.values())
        )
    else:
        _print(report, fmt)
    if refused:
        raise typer.Exit(FAILED)


def _print(report: Report, fmt: str) -> None:
    """The report on stdout as it is (no markup, no wrapping)."""
    import sys

    from oracle.reports.html import html_page
    from oracle.reports.markdown import markdown
    from oracle.reports.trials import text_summary

    if fmt == "json":
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(markdown(report))
    elif fmt == "html":
        sys.stdout.write(html_page(report))
    else:
        sys.stdout.write(text_summary(report))
