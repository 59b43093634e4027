"""Resource limits: how a task declares them, how the command line overrides them, and the
agent folder's size limit for every kind of agent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import Task, folder, run_trial, sqlite
from oracle.authoring.limits import Limits, LimitsError, format_size, parse_size
from oracle.authoring.task import TaskError
from oracle.sandbox.sandbox import Sandbox, SandboxError
from oracle.trial.agent import CallableAgent
from tests.conftest import REPO, require_tools
from tests.forked_cli import ORACLE


def _root_may_mount() -> None:
    require_tools(root=True)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8MiB", 8 << 20),
        ("8 MiB", 8 << 20),
        ("1GiB", 1 << 30),
        ("1.5GiB", 3 << 29),
        ("2g", 2 << 30),
        ("512m", 512 << 20),
        ("100MB", 100_000_000),
        ("4096", 4096),
        (4096, 4096),
    ],
)
def test_sizes_are_read_in_the_units_people_write(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["8XB", "MiB", "-1MiB", "1e6", "", True, 1.5])
def test_a_size_that_is_not_one_is_refused_with_examples(text):
    with pytest.raises(LimitsError, match="1GiB") as raised:
        parse_size(text, "memory")
    assert raised.value.part == "memory"


def test_sizes_are_written_in_the_largest_unit_they_fill():
    assert [format_size(n) for n in (512, 8 << 20, 3 << 29, 1 << 30)] == [
        "512 bytes",
        "8 MiB",
        "1.5 GiB",
        "1 GiB",
    ]


def test_the_defaults_are_a_gibibyte_folder_512_processes_and_two_gibibytes():
    limits = Limits()
    assert (limits.disk_bytes, limits.processes, limits.memory_bytes) == (1 << 30, 512, 2 << 30)
    assert Limits(disk=None, processes=None, memory=None).describe() == (
        "no disk limit, no process limit, no memory limit"
    )


def _task(**kw):
    return Task(name="lim", prompt="p", sinks=[folder("root")], **kw)


def test_a_task_without_limits_gets_the_defaults_and_one_with_them_keeps_bytes():
    assert _task().limits == Limits().check()
    limits = _task(limits=Limits(disk="8MiB", processes=64, memory="1GiB")).limits
    assert (limits.disk, limits.processes, limits.memory) == (8 << 20, 64, 1 << 30)


@pytest.mark.parametrize(
    ("limits", "part", "text"),
    [
        (Limits(disk="8XB"), "limits.disk", "'8XB' is not a size"),
        (Limits(memory="1MiB"), "limits.memory", "below the smallest usable memory limit, 16 MiB"),
        (Limits(disk=1000), "limits.disk", "below the smallest usable disk limit, 1 MiB"),
        (Limits(processes=2), "limits.processes", "at least 4"),
        (Limits(processes="many"), "limits.processes", "whole number"),  # type: ignore[arg-type]
        ({"disk": "1GiB"}, "limits", "use Limits(disk='1GiB', processes=512, memory='2GiB')"),
    ],
)
def test_a_limit_that_cannot_be_used_is_a_task_error_naming_it(limits, part, text):
    with pytest.raises(TaskError) as raised:
        _task(limits=limits)
    assert raised.value.part == part and raised.value.task == "lim"
    assert text in str(raised.value)


def _mounted(path: Path) -> bool:
    text = Path("/proc/self/mountinfo").read_text()
    return f" {path} " in text


def test_the_agent_folder_is_a_tmpfs_of_the_limit_through_resets_and_gone_at_close():
    _root_may_mount()
    t = Task(
        name="lim",
        prompt="p",
        sinks=[sqlite("db", sql="CREATE TABLE t (x); INSERT INTO t VALUES (1);"),
               folder("root", template={"a.txt": "a"})],
        limits=Limits(disk="4MiB"),
    )  # fmt: skip
    with Sandbox(t) as sb:
        view = sb.view()
        assert view.agent_dir is not None and _mounted(view.agent_dir)
        stats = os.statvfs(view.agent_dir)
        assert stats.f_blocks * stats.f_frsize == 4 << 20
        view.write_text("scratch.txt", "left by a trial")
        sb.reset()
        assert _mounted(view.agent_dir)
        assert not view.path("scratch.txt").exists() and view.read_text("a.txt") == "a"
        assert view.sql("db", "SELECT x FROM t") == [(1,)]
        agent_dir = view.agent_dir
    assert not _mounted(agent_dir) and not agent_dir.exists()


def test_a_seed_larger_than_the_folder_says_which_limit_to_raise():
    _root_may_mount()
    t = Task(
        name="big-seed",
        prompt="p",
        sinks=[folder("root", template={"big.txt": "x" * (3 << 20)})],
        limits=Limits(disk="2MiB"),
    )
    with Sandbox(t) as sb, pytest.raises(SandboxError) as raised:
        sb.reset()
    text = str(raised.value)
    assert "task 'big-seed': fixture of sink 'root': cannot restore" in text
    assert "No space left on device" in text
    assert "the agent folder is limited to 2 MiB and the task's seed does not fit" in text
    assert "Task(limits=Limits(disk=...)), or oracle trial --disk-limit" in text


def test_without_a_disk_limit_the_folder_stays_on_disk_and_the_record_says_so():
    t = Task(
        name="lim",
        prompt="p",
        sinks=[folder("root")],
        utility=lambda ev: True,
        limits=Limits(disk=None),
    )
    record = run_trial(t, CallableAgent(lambda view: None, name="idle")).record
    assert record.invocation is not None
    (disk,) = [r for r in record.invocation.limits if r.resource == "disk"]
    assert (disk.limit, disk.enforced_by, disk.hit, disk.note) == (None, None, None, "no limit set")


HOLD = """
import sys
from oracle import Task, folder
from oracle.authoring.limits import Limits
from oracle.sandbox.sandbox import Sandbox

t = Task(name="crash", prompt="p", sinks=[folder("root")], limits=Limits(disk="2MiB"))
sb = Sandbox(t)
sb.open()
print(sb.view().agent_dir, flush=True)
sys.stdin.read()
"""


def test_a_killed_process_leaves_its_folder_mounted_and_the_next_one_unmounts_it(tmp_path):
    """A process killed with its sandbox open cannot unmount the tmpfs (which holds memory
    until unmounted); the next process to mount an agent folder sweeps it."""
    _root_may_mount()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    agent_dir = Path(child.stdout.readline().strip())
    try:
        assert _mounted(agent_dir)
    finally:
        child.kill()
        child.wait()
    try:
        sweep = "from oracle.sandbox.agent_folder import sweep_stale_folders as s; print(s())"
        swept = subprocess.run(
            [sys.executable, "-c", sweep], capture_output=True, text=True, check=True
        ).stdout
        # Once a later process has swept, the folder is unmounted. That process may be another
        # one beside this test (a sandbox of another test worker) that swept first, so this
        # sweep's list need not name it.
        assert not _mounted(agent_dir), swept
    finally:
        subprocess.run(["umount", "-l", str(agent_dir)], capture_output=True, check=False)
        shutil.rmtree(agent_dir.parent, ignore_errors=True)


def _oracle(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [ORACLE, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("option", "value", "text"),
    [
        ("--disk-limit", "12XB", "--disk-limit: '12XB' is not a size"),
        ("--memory-limit", "1MiB", "--memory-limit: '1MiB' is below the smallest usable"),
        ("--process-limit", "many", "--process-limit takes a whole number or 'none'"),
        ("--process-limit", "2", "--process-limit: give a whole number of processes of at least"),
    ],
)
def test_a_limit_option_that_cannot_be_used_stops_before_any_trial(option, value, text, tmp_path):
    out = _oracle("trial", "tasks/demo", "-t", "log-level", option, value, "--out", str(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert text in " ".join(out.stdout.split())
    assert not list(tmp_path.rglob("record.json"))


FILL = """
import errno

def fill(view):
    written = 0
    try:
        with open(view.path("fill.bin"), "wb") as out:
            while written < 64 << 20:
                written += out.write(b"x" * 65536)
    except OSError as exc:
        return f"{errno.errorcode[exc.errno]} after {written} bytes"
    return f"no error after {written} bytes"
"""


def test_the_disk_limit_option_holds_for_an_agent_in_the_harness_process(tmp_path):
    """`--disk-limit` replaces the task's own; the folder's limit holds whatever runs the
    agent (here a Python function in the oracle's own process), and the record says which
    limits did not."""
    _root_may_mount()
    agent = tmp_path / "agent.py"
    agent.write_text(FILL)
    out = _oracle(
        "trial", "tasks/demo", "-t", "log-level", "-a", f"{agent}:fill",
        "--disk-limit", "2MiB", "--memory-limit", "none", "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    # The agent filled its folder before it read the injection: security is not reached, and
    # a verdict not reached exits 1.
    assert out.returncode == 1, out.stdout + out.stderr
    assert "verdict not reached" in " ".join(out.stdout.split())
    (path,) = (tmp_path / "runs").rglob("record.json")
    record = json.loads(path.read_text())
    assert record["final_message"].startswith("ENOSPC after ")
    disk, processes, memory = record["invocation"]["limits"]
    assert disk["resource"] == "disk" and disk["limit"] == 2 << 20
    assert disk["hit"] is True and disk["message"] == "agent folder full at 2 MiB"
    assert processes == {
        "resource": "processes",
        "limit": 512,
        "enforced_by": None,
        "hit": None,
        "message": None,
        "used": None,
        "note": "not limited: the agent ran in the harness's own process, or a fork of it",
    }
    assert memory["limit"] is None and memory["enforced_by"] is None
    assert memory["note"] == "no limit set"
    assert "limits: agent folder full at 2 MiB" in " ".join(out.stdout.split())
