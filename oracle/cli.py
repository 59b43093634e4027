"""The `oracle` command: a thin layer over the library.

oracle trial tasks/demo --agent careful --agent obedient
oracle controls tasks/demo
oracle check tasks/demo
oracle show runs/…/record.json
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from oracle import demo
from oracle.agent import Agent, CallableAgent, noop
from oracle.check import check_task
from oracle.controls import ControlsReport, classify, run_controls
from oracle.loader import Loaded, load_tasks
from oracle.record import Cell, TrialRecord, record_schema
from oracle.render import console, controls_tables, record_panel, summary_table, verdict_table
from oracle.task import Task
from oracle.trial import run_trial

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Decide what an agent did from the state of the world it acted in.",
)
BUILTIN_AGENTS = {"careful": demo.careful, "obedient": demo.obedient, "noop": noop}


class UsageError(Exception):
    pass


def resolve_agent(spec: str) -> Agent:
    """An agent from its name on the command line.

    ``careful``, ``obedient``, ``noop`` (built in); ``package.module:function`` or
    ``path/to/file.py:function`` (a Python callable of the sandbox view)."""
    if spec in BUILTIN_AGENTS:
        return CallableAgent(BUILTIN_AGENTS[spec], name=spec)
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise UsageError(
            f"unknown agent {spec!r}: use one of {', '.join(BUILTIN_AGENTS)}, "
            "'package.module:function' or 'file.py:function'"
        )
    try:
        if target.endswith(".py"):
            mspec = importlib.util.spec_from_file_location(Path(target).stem, target)
            if mspec is None or mspec.loader is None:
                raise ImportError(f"cannot load {target}")
            module = importlib.util.module_from_spec(mspec)
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        fn = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise UsageError(f"agent {spec!r}: {exc}") from exc
    if not callable(fn):
        raise UsageError(f"agent {spec!r} is not callable")
    return CallableAgent(fn, name=spec)


def _load(paths: list[Path], only: list[str] | None) -> Loaded:
    loaded = load_tasks(paths)
    if only:
        missing = [n for n in only if n not in {t.name for t in loaded.tasks}]
        if missing:
            known = ", ".join(t.name for t in loaded.tasks) or "none"
            raise UsageError(f"no task named {', '.join(missing)} (loaded: {known})")
        loaded.tasks = [t for t in loaded.tasks if t.name in only]
    return loaded


def _report_load_errors(loaded: Loaded) -> None:
    out = console()
    for e in loaded.errors:
        out.print(f"[red]could not load[/red] {e}")


def _default_out() -> Path:
    return Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(),
        transient=True,
    )


def _checked(tasks: list[Task]) -> tuple[list[Task], list[str]]:
    ok: list[Task] = []
    refused: list[str] = []
    for t in tasks:
        issues = check_task(t)
        if issues:
            refused.extend(str(i) for i in issues)
        else:
            ok.append(t)
    return ok, refused


def run_trials(
    tasks: list[Task], agents: list[Agent], out: Path, repetitions: int, model: str, profile: str
) -> list[TrialRecord]:
    records = []
    total = len(tasks) * len(agents) * repetitions
    with _progress() as progress:
        bar = progress.add_task("trials", total=total)
        for task in tasks:
            for agent in agents:
                for rep in range(repetitions):
                    progress.update(bar, description=f"{task.name} × {agent.name}")
                    cell = Cell(
                        harness=agent.name,
                        task=task.name,
                        repetition=rep,
                        model=model,
                        profile=profile,
                    )
                    records.append(run_trial(task, agent, cell=cell, out=out).record)
                    progress.advance(bar)
    return records


def run_all_controls(tasks: list[Task], out: Path | None) -> ControlsReport:
    report = ControlsReport()
    with _progress() as progress:
        bar = progress.add_task("controls", total=sum(len(t.controls) for t in tasks))
        for task in tasks:
            progress.update(bar, description=f"controls of {task.name}")
            runs, error = run_controls(task, out=out)
            if error:
                report.errors.append(error)
            report.runs.extend(runs)
            report.statuses.extend(classify(task, runs))
            progress.advance(bar, len(task.controls))
    return report


PathsArg = Annotated[list[Path], typer.Argument(help="task files (task_*.py) or folders of them")]
TaskOpt = Annotated[
    list[str] | None, typer.Option("--task", "-t", help="only the task with this name (repeat)")
]


@app.command()
def trial(
    paths: PathsArg,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="careful, obedient, noop, module:function or "
            "file.py:function (repeat for several)",
        ),
    ] = None,
    task: TaskOpt = None,
    out: Annotated[Path | None, typer.Option(help="archive folder (default runs/<time>)")] = None,
    repetitions: Annotated[int, typer.Option("--repetitions", "-n", min=1)] = 1,
    model: Annotated[str, typer.Option(help="model name recorded in the cell")] = "none",
    profile: Annotated[str, typer.Option(help="profile name recorded in the cell")] = "default",
    no_check: Annotated[bool, typer.Option("--no-check", help="skip `oracle check`")] = False,
) -> None:
    """Run agents on tasks; print the verdicts and archive every trial."""
    try:
        loaded = _load(paths, task)
        agents = [resolve_agent(a) for a in (agent or ["careful"])]
    except UsageError as exc:
        console().print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _report_load_errors(loaded)
    tasks, refused = (loaded.tasks, []) if no_check else _checked(loaded.tasks)
    for msg in refused:
        console().print(f"[red]refused by check:[/red] {msg}")
    out = out or _default_out()
    records = run_trials(tasks, agents, out, repetitions, model, profile)
    c = console()
    c.print(verdict_table(records))
    c.print(summary_table(records))
    c.print(f"archives: {out}")
    if loaded.errors or refused:
        raise typer.Exit(1)


@app.command()
def controls(
    paths: PathsArg,
    task: TaskOpt = None,
    out: Annotated[Path | None, typer.Option(help="also archive every control trial here")] = None,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="exit 0 even when a control misbehaves")
    ] = False,
) -> None:
    """Run every control of every task and show which predicates fired."""
    try:
        loaded = _load(paths, task)
    except UsageError as exc:
        console().print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _report_load_errors(loaded)
    report = run_all_controls(loaded.tasks, out)
    c = console()
    for table in controls_tables(report):
        c.print(table)
    for e in report.errors:
        c.print(f"[red]error:[/red] {e}")
    bad = (not report.ok) or bool(loaded.errors)
    if bad and not report_only:
        raise typer.Exit(1)


@app.command()
def check(paths: PathsArg, task: TaskOpt = None) -> None:
    """Refuse predicates that reach for the agent's own account (DESIGN §3)."""
    try:
        loaded = _load(paths, task)
    except UsageError as exc:
        console().print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    _report_load_errors(loaded)
    c = console()
    refused = 0
    for t in loaded.tasks:
        issues = check_task(t)
        refused += len(issues)
        for i in issues:
            c.print(f"[red]refused[/red] {i}")
        if not issues:
            c.print(f"[green]ok[/green] {t.name}")
    if refused or loaded.errors:
        raise typer.Exit(1)


@app.command()
def show(
    record: Annotated[Path, typer.Argument(help="a record.json or its archive folder")],
) -> None:
    """Show one trial: verdicts with their reasons, findings and the diff."""
    path = record / "record.json" if record.is_dir() else record
    try:
        rec = TrialRecord.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        console().print(f"[red]error:[/red] cannot read a record from {path}: {exc}")
        raise typer.Exit(2) from None
    console().print(record_panel(rec))


@app.command("list")
def list_tasks(paths: PathsArg) -> None:
    """List the tasks under PATHS with their sinks and controls."""
    loaded = load_tasks(paths)
    _report_load_errors(loaded)
    c = console()
    for t in loaded.tasks:
        kinds = ", ".join(f"{k.kind}" for k in t.controls) or "no controls"
        c.print(f"[bold]{t.name}[/bold]  ({t.source})")
        for s in t.sinks:
            c.print(f"    sink: {s.describe()}")
        c.print(f"    controls: {kinds}")
    if loaded.errors:
        raise typer.Exit(1)


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="folder to write into")] = Path("schemas"),
) -> None:
    """Write the JSON schemas of the trial record and the report."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "record.schema.json"
    target.write_text(json.dumps(record_schema(), indent=2, sort_keys=True) + "\n")
    console().print(f"wrote {target}")
    from oracle.report import report_schema

    target = out / "report.schema.json"
    target.write_text(json.dumps(report_schema(), indent=2, sort_keys=True) + "\n")
    console().print(f"wrote {target}")


@app.command("demo")
def demo_command(
    paths: PathsArg,
    out: Annotated[Path | None, typer.Option(help="archive folder")] = None,
) -> None:
    """Run both demo agents and every control; check that each behaves as promised."""
    loaded = load_tasks(paths)
    _report_load_errors(loaded)
    tasks, refused = _checked(loaded.tasks)
    for msg in refused:
        console().print(f"[red]refused by check:[/red] {msg}")
    out = out or _default_out()
    agents = [resolve_agent("careful"), resolve_agent("obedient")]
    records = run_trials(tasks, agents, out / "trials", 1, "none", "default")
    report = run_all_controls(tasks, out / "controls")
    c = console()
    c.print(verdict_table(records, "Demo agents"))
    c.print(summary_table(records))
    for table in controls_tables(report):
        c.print(table)
    problems = list(refused) + [str(e) for e in loaded.errors] + report.errors
    for r in records:
        if r.cell.harness == "obedient" and r.security_breached is not True:
            problems.append(f"{r.cell.task}: the obedient agent was not found breaching")
        if r.cell.harness == "careful" and r.security_breached is not False:
            problems.append(f"{r.cell.task}: the careful agent was not found safe")
        if r.utility_achieved is not True:
            problems.append(f"{r.cell.task}: {r.cell.harness} did not achieve the task")
    problems += [
        f"control {r.task}/{r.control.name} misbehaved" for r in report.runs if not r.behaved
    ]
    problems += [
        f"{s.task}/{s.predicate}: {s.status} ({s.reason})"
        for s in report.statuses
        if s.status != "proven"
    ]
    c.print(f"archives: {out}")
    if problems:
        for p in problems:
            c.print(f"[red]✗[/red] {p}")
        raise typer.Exit(1)
    c.print(
        "[green]✓ the obedient agent breaches every task, the careful one none; "
        "every control behaves and every predicate is proven[/green]"
    )


def _register_matrix_commands() -> None:
    from oracle import cli_matrix

    app.add_typer(cli_matrix.matrix_app, name="matrix")
    app.add_typer(cli_matrix.keys_app, name="keys")
    app.add_typer(cli_matrix.report_app, name="report")
    app.command("reduce")(cli_matrix.reduce_command)


_register_matrix_commands()


def main() -> None:
    app(prog_name="oracle")


if __name__ == "__main__":
    main()
    sys.exit(0)
