"""Tasks side by side (`oracle controls --jobs N`, `oracle demo`): the same report as one
after another, in the order given; a worker that breaks is named; Ctrl-C leaves no process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import oracle
from tests.conftest import DEMO, alive
from tests.forked_cli import REAL_ORACLE

pytestmark = pytest.mark.e2e

SMALL = ("log-level", "user-rename", "orders-cleanup")


def _controls(folder: Path, jobs: int) -> dict:
    picks = [a for name in SMALL for a in ("-t", name)]
    out = oracle("controls", str(folder), *picks, "--jobs", str(jobs), "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(out.stdout)


def test_side_by_side_gives_the_report_of_one_after_another(tmp_path):
    folder = tmp_path / "demo"
    shutil.copytree(DEMO, folder)
    serial, parallel = _controls(folder, 1), _controls(folder, 3)
    assert parallel["runs"] == serial["runs"]
    assert parallel["predicates"] == serial["predicates"]
    assert (
        (parallel["errors"], parallel["flags"]) == (serial["errors"], serial["flags"]) == ([], [])
    )
    # In the order the tasks were loaded (file order), not the order they finished in.
    order = list(dict.fromkeys(r["task"] for r in parallel["runs"]))
    assert order == list(dict.fromkeys(r["task"] for r in serial["runs"]))
    assert sorted(order) == sorted(SMALL)
    # The proofs the workers wrote beside the task files are those of the serial run.
    for name in ("task_log_level", "task_user_rename", "task_orders_cleanup"):
        assert (folder / f"{name}.controls.json").read_text() == (
            DEMO / f"{name}.controls.json"
        ).read_text()


# A task file that defines another task when loaded again in a worker process: the worker
# has no task of the name it is handed, and breaks.
SHIFTY = """\
import os
from oracle import Task, sqlite, breach

def grew(ev):
    return bool(ev.diff.sql("db").added("t"))

def add(sb):
    sb.sql("db", "INSERT INTO t VALUES (1)")

name = "shifty" if os.getpid() == int(os.environ["SHIFTY_PARENT"]) else "other"
task = Task(name=name, prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
            security=grew, controls=[breach(add)])
"""

STEADY = SHIFTY.replace(
    'name = "shifty" if os.getpid() == int(os.environ["SHIFTY_PARENT"]) else "other"',
    'name = "steady"',
)


def test_a_worker_that_breaks_is_named_and_the_other_tasks_run(tmp_path):
    (tmp_path / "task_shifty.py").write_text(SHIFTY)
    (tmp_path / "task_steady.py").write_text(STEADY)
    script = (
        "import os, sys\n"
        "os.environ['SHIFTY_PARENT'] = str(os.getpid())\n"
        "from oracle.cli.app import main\n"
        f"sys.argv = ['oracle', 'controls', {str(tmp_path)!r}, '--jobs', '2', '--json']\n"
        "main()\n"
    )
    out = subprocess.run(
        [str(Path(REAL_ORACLE).parent / "python"), "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 1, out.stderr
    (error,) = doc["errors"]
    assert error.startswith("task 'shifty': its worker failed: KeyError")
    assert {r["task"] for r in doc["runs"]} == {"steady"}
    assert all(r["behaved"] for r in doc["runs"])


SLOW = """\
from oracle import Task, sqlite, breach

def grew(ev):
    return bool(ev.diff.sql("db").added("t"))

def add(sb):
    import os, time
    with open({started!r} + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace({started!r} + ".tmp", {started!r})
    time.sleep(120)

task = Task(name="slow", prompt="p", sinks=[sqlite("db", sql="CREATE TABLE t (x)")],
            security=grew, controls=[breach(add)])
"""


def _alive_group(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


#: How the run is interrupted: (jobs, where each signal goes, the signal, seconds before the
#: next one). A terminal's Ctrl-C reaches the whole process group; a user who sees nothing
#: happen presses it again, while the first one's clean-up runs (the gaps hit the command
#: and the workers at different points of theirs).
STOPS = {
    "group": (2, [("group", signal.SIGINT, 0)]),
    "command": (2, [("command", signal.SIGINT, 0)]),
    "storm": (2, [("group", signal.SIGINT, 0.002), ("group", signal.SIGINT, 0.03)] * 2),
    "storm-serial": (1, [("group", signal.SIGINT, 0.002), ("group", signal.SIGINT, 0.03)] * 2),
    "killed": (2, [("command", signal.SIGKILL, 0)]),
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_ctrl_c_side_by_side_exits_130_and_leaves_no_process(tmp_path, stop):
    """Ctrl-C once or many times, to the whole group or the command alone: exit 130 with
    the JSON document, and no worker, fork server or control body left. A command killed
    outright takes its workers and their controls' bodies with it."""
    jobs, signals = STOPS[stop]
    started = tmp_path / "started"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "task_slow.py").write_text(SLOW.format(started=str(started)))
    (tasks / "task_steady.py").write_text(STEADY.replace("shifty", "steady"))
    proc = subprocess.Popen(
        # Signalled by process group: the console script itself (tests/forked_cli.py).
        [REAL_ORACLE, "controls", str(tasks), "--jobs", str(jobs), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        start_new_session=True,  # its own process group, as a terminal's Ctrl-C reaches
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        for reach, signum, gap in signals:
            with contextlib.suppress(ProcessLookupError):
                (os.killpg if reach == "group" else os.kill)(proc.pid, signum)
            time.sleep(gap)
        stdout, stderr = proc.communicate(timeout=60)
        if stop == "killed":
            assert proc.returncode == -signal.SIGKILL
        else:
            assert proc.returncode == 130, stdout + stderr
            assert json.loads(stdout)["exit_code"] == 130
        # The workers and the fork server (the command's process group), and the control's
        # body (a session of its own), are all gone.
        body = int(started.read_text())
        deadline = time.monotonic() + 30
        while _alive_group(proc.pid) or alive(body):
            assert time.monotonic() < deadline, "processes of the run are left"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.killpg(int(started.read_text()), signal.SIGKILL)
