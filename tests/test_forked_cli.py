"""The tests' `oracle` (tests/forked_cli.py) behaves as the console script does where tests
can tell: output, exit status, signals, a launcher killed at a timeout, other Python settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, alive
from tests.forked_cli import ORACLE, REAL_ORACLE

pytestmark = pytest.mark.skipif(ORACLE == REAL_ORACLE, reason="ORACLE_TEST_CLI=exec")


def both(
    *args: str, cwd: Path = REPO, **kwargs: object
) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The command run by the launcher, then by the console script."""
    return tuple(
        subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=120, **kwargs)
        for exe in (ORACLE, REAL_ORACLE)
    )


@pytest.mark.parametrize(
    "args",
    [["--version"], ["list", "tasks/demo"], ["trial", "no-such-task.py"], ["no-such-command"]],
    ids=["version", "list", "missing-task", "usage-error"],
)
def test_output_and_status_are_the_console_scripts(args: list[str]):
    forked, real = both(*args, env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1"})
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


def test_the_working_folder_and_environment_are_the_callers(tmp_path: Path):
    """The command reads its arguments against the caller's working folder (a task file
    named relatively) and its settings from the caller's environment (COLUMNS: the width its
    help is wrapped to)."""
    task = tmp_path / "task_probe.py"
    task.write_text((REPO / "tasks" / "demo" / "task_user_rename.py").read_text())
    forked, real = both("list", "task_probe.py", cwd=tmp_path)
    assert forked.returncode == real.returncode == 0, forked.stderr
    assert "user-rename" in forked.stdout and forked.stdout == real.stdout
    helps = []
    for width in ("60", "200"):
        forked, real = both("--help", env={**os.environ, "COLUMNS": width, "NO_COLOR": "1"})
        assert forked.returncode == 0 and forked.stdout == real.stdout
        helps.append(forked.stdout)
    assert helps[0] != helps[1]


def test_other_python_settings_run_the_console_script_itself():
    """PYTHONPROFILEIMPORTTIME makes a fresh interpreter report its imports on stderr: the
    forked child has imported already and would report none."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    out = subprocess.run(
        [ORACLE, "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and "import time:" in out.stderr and "oracle.cli.app" in out.stderr


def _agent(tmp_path: Path, name: str = "agent") -> str:
    """A command agent that sleeps, named by a marker on its command line (an isolated agent
    cannot write where the test reads)."""
    return f"cmd:{sys.executable} -c 'import time; time.sleep(120)' {tmp_path.name}-{name}"


def _wait_for(tmp_path: Path, name: str = "agent") -> int:
    """The pid of the agent `_agent(tmp_path, name)` started, once it runs."""
    marker = f"{tmp_path.name}-{name}".encode()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    argv = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if marker in argv and argv[1:2] == [b"-c"]:  # the agent, not bwrap
                    return int(proc.name)
        time.sleep(0.05)
    raise AssertionError(f"the agent {marker!r} did not start")


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended within 30 s."""
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_launcher_killed_at_a_timeout_takes_the_command_with_it(tmp_path: Path):
    args = [
        ORACLE, "trial", str(REPO / "tasks" / "demo" / "task_user_rename.py"),
        "-a", _agent(tmp_path), "--out", str(tmp_path / "runs"), "--allow-unproven",
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent = _wait_for(tmp_path)
    proc.kill()  # what subprocess.run does at its timeout
    proc.wait(timeout=30)
    assert _gone(agent)


def test_sigint_reaches_the_command_and_its_status_comes_back(tmp_path: Path):
    """Ctrl-C as a terminal sends it (to the launcher's process group, relayed to the
    command's): the trial is interrupted and exits 130, as the console script does."""
    args = [
        ORACLE, "trial", str(REPO / "tasks" / "demo" / "task_user_rename.py"),
        "-a", _agent(tmp_path), "--out", str(tmp_path / "runs"), "--allow-unproven",
    ]  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    agent = _wait_for(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not alive(agent)


def test_a_command_killed_by_a_signal_is_reported_so(tmp_path: Path):
    """The launcher ends as the command did, by the same status or signal, at SIGTERM."""
    procs = []
    for name, exe in (("forked", ORACLE), ("real", REAL_ORACLE)):
        args = [
            exe, "trial", str(REPO / "tasks" / "demo" / "task_user_rename.py"),
            "-a", _agent(tmp_path, name), "--out", str(tmp_path / name), "--allow-unproven",
        ]  # fmt: skip
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for name in ("forked", "real"):
        _wait_for(tmp_path, name)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    forked, real = (p.wait(timeout=60) for p in procs)
    assert forked == real


def test_stop_ends_the_server_and_its_commands_while_a_fork_holds_its_pipe(tmp_path: Path):
    """The server learns of its test process's end from its standard input, whose other end a
    child forked by that process (not executed) holds as well. `stop` ends it all the same,
    with the commands it still runs, without waiting for that child."""
    script = f"""
import os, subprocess, sys, time
sys.path.insert(0, {str(REPO)!r})
from tests import forked_cli
from tests.test_forked_cli import _agent, _wait_for
from pathlib import Path
forked_cli.start()
tmp = Path({str(tmp_path)!r})
proc = subprocess.Popen(
    [forked_cli.ORACLE, "trial", {str(REPO / "tasks" / "demo" / "task_user_rename.py")!r},
     "-a", _agent(tmp), "--out", str(tmp / "runs"), "--allow-unproven"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
agent = _wait_for(tmp)
holder = os.fork()
if holder == 0:
    time.sleep(120)
    os._exit(0)
forked_cli.stop()
held = os.waitpid(holder, os.WNOHANG) == (0, 0)
os.kill(holder, 9)
os.waitpid(holder, 0)
print(agent, held, proc.wait(timeout=60))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    agent, held, launcher = out.stdout.split()
    assert held == "True"  # stop returned while the fork still held the pipe
    assert launcher == "1"  # the launcher saw its server end before the command
    assert _gone(int(agent))
