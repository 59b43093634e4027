"""Shell completion of the `oracle` command, for a shell named explicitly.

``oracle --show-completion bash`` prints the script; the shell then runs `oracle` with
``_ORACLE_COMPLETE=complete_bash`` (and ``COMP_WORDS``, ``COMP_CWORD``) on each <Tab> and
offers what it prints. The script is written for the shell given, never for the one typer
would guess from the parent process (which differs under an IDE, ``sudo`` or a script).

Only typer is imported here; its completion machinery loads when a script or a completion is
asked for.
"""

from __future__ import annotations

import os

import typer

#: The variable a shell's script sets to ask `oracle` for completions.
COMPLETE_VAR = "_ORACLE_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _register_shells() -> None:
    # Typer's classes for each shell (its script and answer formats), registered with the
    # completion machinery; typer registers them only while it builds its own options.
    from typer.completion import get_completion_inspect_parameters

    get_completion_inspect_parameters()


def print_script(ctx: typer.Context, value: str | None) -> None:
    """``--show-completion SHELL``: print SHELL's completion script and exit (2 for a shell
    that has none)."""
    if value is None or ctx.resilient_parsing:
        return
    if value not in SHELLS:
        raise typer.BadParameter(f"{value!r}: use {', '.join(SHELLS)}")
    from typer.completion import shell_complete

    _register_shells()
    root = ctx.find_root()
    raise typer.Exit(shell_complete(root.command, {}, "oracle", COMPLETE_VAR, f"source_{value}"))


def prepare() -> None:
    """Before the command runs: where a shell asks for completions, make them answerable."""
    if os.environ.get(COMPLETE_VAR):
        _register_shells()
