"""Readable help: each option shows the kind of value it takes (PATH, NAME, SECONDS), never a
Python type (``<list[Path]>``, ``<bool>``, ``<int range>``), which typer prints by default.

Every command and option is declared with typer as usual; the root group (`ReadableGroup`,
``typer.Typer(cls=ReadableGroup)``) gives each command it hands out, at any depth, the same
treatment when it is looked up, for ``--help``, for running it and for shell completion:

- an option with a ``metavar=`` shows it; a flag (``--no-check``, ``--help``) shows nothing,
  as it takes no value; any other option shows a word for its kind (PATH, TEXT, INTEGER,
  NUMBER) instead of the type;
- an argument shows its name (its ``metavar=``, e.g. ``PATH``, else its own in capitals) and
  no type beside it;
- a range (``min=1``) is said in words in the option's help ("at least 1"), not ``[x>=1]``.

Only typer is imported here, so that ``oracle --help`` stays quick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer import core

#: The word shown for an option of this Python type that declares no ``metavar=``.
_KIND_WORDS: dict[Any, str] = {Path: "PATH", str: "TEXT", int: "INTEGER", float: "NUMBER"}


class ReadableArgument(core.TyperArgument):
    """An argument whose help shows its name and no Python type beside it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _kind_word(annotation: Any) -> str:
    """The word for a value of `annotation`: that of X in ``list[X] | None``, ``X | None``."""
    if annotation in _KIND_WORDS:
        return _KIND_WORDS[annotation]
    for inner in getattr(annotation, "__args__", ()):
        if inner is not type(None):
            return _kind_word(inner)
    return "VALUE"


def _range_words(low: float | None, high: float | None) -> str:
    if high is None:
        return f"at least {low}"
    if low is None:
        return f"at most {high}"
    return f"{low} to {high}"


def _readable(param: Any) -> None:
    """Give `param` a readable value word, in place (a metavar given is kept)."""
    if isinstance(param, core.TyperArgument) and not isinstance(param, ReadableArgument):
        param.__class__ = ReadableArgument
        if param.metavar is None and param.name:
            param.metavar = param.name.upper()  # as the usage line names it: PATHS, not {paths}
    elif isinstance(param, core.TyperOption):
        if param.metavar is None:
            flag = param.is_flag
            param.metavar = "" if flag else _kind_word(param.type_descriptor.annotation)
        if (param.min is not None or param.max is not None) and not param.count:
            # Typer shows a range as ``[x>=1]``; said in words instead. The range is still
            # enforced: typer checks the value against the option's declaration, not these.
            param.help = f"{param.help or ''} ({_range_words(param.min, param.max)})".strip()
            param.min = param.max = None


class ReadableCommand(core.TyperCommand):
    """A command whose options and arguments (its ``--help`` too) are readable."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for p in params:
            _readable(p)
        return params


class ReadableGroup(core.TyperGroup):
    """A group whose own parameters are readable, and which makes every command and group it
    hands out readable too (so ``oracle matrix run --help`` is as readable as ``oracle
    --help``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for p in params:
            _readable(p)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if isinstance(cmd, core.TyperGroup):
            cmd.__class__ = _readable_class(type(cmd), ReadableGroup)
        elif isinstance(cmd, core.TyperCommand):
            cmd.__class__ = _readable_class(type(cmd), ReadableCommand)
        return cmd


_MADE: dict[tuple[type, type], type] = {}


def _readable_class(cls: type, readable: type) -> type:
    """`cls` with `readable`'s methods first: the object typer built keeps its state and any
    method of its own class (a command class of ours, or typer's); only its help reads
    better."""
    if issubclass(cls, readable):
        return cls
    made = _MADE.get((cls, readable))
    if made is None:
        made = _MADE[cls, readable] = type(f"Readable{cls.__name__}", (readable, cls), {})
    return made
