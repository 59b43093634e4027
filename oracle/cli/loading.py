"""Loading the tasks a command names, with one rule for every command.

- A path that does not exist, or ``--task`` naming no loaded task, is a usage error at once:
  nothing runs, the command exits 2 naming it.
- A task file that cannot be loaded is printed (and noted in the ``--json`` document); the
  tasks that did load still run, and the command exits 2 at the end (`exit_if_load_errors`).
  When no task loaded at all, it exits 2 at once.
"""

from __future__ import annotations

from pathlib import Path

import typer

from oracle.authoring.loader import Loaded, load_tasks
from oracle.cli.exits import USAGE
from oracle.cli.outcome import document, fail, problem
from oracle.cli.output import Loading
from oracle.cli.render import console, plain


def print_load_errors(loaded: Loaded) -> None:
    """Print each load error, as it is."""
    out = console()
    for e in loaded.errors:
        out.print(f"[red]could not load[/red] {plain(e)}", highlight=False, soft_wrap=True)


def load(paths: list[Path], only: list[str] | None = None) -> Loaded:
    """The tasks under `paths` (only those named in `only`, if given), by the rules above."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise fail(f"{', '.join(map(str, missing))}: does not exist")
    loaded = load_tasks(paths)
    doc = document()
    if isinstance(doc, Loading):
        doc.loaded(loaded)
    if only:
        names = {t.name for t in loaded.tasks}
        unknown = [n for n in only if n not in names]
        if unknown:
            print_load_errors(loaded)
            known = ", ".join(sorted(names)) or "none"
            raise fail(f"no task named {', '.join(unknown)} (loaded: {known})")
        loaded.tasks = [t for t in loaded.tasks if t.name in only]
    print_load_errors(loaded)
    if loaded.errors and not loaded.tasks:
        raise _load_failed(loaded)
    return loaded


def _load_failed(loaded: Loaded) -> typer.Exit:
    for e in loaded.errors:
        problem(f"could not load {e}")
    return typer.Exit(USAGE)


def exit_if_load_errors(loaded: Loaded, *, again: bool = False) -> None:
    """Exit 2 when a task could not be loaded (`again`: print the errors once more, below a
    long run's tables, so that they are not buried)."""
    if not loaded.errors:
        return
    if again:
        print_load_errors(loaded)
    raise _load_failed(loaded)
