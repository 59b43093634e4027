"""Shell completion: the real `oracle` completes commands, subcommands and options, and prints
the script a shell installs."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.cli.test_cli import ORACLE
from tests.conftest import REPO, require_tools


def complete(words: str, cword: int | None = None) -> list[str]:
    """What `oracle` offers for the command line `words`, asked as bash's completion asks."""
    split = words.split(" ")
    env = {
        **os.environ,
        "_ORACLE_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(split) - 1 if cword is None else cword),
    }
    out = subprocess.run(
        [ORACLE], capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_command_is_completed():
    assert complete("oracle tr") == ["trial"]
    assert complete("oracle re") == ["rescore", "reduce", "report"]


def test_a_subcommand_is_completed():
    assert complete("oracle matrix r") == ["run"]
    assert complete("oracle keys ") == ["new"]


def test_an_option_is_completed():
    assert complete("oracle trial --ag") == ["--agent"]
    assert complete("oracle trial --na") == ["--name"]
    assert complete("oracle matrix run --jo") == ["--jobs"]


def test_zsh_and_fish_are_answered_too():
    env = {**os.environ, "_TYPER_COMPLETE_ARGS": "oracle tr"}
    zsh = subprocess.run(
        [ORACLE], env={**env, "_ORACLE_COMPLETE": "complete_zsh"}, capture_output=True, text=True
    )
    assert '"trial":"Run agents on tasks' in zsh.stdout
    fish = subprocess.run(
        [ORACLE],
        env={**env, "_ORACLE_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
        capture_output=True,
        text=True,
    )
    assert fish.stdout.startswith("trial\tRun agents on tasks")


def test_nothing_is_offered_for_a_word_that_names_nothing():
    assert complete("oracle zz") == []


def test_the_script_is_for_the_shell_named_not_the_one_guessed():
    # Run from bash (this test's parent may be any shell), the script asked for is what comes.
    for shell, marker in (("zsh", "compdef"), ("fish", "complete --command oracle")):
        out = subprocess.run(
            [ORACLE, "--show-completion", shell], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert marker in out.stdout and "COMPREPLY" not in out.stdout


def test_a_shell_without_a_script_is_a_usage_error():
    out = subprocess.run(
        [ORACLE, "--show-completion", "tcsh"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 2
    assert "'tcsh': use bash, zsh, fish, powershell, pwsh" in out.stdout + out.stderr


def test_the_bash_script_names_the_completion_variable():
    out = subprocess.run(
        [ORACLE, "--show-completion", "bash"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "_ORACLE_COMPLETE=complete_bash" in out.stdout
    assert "complete -o default -F _oracle_completion oracle" in out.stdout


def test_bash_itself_completes_with_the_installed_script(tmp_path):
    # The script as a user installs it, sourced by a real bash, asked as bash asks on <Tab>.
    require_tools("bash")
    script = subprocess.run(
        [ORACLE, "--show-completion", "bash"], capture_output=True, text=True, timeout=60
    ).stdout
    (tmp_path / "oracle.bash").write_text(script)
    bin_dir = os.path.dirname(ORACLE)
    probe = (
        f"source {tmp_path / 'oracle.bash'}\n"
        "COMP_WORDS=(oracle matrix ce); COMP_CWORD=2\n"
        "_oracle_completion oracle\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run(
        [bash, "--norc", "-c", probe], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cells"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_get_their_script(shell):
    out = subprocess.run(
        [ORACLE, "--show-completion", shell], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert f"_ORACLE_COMPLETE=complete_{shell}" in out.stdout
