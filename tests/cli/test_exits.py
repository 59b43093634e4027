"""One exit-code table (oracle.cli.exits), a test per row, through the real CLI: 0 all as
expected, 1 a verdict, control or trial error, 2 a usage or load error, 130 interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from oracle.cli import exits
from tests.cli.test_cli import oracle
from tests.conftest import DEMO
from tests.forked_cli import REAL_ORACLE

pytestmark = pytest.mark.e2e

#: A task with no controls file beside it: nothing proves its predicate.
UNPROVEN = (
    "from oracle import Task, sqlite, breach\n"
    "def grew(ev):\n    return bool(ev.diff.sql('db').added('t'))\n"
    "def add(sb):\n    sb.sql('db', 'INSERT INTO t VALUES (1)')\n"
    "task = Task(name='fresh', prompt='p', sinks=[sqlite('db', sql='CREATE TABLE t (x)')],"
    " security=grew, controls=[breach(add)])\n"
)


def test_the_table_is_in_the_help_and_the_docs():
    assert (exits.OK, exits.FAILED, exits.USAGE, exits.INTERRUPTED) == (0, 1, 2, 130)
    text = " ".join(oracle("--help").stdout.split())
    docs = " ".join((Path(__file__).parents[2] / "docs" / "cli.md").read_text().split())
    for code, meaning in exits.TABLE:
        assert f"{code} {meaning}" in text, code
        assert f"| {code} | {meaning} |" in docs, code


def test_0_the_demo_tasks_ship_proven_controls_and_exit_0(tmp_path: Path):
    out = oracle("trial", str(DEMO), "-a", "careful", "--out", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not measured" not in out.stdout and "verdict not reached" not in out.stdout
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("record.json")]
    assert records and all(r["controls"]["status"] == "proven" for r in records)


def test_1_a_verdict_not_reached(tmp_path: Path):
    args = ("trial", str(DEMO), "-t", "user-rename", "-a", "cmd:/bin/false", "--isolation", "none")
    out = oracle(*args, "--out", str(tmp_path / "runs"))
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "verdict not reached: user-rename/cmd:/bin/false/" in text
    assert "autonomy unknown (invocation not verified: agent step 'command' failed" in text
    (record,) = (tmp_path / "runs").rglob("record.json")  # archived all the same
    assert json.loads(record.read_text())["autonomy_achieved"] is None


def test_1_a_task_whose_controls_are_unproven_then_0_once_proven(tmp_path: Path):
    (tmp_path / "task_fresh.py").write_text(UNPROVEN)
    args = ("trial", str(tmp_path / "task_fresh.py"), "-a", "noop")
    before = oracle(*args, "--out", str(tmp_path / "a"))
    assert before.returncode == 1, before.stdout + before.stderr
    text = " ".join(before.stdout.split())
    assert "not measured: fresh: controls missing: `oracle controls` has not been run" in text
    allowed = oracle(*args, "--out", str(tmp_path / "a2"), "--allow-unproven")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "not measured: fresh: controls missing" in " ".join(allowed.stdout.split())
    assert oracle("controls", str(tmp_path / "task_fresh.py")).returncode == 0
    after = oracle(*args, "--out", str(tmp_path / "b"))
    assert after.returncode == 0, after.stdout + after.stderr
    # edited since its controls ran: stale, no longer proven
    (tmp_path / "task_fresh.py").write_text(UNPROVEN.replace("(1)", "(2)"))
    stale = oracle(*args, "--out", str(tmp_path / "c"))
    assert stale.returncode == 1 and "not measured: fresh: controls stale" in stale.stdout


def test_1_a_control_that_misbehaves(tmp_path: Path):
    (tmp_path / "task_blind.py").write_text(UNPROVEN.replace("added('t')", "removed('t')"))
    out = oracle("controls", str(tmp_path), "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and doc["exit_code"] == 1
    assert any(
        p.startswith("control fresh/add misbehaved: breached false") for p in doc["problems"]
    )
    assert oracle("controls", str(tmp_path), "--report-only").returncode == 0


def test_2_a_path_that_does_not_exist_runs_nothing(tmp_path: Path):
    out = oracle("trial", "/nonexistent", "--out", str(tmp_path / "runs"))
    assert out.returncode == 2
    assert out.stdout.strip() == "error: /nonexistent: does not exist"  # no tables
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["list", "check", "trial", "controls"])
def test_2_a_task_file_that_cannot_be_loaded(tmp_path: Path, command: str):
    (tmp_path / "task_broken.py").write_text("import nonexistent_module_xyz\n")
    (tmp_path / "task_fresh.py").write_text(UNPROVEN)
    extra = ("-a", "noop", "--out", str(tmp_path / "runs")) if command == "trial" else ()
    out = oracle(command, str(tmp_path), *extra, "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 2 and doc["exit_code"] == 2, out.stderr
    (error,) = doc["load_errors"]
    assert error["source"] == str(tmp_path / "task_broken.py")
    assert "nonexistent_module_xyz" in error["message"]
    assert "could not load" in out.stderr and "task_broken.py" in out.stderr
    if command == "trial":  # the task that did load still ran
        assert [r["cell"]["task"] for r in doc["records"]] == ["fresh"]


def test_2_a_bad_option():
    out = oracle("trial", str(DEMO), "--repetitions", "0")
    assert out.returncode == 2 and "--repetitions" in out.stderr
    out = oracle("trial", str(DEMO), "-t", "nope")
    assert out.returncode == 2 and "error: no task named nope (loaded: " in out.stdout


def test_130_interrupted(tmp_path: Path):
    started = tmp_path / "started"
    agent = f"cmd:sh -c 'touch {started}; exec sleep 60'"
    args = ["trial", str(DEMO), "-t", "user-rename", "-a", agent, "--isolation", "none"]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [REAL_ORACLE, *args, "--out", str(tmp_path / "runs"), "--json"],  # signalled by group
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr
    assert json.loads(stdout)["exit_code"] == 130
