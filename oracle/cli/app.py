"""The `oracle` command: a thin layer over the library.

oracle trial tasks/demo --agent careful --agent obedient
oracle controls tasks/demo
oracle check tasks/demo
oracle show runs/…/<trial folder>       # checked against its manifest first
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from oracle.base.errors import UsageError as UsageError
from oracle.base.interrupts import StopOnce
from oracle.cli import completion
from oracle.cli.exits import FAILED, INTERRUPTED, USAGE, epilog
from oracle.cli.help import ReadableGroup
from oracle.cli.outcome import JsonOpt, json_command
from oracle.cli.running import make_scorer, trial_or_broken

# Only typer, the standard library and the small modules above (errors, exit codes, help) are
# imported here, so that `oracle --help` and shell completion answer at once: each command
# imports what it uses (a test holds this).
if TYPE_CHECKING:
    from rich.progress import Progress

    from oracle.agents.spec import RunOptions
    from oracle.authoring.loader import Loaded
    from oracle.authoring.task import Task
    from oracle.cli.parallel import Plan
    from oracle.controls.run import ControlsReport
    from oracle.evidence.record import TrialRecord
    from oracle.scoring.scorer import Scorer
    from oracle.trial.agent import Agent

#: Names this module held before its imports became lazy, and where they live now.
_REEXPORTED = {
    "BUILTIN_AGENTS": "oracle.agents.spec",
    "ISOLATIONS": "oracle.agents.spec",
    "RunOptions": "oracle.agents.spec",
    "resolve_agent": "oracle.agents.spec",
}

#: `oracle.controls.run.DEFAULT_TIMEOUT`, written out so that the option's default needs no
#: import (a test holds the two equal).
CONTROL_TIMEOUT = 60.0


def __getattr__(name: str) -> Any:
    """The names above, imported when first asked for (``from oracle.cli.app import
    resolve_agent`` keeps working)."""
    source = _REEXPORTED.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(source), name)


app = typer.Typer(
    cls=ReadableGroup,
    # Our own --show-completion, which takes the shell: typer's guesses it.
    add_completion=False,
    no_args_is_help=True,
    help="Decide what an agent did from the state of the world it acted in.",
    epilog=epilog(),
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        import platform
        from importlib.metadata import version

        print(f"oracle {version('oracle')} (Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
    show_completion: Annotated[
        str | None,
        typer.Option(
            "--show-completion",
            callback=completion.print_script,
            is_eager=True,
            expose_value=False,
            metavar="SHELL",
            help="print the completion script of SHELL (bash, zsh, fish, powershell) and "
            "exit; see docs/cli.md to install it",
        ),
    ] = None,
) -> None:
    """Decide what an agent did from the state of the world it acted in."""


def limit_tasks(
    tasks: list[Task], disk: str | None, processes: str | None, memory: str | None
) -> None:
    """Set the limits given on the command line (``--disk-limit 8MiB``, ``--process-limit
    none``) on every task, in place of its own; a `UsageError` naming the option that cannot
    be used."""
    from oracle.authoring.limits import Limits, LimitsError

    changes: dict[str, int | str | None] = {}
    for option, part, value in (
        ("--disk-limit", "disk", disk),
        ("--process-limit", "processes", processes),
        ("--memory-limit", "memory", memory),
    ):
        if value is None:
            continue
        if value.strip().lower() == "none":
            changes[part] = None
        elif part == "processes":
            if not value.strip().isdigit():
                raise UsageError(f"{option} takes a whole number or 'none', not {value!r}")
            changes[part] = int(value)
        else:
            changes[part] = value
        try:
            Limits().replaced(**{part: changes[part]}).check()
        except LimitsError as exc:
            raise UsageError(f"{option}: {exc}") from None
    if changes:
        for t in tasks:
            t.limits = t.limits.replaced(**changes).check()


def _report_load_errors(loaded: Loaded) -> None:
    from oracle.cli.render import console, plain

    out = console()
    for e in loaded.errors:
        out.print(f"[red]could not load[/red] {plain(e)}")


def _available(tasks: list[Task]) -> tuple[list[Task], list[str], dict[str, str]]:
    """The tasks whose servers are reachable, a problem per skipped task when
    ORACLE_REQUIRE_SERVICES=1 (else skipping is not a failure), and every skipped task with
    why, for the tables. Prints each skip."""
    from oracle.cli.render import console, plain
    from oracle.fixtures.services import REQUIRE_ENV, required, unreachable

    kept: list[Task] = []
    problems: list[str] = []
    skipped: dict[str, str] = {}
    for t in tasks:
        missing = unreachable(t)
        if not missing:
            kept.append(t)
            continue
        why = "; ".join(missing)
        if required():
            console().print(
                f"[red]cannot run[/red] {plain(t.name)}: {plain(why)} ({plain(REQUIRE_ENV)}=1)"
            )
            problems.append(f"{t.name}: {why}")
            skipped[t.name] = f"not run ({REQUIRE_ENV}=1): {why}"
        else:
            console().print(f"[yellow]skipped[/yellow] {plain(t.name)}: {plain(why)}")
            skipped[t.name] = f"skipped: {why}"
    return kept, problems, skipped


def _contained(records: list[TrialRecord]) -> list[str]:
    """Every predicate a scorer had to contain (it ran past its limit, exited, crashed),
    named with its trial."""
    return [
        f"{r.cell.id}: {why}"
        for r in records
        if r.scoring is not None
        for why in r.scoring.contained
    ]


def _default_out() -> Path:
    return Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from oracle.cli.render import console

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(),
        transient=True,
    )


@contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C stops the run: what is archived stays, the scorer processes are ended, and the
    command exits 130."""
    from oracle.cli.render import console

    try:
        yield
    except KeyboardInterrupt:
        console().print("[red]interrupted[/red]: the archives written so far are kept")
        raise typer.Exit(INTERRUPTED) from None


def _checked(tasks: list[Task]) -> tuple[list[Task], list[str]]:
    from oracle.authoring.check import check_task

    ok: list[Task] = []
    refused: list[str] = []
    for t in tasks:
        issues = check_task(t)
        if issues:
            refused.extend(str(i) for i in issues)
        else:
            ok.append(t)
    return ok, refused


def _held_trials(
    out: Path, tasks: list[Task], agents: list[Agent], repetitions: int, model: str, profile: str
) -> list[str]:
    """The archive folders under `out` that trials of these tasks and agents would write, and
    that hold an archive already."""
    from oracle.evidence.record import Cell

    return [
        cell.folder
        for task in tasks
        for agent in agents
        for rep in range(repetitions)
        for cell in [
            Cell(harness=agent.name, task=task.name, repetition=rep, model=model, profile=profile)
        ]
        if (out / cell.folder).exists()
    ]


def run_trials(
    tasks: list[Task],
    agents: list[Agent],
    out: Path,
    repetitions: int,
    model: str,
    profile: str,
    options: RunOptions | None = None,
    broken: list[str] | None = None,
    scorer: Scorer | None = None,
) -> list[TrialRecord]:
    """Every trial's record; a trial that fails outside its own error boundaries is named in
    `broken` (and printed) and the others still run."""
    from oracle.evidence.archive import deferred_sync

    records = []
    broken = [] if broken is None else broken
    total = len(tasks) * len(agents) * repetitions
    with deferred_sync(), _progress() as progress:
        bar = progress.add_task("trials", total=total)
        for task in tasks:
            for agent in agents:
                for rep in range(repetitions):
                    progress.update(bar, description=f"{task.name} × {agent.name}")
                    record, why = trial_or_broken(
                        task, agent, out, rep, scorer, model, profile, options
                    )
                    if record is not None:
                        records.append(record)
                    if why is not None:
                        broken.append(why)
                    progress.advance(bar)
    return records


def run_all_controls(
    tasks: list[Task],
    out: Path | None,
    timeout: float = CONTROL_TIMEOUT,
    scorer: Scorer | None = None,
) -> ControlsReport:
    from oracle.controls.run import ControlsReport, controls_of, prove
    from oracle.evidence.archive import deferred_sync

    report = ControlsReport()
    with deferred_sync(), _progress() as progress:
        bar = progress.add_task("controls", total=sum(len(controls_of(t)) for t in tasks))
        for task in tasks:
            progress.update(bar, description=f"controls of {task.name}")
            _merge(report, prove(task, out=out, timeout=timeout, scorer=scorer))
            progress.advance(bar, len(controls_of(task)))
    return report


def _merge(report: ControlsReport, one: ControlsReport) -> None:
    report.runs.extend(one.runs)
    report.statuses.extend(one.statuses)
    report.errors.extend(one.errors)
    report.flags.extend(one.flags)
    report.judges.extend(one.judges)


def side_by_side(
    tasks: list[Task], plan: Plan, jobs: int
) -> tuple[ControlsReport, list[TrialRecord], list[str]]:
    """`tasks` in `jobs` worker processes (`oracle.cli.parallel`): every task's controls and
    the plan's demo trials, merged in the order of `tasks`, with a bar of the tasks done."""
    from oracle.cli import parallel
    from oracle.controls.run import ControlsReport

    report = ControlsReport()
    records: list[TrialRecord] = []
    broken: list[str] = []
    with _progress() as progress:
        what = "controls and demo trials" if plan.agents else "controls"
        bar = progress.add_task(
            f"{what}: {len(tasks)} tasks, {jobs} side by side", total=len(tasks)
        )
        for one in parallel.side_by_side(tasks, plan, jobs, lambda _: progress.advance(bar)):
            _merge(report, one.report)
            records.extend(one.records)
            broken.extend(one.broken)
    return report, records, broken


DEMO_AGENTS = ("careful", "obedient")


def _plan(
    tasks: list[Task], scorer: str, hidden: list[Path], out: Path | None, timeout: float
) -> Plan:
    from oracle.cli.parallel import Plan

    files = tuple(dict.fromkeys(t.origin for t in tasks if t.origin is not None))
    return Plan(files, scorer, tuple(hidden), out, timeout)


def _jobs(jobs: int | None, tasks: list[Task]) -> int:
    """How many workers `--jobs` asks for: 1 (this process) where a task has no file to load
    in a worker."""
    from oracle.cli.parallel import default_jobs

    if any(t.origin is None for t in tasks):
        return 1
    return default_jobs(len(tasks)) if jobs is None else max(1, min(jobs, len(tasks)))


PathsArg = Annotated[
    list[Path], typer.Argument(help="task files (task_*.py) or folders of them", metavar="PATH")
]
TaskOpt = Annotated[
    list[str] | None,
    typer.Option("--task", "-t", help="only the task with this name (repeat)", metavar="NAME"),
]
ScorerOpt = Annotated[
    str,
    typer.Option(
        "--scorer",
        help="where predicates run: sealed (a process that never holds the transcript, "
        "handed only the evidence, contained by bubblewrap where it exists; each predicate "
        "has a time limit), container (the same in a container of a Docker engine: no "
        "network, read-only, only the task folders mounted; its image is built once) or "
        "in-process (for debugging a predicate; no time limit)",
        metavar="KIND",
    ),
]


@app.command()
@json_command("trial")
def trial(
    paths: PathsArg,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="careful, obedient, noop, 'cmd:<command line>', module:function or "
            "file.py:function (a function of the sandbox view, an AgentDojo pipeline, or a "
            "function of no arguments that builds one; repeat for several)",
            metavar="AGENT",
        ),
    ] = None,
    name: Annotated[
        list[str] | None,
        typer.Option(
            "--name",
            help="the name the --agent at the same place goes by in the cells, the archive "
            "folders and the tables, in place of its spec (e.g. a command line; repeat, one "
            "per --agent)",
            metavar="NAME",
        ),
    ] = None,
    task: TaskOpt = None,
    out: Annotated[Path | None, typer.Option(help="archive folder (default runs/<time>)")] = None,
    repetitions: Annotated[
        int,
        typer.Option(
            "--repetitions", "-n", min=1, help="trials of each task × agent", metavar="COUNT"
        ),
    ] = 1,
    model: Annotated[
        str, typer.Option(help="model name recorded in the cell", metavar="NAME")
    ] = "none",
    profile: Annotated[
        str, typer.Option(help="profile name recorded in the cell", metavar="NAME")
    ] = "default",
    no_check: Annotated[bool, typer.Option("--no-check", help="skip `oracle check`")] = False,
    allow_unproven: Annotated[
        bool,
        typer.Option(
            "--allow-unproven",
            help="exit 0 also when a task's controls do not prove it (its verdicts are still "
            "marked not measured), e.g. while writing the task",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(help="seconds a command agent may run before it is killed", metavar="SECONDS"),
    ] = 600.0,
    isolation: Annotated[
        str,
        typer.Option(
            help="how command agents run: bwrap (isolated here), container (in a Docker "
            "container of --image, where an engine exists) or none (nothing contained)",
            metavar="MODE",
        ),
    ] = "bwrap",
    image: Annotated[
        str | None,
        typer.Option(help="the container image of --isolation container", metavar="IMAGE"),
    ] = None,
    pass_env: Annotated[
        list[str] | None,
        typer.Option(
            "--pass-env",
            help="host environment variable a command agent gets (e.g. its model API key; repeat)",
            metavar="VAR",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="host the egress recorder passes through (and still records), e.g. the "
            "agent's model API (repeat)",
            metavar="HOST",
        ),
    ] = None,
    readable: Annotated[
        list[Path] | None,
        typer.Option(
            "--readable",
            help="file or folder an isolated command agent may read besides the system's "
            "folders and its own program's (e.g. its configuration; repeat)",
        ),
    ] = None,
    disk_limit: Annotated[
        str | None,
        typer.Option(
            "--disk-limit",
            help="size of the agent folder for every task, e.g. 8MiB or 4GiB, or 'none' "
            "(default: each task's own, 1 GiB unless it says otherwise)",
            metavar="SIZE",
        ),
    ] = None,
    process_limit: Annotated[
        str | None,
        typer.Option(
            "--process-limit",
            help="processes (and threads) an isolated command agent may have at once, or "
            "'none' (default: each task's own, 512 unless it says otherwise)",
            metavar="COUNT",
        ),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            "--memory-limit",
            help="memory of an isolated command agent's processes together, e.g. 512MiB, or "
            "'none' (default: each task's own, 2 GiB unless it says otherwise)",
            metavar="SIZE",
        ),
    ] = None,
    scorer: ScorerOpt = "sealed",
    as_json: JsonOpt = False,
) -> None:
    """Run agents on tasks; print the verdicts and archive every trial.

    Exits 1 when a verdict is not reached (unknown), a task's controls do not prove its
    predicates (none saved, or saved for other code: run `oracle controls`; not with
    --allow-unproven), a task is refused by `oracle check`, a trial breaks outside its own
    error boundaries, or a predicate had to be contained (it ran past its time limit, exited
    or crashed its scorer); 2 on a usage error or a task file that cannot be loaded (the
    other tasks still run; a path that does not exist runs nothing); 130 when interrupted."""
    from oracle.agents.alias import aliased
    from oracle.agents.spec import RunOptions, resolve_agent
    from oracle.cli.loading import exit_if_load_errors, load
    from oracle.cli.outcome import fail
    from oracle.cli.render import console, plain
    from oracle.cli.verdicts import finish_trials
    from oracle.evidence.archive import private_folders

    options = RunOptions(
        timeout=timeout,
        isolation=isolation,
        pass_env=tuple(pass_env or ()),
        allow_hosts=tuple(allow_host or ()),
        image=image,
        readable=tuple(readable or ()),
    )
    loaded = load(paths, task)
    try:
        agents = [resolve_agent(a, options) for a in (agent or ["careful"])]
        agents = aliased(agents, name or [])
        limit_tasks(loaded.tasks, disk_limit, process_limit, memory_limit)
    except UsageError as exc:
        raise fail(str(exc)) from None
    tasks, refused = (loaded.tasks, []) if no_check else _checked(loaded.tasks)
    for msg in refused:
        console().print(f"[red]refused by check:[/red] {plain(msg)}")
    tasks, down, skipped = _available(tasks)
    refused += down
    out = out or _default_out()
    held = _held_trials(out, tasks, agents, repetitions, model, profile)
    if held:
        raise fail(
            f"{out} already holds {len(held)} of these trials "
            f"({', '.join(held[:5])}{', …' if len(held) > 5 else ''}): nothing was "
            "run. Choose another --out (by default a new folder runs/<time>), or remove those "
            "archives"
        )
    broken: list[str] = []
    try:
        judge = make_scorer(scorer, private_folders(out), tasks)
    except UsageError as exc:
        raise fail(str(exc)) from None
    with _interruptible():
        records = run_trials(
            tasks, agents, out, repetitions, model, profile, options, broken, judge
        )
    code = finish_trials(
        records,
        out,
        refused=refused,
        skipped=skipped,
        broken=broken,
        contained=_contained(records),
        allow_unproven=allow_unproven,
    )
    exit_if_load_errors(loaded, again=True)
    if code:
        raise typer.Exit(code)


@app.command()
@json_command("controls")
def controls(
    paths: PathsArg,
    task: TaskOpt = None,
    out: Annotated[Path | None, typer.Option(help="also archive every control trial here")] = None,
    report_only: Annotated[
        bool,
        typer.Option(
            "--report-only",
            help="exit 0 even when a control misbehaves (a task file that cannot be loaded "
            "still exits 2)",
        ),
    ] = False,
    explain: Annotated[
        list[str] | None,
        typer.Option(
            "--explain",
            help="show, for each control of this task, the diff it "
            "produced and the predicates that fired (repeat for several)",
            metavar="NAME",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(help="seconds each control may run before it is killed", metavar="SECONDS"),
    ] = CONTROL_TIMEOUT,
    scorer: ScorerOpt = "sealed",
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="tasks run side by side, each in a worker process of its own (its controls "
            "stay together); 1 runs them one after another in this process",
            metavar="N",
            min=1,
        ),
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Run every control of every task (and a no-op agent) and classify each predicate:
    proven, untested, trigger-happy, constant, weak, broken or unsupported (it reads evidence
    the task's runs do not have). Controls derived from the task's own run beside them:
    compositions, evasion variants of a breach that moves a declared secret, near-miss
    mutants (each predicate's mutation score is shown) and, where the task declares an
    expected reply, a no-op that answers it. The result is saved beside each task file.

    Exits 1 when a control misbehaves or a predicate is not proven (0 with --report-only), and
    2 when a task file cannot be loaded (its error is printed; the tasks that did load still
    run; a path that does not exist runs nothing) or an option names no such task."""
    from oracle.cli.loading import exit_if_load_errors, load
    from oracle.cli.outcome import fail
    from oracle.cli.proving import finish_controls
    from oracle.evidence.archive import private_folders

    loaded = load(paths, task)
    try:
        for name in explain or ():
            loaded.by_name(name)
    except KeyError as exc:
        raise fail(str(exc.args[0])) from None
    tasks, down, skipped = _available(loaded.tasks)
    hidden = private_folders(out) if out else []
    workers = _jobs(jobs, tasks)
    try:
        judge = make_scorer(scorer, hidden, tasks, warm=workers == 1)
    except UsageError as exc:
        raise fail(str(exc)) from None
    with _interruptible():
        if workers > 1:
            plan = _plan(tasks, scorer, hidden, out, timeout)
            report, _, _ = side_by_side(tasks, plan, workers)
        else:
            report = run_all_controls(tasks, out, timeout, judge)
    report.errors.extend(down)
    report.skipped.update(skipped)
    code = finish_controls(report, explain or (), report_only)
    # Not a control that misbehaved: the tasks were never there to prove (repeated here,
    # below the tables, so a long run does not bury it).
    exit_if_load_errors(loaded, again=True)
    if code:
        raise typer.Exit(code)


@app.command()
@json_command("check")
def check(paths: PathsArg, task: TaskOpt = None, as_json: JsonOpt = False) -> None:
    """Refuse predicates that reach for the agent's own account (DESIGN §3).

    Exits 1 when a predicate is refused, 2 when a task file cannot be loaded."""
    from oracle.cli.checking import check_tasks
    from oracle.cli.loading import exit_if_load_errors, load

    loaded = load(paths, task)
    refused = check_tasks(loaded.tasks)
    exit_if_load_errors(loaded)
    if refused:
        raise typer.Exit(FAILED)


@app.command()
@json_command("show")
def show(
    record: Annotated[
        Path,
        typer.Argument(
            help="a trial's archive folder, its record.json, or a signed cell archive (.tar.gz)",
            metavar="PATH",
        ),
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            help="for a signed cell archive: the public key that signed it (default: "
            "oracle.pub in $XDG_CONFIG_HOME/oracle/keys, or ~/.config/oracle/keys)"
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one trial: verdicts with their reasons, findings and the diff.

    Nothing is shown before it is checked: a trial folder against its manifest.sha256 (a file
    whose digest differs, a file missing or one the manifest does not list is named, and the
    command exits 1), a cell archive against its signature and every rule of the reducer.
    Exits 2 when PATH does not exist or is no trial record, or the key cannot be read."""
    from oracle.cli.outcome import current, fail, problem
    from oracle.cli.output import ShowOutput
    from oracle.cli.render import console, plain, record_panel
    from oracle.evidence.archive import ArchiveError, read_verified
    from oracle.evidence.record import TrialRecord
    from oracle.matrix.cell_archive import SUFFIX

    doc = current(ShowOutput)
    doc.source = str(record)
    if not record.exists():
        raise fail(f"{record}: does not exist")
    c = console()
    if record.name.endswith(SUFFIX) and not record.is_dir():
        rec = _verified_cell(record, key)
        doc.verified = "signature"
    else:
        folder, name = (record, "record.json") if record.is_dir() else (record.parent, record.name)
        try:
            data = read_verified(folder, name)
        except ArchiveError as exc:
            for line in str(exc).splitlines():
                c.print(f"[red]does not verify:[/red] {plain(line)}", highlight=False)
                problem(f"does not verify: {line}")
            c.print(
                f"[red]{plain(folder)}: not shown: its files do not match manifest.sha256[/red]"
            )
            raise typer.Exit(1) from None
        except OSError as exc:
            raise fail(f"cannot read {folder / name}: {exc}") from None
        try:
            rec = TrialRecord.model_validate_json(data)
        except ValueError as exc:
            raise fail(f"{folder / name} is not a trial record: {exc}") from None
        doc.verified = "manifest"
    doc.record = rec
    c.print(record_panel(rec))


def _verified_cell(path: Path, key: Path | None) -> TrialRecord:
    """The record of a signed cell archive that passes its signature and every reading rule;
    otherwise the rule is named and the command exits 1 (2 for a key that cannot be read)."""
    from oracle.base.signing import KeyFileError, default_public_key, load_public_key
    from oracle.cli.outcome import fail, problem
    from oracle.cli.render import console, plain
    from oracle.matrix.cell_archive import Rejected, open_cell

    c = console()
    try:
        public = load_public_key(key or default_public_key())
    except KeyFileError as exc:
        raise fail(str(exc)) from None
    try:
        return open_cell(path, public).record
    except Rejected as exc:
        c.print(
            f"[red]does not verify:[/red] {plain(path)}: {plain(exc.rule)}: {plain(exc.detail)}",
            highlight=False,
        )
        problem(f"does not verify: {path}: {exc.rule}: {exc.detail}")
        c.print(f"[red]{plain(path)}: not shown[/red]")
        raise typer.Exit(1) from None


@app.command()
def rescore(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="trial folders, run folders or matrix outputs (their .tar.gz cells)",
            metavar="PATH",
        ),
    ],
    tasks: Annotated[
        list[Path],
        typer.Option(
            "--tasks", help="task files or folders whose predicates to run again (repeat)"
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="where the new archives go (default: beside each PATH, as <PATH>.rescore-<time>)"
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            help="for signed cells (a matrix output): the public key that signed them "
            "(default: oracle.pub in the default key folder)"
        ),
    ] = None,
    scorer: ScorerOpt = "sealed",
) -> None:
    """Run the (possibly edited) predicates of tasks again on archived trials, without
    running any agent. Each archive is checked first (a trial folder against its manifest, a
    signed cell against its signature and every rule of the reducer). Each new record is
    archived beside the old one, never over it, with the old and new verdicts side by side; a
    task whose code changed is not counted until `oracle controls` proves it again.

    Exits 1 when an archive cannot be read or rescored, or a predicate had to be contained;
    2 on a usage error (a task file that cannot be loaded)."""
    from rich.markup import escape

    from oracle.authoring.loader import load_tasks
    from oracle.base.signing import KeyFileError, default_public_key, load_public_key
    from oracle.cli.render import console, plain, rescore_table
    from oracle.matrix.rescore import RescoreError, output_folders
    from oracle.matrix.rescore import rescore as run_rescore

    loaded = load_tasks(tasks)
    if loaded.errors:
        _report_load_errors(loaded)
        raise typer.Exit(2)
    missing = [p for p in paths if not p.exists()]
    if missing:
        console().print(f"[red]error:[/red] no such archive: {plain(', '.join(map(str, missing)))}")
        raise typer.Exit(2)
    public = None
    key_path = key or default_public_key()
    if key is not None or key_path.is_file():
        try:
            public = load_public_key(key_path)
        except KeyFileError as exc:
            console().print(f"[red]error:[/red] {plain(exc)}")
            raise typer.Exit(2) from None
    targets = output_folders(paths, out)
    # The archives hold the transcripts: the scorer sees neither them nor what it writes.
    hidden = [p.absolute() for p in [*paths, *targets]]
    try:
        judge = make_scorer(scorer, hidden, loaded.tasks)
    except UsageError as exc:
        console().print(f"[red]error:[/red] {plain(exc)}")
        raise typer.Exit(2) from None
    try:
        with _interruptible():
            results = run_rescore(paths, loaded, judge, outs=targets, public=public)
    except RescoreError as exc:
        console().print(f"[red]error:[/red] {plain(exc)}")
        raise typer.Exit(2) from None
    c = console()
    c.print(rescore_table(results))
    for where in targets:
        if any(r.folder is not None and where in r.folder.parents for r in results):
            c.print(f"rescored archives: {where}")
    failed = [r for r in results if r.error or r.new is None]
    contained = _contained([r.new for r in results if r.new is not None])
    for why in contained:
        c.print(f"[red]predicate contained:[/red] {escape(why)}")
    if not results:
        c.print("[yellow]no archived trials found[/yellow]")
    if failed or contained or not results:
        raise typer.Exit(1)


@app.command("list")
@json_command("list")
def list_tasks(paths: PathsArg, as_json: JsonOpt = False) -> None:
    """List the tasks under PATHS with their sinks and controls.

    Exits 2 when a task file cannot be loaded (the tasks that did load are listed)."""
    from oracle.cli.checking import list_loaded
    from oracle.cli.loading import exit_if_load_errors, load

    loaded = load(paths)
    list_loaded(loaded.tasks)
    exit_if_load_errors(loaded)


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="folder to write into")] = Path("schemas"),
) -> None:
    """Write the JSON schemas of the trial record, the report and every --json document.

    Into OUT: record.schema.json, report.schema.json and cli/<command>.schema.json."""
    from oracle.cli.output import cli_schemas
    from oracle.cli.render import console, plain
    from oracle.evidence.record import record_schema
    from oracle.reports.model import report_schema

    schemas = {"record.schema.json": record_schema(), "report.schema.json": report_schema()}
    schemas |= {f"cli/{name}.schema.json": one for name, one in cli_schemas().items()}
    for name, one in schemas.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(one, indent=2, sort_keys=True) + "\n")
        console().print(f"wrote {plain(target)}", highlight=False)


@app.command("demo")
def demo_command(
    paths: PathsArg,
    out: Annotated[Path | None, typer.Option(help="archive folder")] = None,
    scorer: ScorerOpt = "sealed",
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="tasks run side by side, each in a worker process of its own (its controls "
            "and demo trials stay together; default: one per processor); 1 runs them one "
            "after another in this process",
            metavar="N",
            min=1,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run both demo agents and every control; check that each behaves as promised.

    Exits 1 when one does not, 2 when a task file cannot be loaded."""
    from oracle.agents.spec import resolve_agent
    from oracle.cli.loading import load
    from oracle.cli.render import console, controls_tables, plain, summary_table, verdict_table
    from oracle.evidence.archive import private_folders

    loaded = load(paths)
    tasks, refused = _checked(loaded.tasks)
    for msg in refused:
        console().print(f"[red]refused by check:[/red] {plain(msg)}")
    tasks, down, skipped = _available(tasks)
    refused += down
    out = out or _default_out()
    agents = [resolve_agent(name) for name in DEMO_AGENTS]
    workers = _jobs(jobs, tasks)
    try:
        judge = make_scorer(scorer, private_folders(out), tasks, warm=workers == 1)
    except UsageError as exc:
        console().print(f"[red]error:[/red] {plain(exc)}")
        raise typer.Exit(2) from None
    broken: list[str] = []
    with _interruptible():
        if workers > 1:
            plan = _plan(tasks, scorer, private_folders(out), out / "controls", CONTROL_TIMEOUT)
            plan = dataclasses.replace(plan, agents=DEMO_AGENTS, trials_out=out / "trials")
            report, records, broken = side_by_side(tasks, plan, workers)
        else:
            report = run_all_controls(tasks, out / "controls", scorer=judge)
            records = run_trials(
                tasks, agents, out / "trials", 1, "none", "default", broken=broken, scorer=judge
            )
    report.skipped.update(skipped)
    c = console()
    c.print(verdict_table(records, "Demo agents", skipped))
    c.print(summary_table(records))
    for table in controls_tables(report):
        c.print(table)
    problems = list(refused) + [str(e) for e in loaded.errors] + report.errors + report.flags
    problems += broken
    problems += [f"predicate contained: {why}" for why in _contained(records)]
    for r in records:
        if r.cell.harness == "obedient" and r.security_breached is not True:
            problems.append(f"{r.cell.task}: the obedient agent was not found breaching")
        if r.cell.harness == "careful" and r.security_breached is not False:
            problems.append(f"{r.cell.task}: the careful agent was not found safe")
        if r.utility_achieved is not True:
            problems.append(f"{r.cell.task}: {r.cell.harness} did not achieve the task")
        if r.not_measured:
            problems.append(
                f"{r.cell.task}: {r.cell.harness}'s verdicts are not measured: "
                + "; ".join(sorted(set(r.not_measured.values())))
            )
    problems += [
        f"control {r.task}/{r.control.name} misbehaved" for r in report.runs if not r.behaved
    ]
    problems += [
        f"{s.task}/{s.predicate}: {s.status} ({s.reason})"
        for s in report.statuses
        if s.status != "proven"
    ]
    c.print(f"archives: {plain(out)}")
    if problems:
        for p in problems:
            c.print(f"[red]✗[/red] {plain(p)}")
        raise typer.Exit(USAGE if loaded.errors else FAILED)
    c.print(
        "[green]✓ the obedient agent breaches every task, the careful one none; "
        "every control behaves and every predicate is proven[/green]"
    )


def _register_matrix_commands() -> None:
    from oracle.cli import matrix as cli_matrix

    app.add_typer(cli_matrix.matrix_app, name="matrix")
    app.add_typer(cli_matrix.keys_app, name="keys")
    app.add_typer(cli_matrix.report_app, name="report")
    app.command("reduce")(cli_matrix.reduce_command)


_register_matrix_commands()


def _register_view_command() -> None:
    from oracle.cli.view import view_command

    app.command("view")(view_command)


_register_view_command()


def main() -> None:
    completion.prepare()
    # The first Ctrl-C stops the command; the ones that follow while it ends its workers,
    # controls and sandboxes cannot cut that short (oracle.base.interrupts).
    StopOnce.install(note="oracle: stopping; ending the run's processes first")
    try:
        app(prog_name="oracle")
    finally:
        StopOnce.ignore_from_now()


if __name__ == "__main__":
    main()
    sys.exit(0)
