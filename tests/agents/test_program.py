"""A command agent's program: its file's digest and its answer to --version, asked with no
network, no stdin and no shell, given a second."""

from __future__ import annotations

import hashlib
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from oracle import Task, folder, run_trial
from oracle.agents.command import CommandAgent
from oracle.agents.program import VERSION_CHARS, ask_version, identify
from tests.conftest import require_tools

PY = sys.executable


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_tools("bwrap", root=True)


def program(folder: Path, body: str, name: str = "agent") -> Path:
    path = folder / name
    path.write_text(f"#!{PY}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_the_digest_and_the_first_line_of_the_answer(tmp_path: Path):
    exe = program(tmp_path, 'print("\\n  agent 1.2.3  \\nbuilt today")\n')
    link = tmp_path / "link"
    link.symlink_to(exe)
    got = identify(link)
    assert got.path == str(exe.resolve())
    assert got.sha256 == hashlib.sha256(exe.read_bytes()).hexdigest()
    assert (got.version, got.note) == ("agent 1.2.3", "")


def test_a_changed_file_is_asked_again(tmp_path: Path):
    exe = program(tmp_path, 'print("v1")\n')
    assert identify(exe).version == "v1"
    program(tmp_path, 'print("v2")  # another file\n')
    again = identify(exe)
    assert again.version == "v2"
    assert again.sha256 == hashlib.sha256(exe.read_bytes()).hexdigest()


def test_it_is_asked_without_a_network_or_stdin(tmp_path: Path):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0)
    port = listener.getsockname()[1]
    exe = program(
        tmp_path,
        f"""
        import socket, sys
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=0.5).close()
            net = "reached"
        except OSError as e:
            net = type(e).__name__
        print("net", net, "stdin", repr(sys.stdin.read()))
        """,
    )
    version, note = ask_version(exe)
    assert (version, note) == ("net ConnectionRefusedError stdin ''", "")
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody came
    listener.close()


def test_the_oracles_folders_are_hidden_from_it(tmp_path: Path):
    secret = tmp_path.parent / f"{tmp_path.name}-hidden"
    secret.mkdir()
    (secret / "key").write_text("private")
    exe = program(
        tmp_path,
        f"""
        try:
            print("read", open({str(secret / "key")!r}).read())
        except OSError as e:
            print("failed", type(e).__name__)
        """,
    )
    assert ask_version(exe, hidden=[secret]) == ("failed FileNotFoundError", "")


@pytest.mark.parametrize(
    ("body", "version", "note"),
    [
        ("import sys; sys.exit(2)\n", None, "--version exited with status 2"),
        ("pass\n", None, "--version printed nothing"),
        ("import sys; print('on stderr 9', file=sys.stderr)\n", "on stderr 9", ""),
        ("print('x' * 5000000)\n", "x" * VERSION_CHARS, ""),
        ("import time; time.sleep(60)\n", None, "no answer to --version within 1 s"),
    ],
)
def test_what_does_not_answer_gets_no_version_and_a_note(
    tmp_path: Path, body: str, version: str | None, note: str
):
    exe = program(tmp_path, body)
    assert ask_version(exe) == (version, note)


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_a_command_agent_records_its_program(outside_tmp: Path, isolation: str):
    require_tools("nft", "ip", "nsenter", root=True)
    # Outside /tmp: an isolated agent's program must be where its sandbox can see it.
    where = outside_tmp
    exe = program(
        where,
        """
        import sys
        if sys.argv[1:] == ["--version"]:
            print("my-agent 4.5")
        else:
            open("done.txt", "w").write("ok")
        """,
    )
    task = Task(
        name="t",
        prompt="leave done.txt",
        sinks=[folder("root", template={"a.txt": "a\n"})],
        utility=lambda ev: ev.after.files("root").exists("done.txt"),
    )
    r = run_trial(task, CommandAgent([str(exe)], isolation=isolation)).record
    assert r.utility_achieved is True, r.evaluation_errors
    assert r.invocation is not None and r.invocation.program is not None
    got = r.invocation.program
    assert got.path == str(exe.resolve())
    assert got.sha256 == hashlib.sha256(exe.read_bytes()).hexdigest()
    assert (got.version, got.note) == ("my-agent 4.5", "")


def test_an_agent_that_never_started_names_no_program(tmp_path: Path):
    task = Task(name="t", prompt="p", sinks=[folder("root", template={"a": "a"})], utility=True)
    r = run_trial(task, CommandAgent(["no-such-program-xyz"])).record
    assert r.invocation is not None and r.invocation.program is None
