"""How a command ends: its exit code, its problems and, with ``--json``, its one document.

A command that offers ``--json`` is decorated with `json_command`; its body fills the document
(`current`) as it goes, and reports what keeps it from exiting 0 with `fail` (prints ``error:
…`` as it is, notes it, and gives the exit to raise) or `problem` (notes it). With ``--json``,
everything the command and its children write to stdout goes to stderr while it runs, and the
document alone is written to stdout when it ends, with the exit code it ends with.

This module imports only the standard library and typer, so that the commands' module stays
quick to import; the document models live in `oracle.cli.output` (those of `controls` and
`reduce` in `oracle.cli.output_controls` and `oracle.cli.output_reduce`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from oracle.cli.exits import FAILED, INTERRUPTED, OK, USAGE

if TYPE_CHECKING:
    from oracle.cli.output import Output

F = TypeVar("F", bound=Callable[..., None])

#: The ``--json`` option of every command that has a document.
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="write one JSON document to stdout; messages go to stderr (docs/cli.md)"
    ),
]

_CURRENT: ContextVar[Output | None] = ContextVar("oracle_cli_output", default=None)


def current[D: Output](kind: type[D]) -> D:
    """The document of the running command, as the model `kind` it must be."""
    doc = _CURRENT.get()
    if not isinstance(doc, kind):
        raise RuntimeError(f"no {kind.__name__} is being written (got {type(doc).__name__})")
    return doc


def document() -> Output | None:
    """The document of the running command (None outside one)."""
    return _CURRENT.get()


def problem(message: str) -> None:
    """Note a reason the command does not exit 0 in its document (if it has one)."""
    doc = _CURRENT.get()
    if doc is not None:
        doc.problems.append(message)


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """Print ``error: <message>`` (as it is, never as markup), note it, and return the exit to
    raise: ``raise fail(f"no such path: {path}")``."""
    from oracle.cli.render import console, plain

    console().print(f"[red]error:[/red] {plain(message)}", highlight=False, soft_wrap=True)
    problem(message)
    return typer.Exit(code)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """While it lasts, whatever this process or a child it starts writes to stdout goes to
    stderr: stdout is kept for the one document."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):  # stdout is no file (a test's runner)
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    os.dup2(sys.stderr.fileno(), fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, fd)
        os.close(saved)


@contextlib.contextmanager
def command_output(doc: Output, as_json: bool) -> Iterator[Output]:
    """Run a command body that fills `doc`; with `as_json`, write `doc`, with the exit code
    the body ends with, to stdout when it ends, and send everything else to stderr."""
    token = _CURRENT.set(doc)
    code = OK
    try:
        with _stdout_to_stderr() if as_json else contextlib.nullcontext():
            try:
                yield doc
            except typer.Exit as exc:
                code = exc.exit_code
                raise
            except KeyboardInterrupt:
                code = INTERRUPTED
                problem("interrupted")
                raise typer.Exit(INTERRUPTED) from None
            except Exception as exc:  # a bug of ours: its traceback follows on stderr
                code = FAILED
                problem(f"the command broke: {exc!r}")
                raise
    finally:
        _CURRENT.reset(token)
        doc.exit_code = code
        if as_json:
            sys.stdout.write(doc.model_dump_json(indent=2) + "\n")
            sys.stdout.flush()


def json_command(command: str) -> Callable[[F], F]:
    """Give a command its document (the model `oracle.cli.output.model(command)`): the
    decorated function takes ``as_json`` (the ``--json`` option) as a keyword."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> None:
            from oracle.cli.output import model

            with command_output(model(command)(), bool(kwargs.get("as_json"))):
                fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate
