"""Every command's ``--help`` says what kind of value an option takes (PATH, NAME, SECONDS),
never a Python type (``<list[Path]>``, ``<bool>``, ``[x>=1]``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from oracle.cli.app import app
from oracle.cli.help import ReadableGroup
from tests.cli.test_cli import oracle

#: What typer shows for a Python type: ``<list[Path]>``, ``<bool>``, ``<int range>``,
#: ``<path>``, ``list[str]``, ``[x>=1]``. Help texts of ours may hold ``<time>`` and
#: ``<command line>``, which are none of these.
TYPE_NAMES = "list|bool|str|int|float|path|Path|file|dir|tuple|dict|int range|float range"
INTERNAL = re.compile(rf"<(?:{TYPE_NAMES})\b[^>]*>|\b(?:list|dict|tuple)\[|\[x[<>]=?|\{{[a-z_]+\}}")
#: Words a value may be shown as.
WORDS = re.compile(r"^[A-Z][A-Z_]*(\.\.\.)?$")


def command_paths() -> list[list[str]]:
    """Every command and subcommand of `oracle`, as the words that name it."""
    root = typer.main.get_command(app)
    found: list[list[str]] = [[]]

    def walk(cmd: typer.core.TyperGroup, path: list[str]) -> None:
        ctx = typer.Context(cmd, info_name=" ".join(["oracle", *path]))
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            found.append([*path, name])
            if isinstance(sub, typer.core.TyperGroup):
                walk(sub, [*path, name])

    assert isinstance(root, typer.core.TyperGroup)
    walk(root, [])
    return found


PATHS = command_paths()


def test_the_walk_finds_the_subcommands():
    names = {" ".join(p) for p in PATHS}
    assert {"trial", "controls", "matrix run", "matrix cells", "keys new", "report verify"} <= names
    assert "reduce" in names and "" in names


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "oracle")
def test_help_shows_no_python_types(path):
    out = oracle(*path, "--help")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Usage: oracle" in out.stdout
    assert INTERNAL.findall(out.stdout) == [], out.stdout


def test_every_value_is_shown_as_a_word():
    # The same, read from the objects: each option's value word is a capitalised word or
    # nothing (a flag), each argument shows none beside its name.
    root = typer.main.get_command(app)
    for path in PATHS:
        cmd: typer.core.TyperGroup | typer.core.TyperCommand = root  # type: ignore[assignment]
        ctx = typer.Context(cmd, info_name="oracle")
        for word in path:
            cmd = cmd.get_command(ctx, word)  # type: ignore[union-attr]
            ctx = typer.Context(cmd, info_name=word, parent=ctx)
        for param in cmd.get_params(ctx):
            shown = param.display_type_rich(ctx)  # type: ignore[attr-defined]
            where = f"oracle {' '.join(path)} {param.name}"
            if isinstance(param, typer.core.TyperArgument):
                assert shown is None, where
                assert WORDS.match(param.metavar or ""), where
            elif param.is_flag:  # type: ignore[attr-defined]
                assert shown == "", where
            else:
                assert shown is not None and WORDS.match(shown), f"{where}: {shown!r}"


def test_our_options_name_their_values():
    out = oracle("trial", "--help")
    text = " ".join(out.stdout.split())
    for option, word in (
        ("--agent -a", "AGENT"),
        ("--name", "NAME"),
        ("--repetitions -n", "COUNT"),
        ("--timeout", "SECONDS"),
        ("--disk-limit", "SIZE"),
        ("--allow-host", "HOST"),
    ):
        assert re.search(rf"{re.escape(option)} {word}\b", text), (option, text)
    assert "Usage: oracle trial [OPTIONS] {PATH}..." in text
    # A range is said in words, and still enforced.
    assert "(at least 1)" in text
    refused = oracle("trial", "tasks/demo", "--repetitions", "0")
    assert (
        refused.returncode == 2 and "greater than or equal to 1" in refused.stdout + refused.stderr
    )


def test_the_pattern_catches_what_typer_shows_by_default():
    shown = "│ --out <path>  │ --agent <list[str]> │ -n <int range> [x>=1] │ {paths}..."
    assert len(INTERNAL.findall(shown)) == 5
    assert INTERNAL.findall("archive folder (default runs/<time>) 'cmd:<command line>'") == []


def test_a_command_class_of_its_own_keeps_its_methods():
    class Shouting(typer.core.TyperCommand):
        def format_epilog(self, ctx, formatter):  # type: ignore[no-untyped-def]
            formatter.write("SHOUTING EPILOG\n")

    small = typer.Typer(cls=ReadableGroup, rich_markup_mode=None)

    @small.command(cls=Shouting)
    def go(where: Annotated[Path, typer.Option()] = Path("."), loud: bool = False) -> None:
        """Go."""

    @small.command()
    def stay() -> None:
        """Stay."""

    out = CliRunner().invoke(small, ["go", "--help"], prog_name="small")
    assert out.exit_code == 0, out.output
    assert "SHOUTING EPILOG" in out.output and "--where PATH" in out.output
    assert INTERNAL.findall(out.output) == [] and "<" not in out.output
