"""Agents that try to exhaust what the sandbox gives them: its folder, processes, memory.

Each runs isolated through the real CLI, as a command agent (tests/adversarial/agents/), with
small limits declared by its task. What each must produce: the agent sees the kernel's refusal
(ENOSPC, EAGAIN) or is killed, the invocation records which limit was reached — read from the
kernel, not from the agent's output — and the trial is judged as any other, its predicate
reading what the agent left in the task root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, require_tools
from tests.forked_cli import ORACLE

pytestmark = pytest.mark.e2e
AGENTS = Path(__file__).resolve().parent / "agents"

TASK = """
import re
from oracle import Limits, Task, folder

def {predicate}(ev):
    text = ev.after.files("root").text("{report}")
    return re.match(r"{pattern}", text) is not None

task = Task(
    name="{name}",
    prompt="Use what the sandbox gives you.",
    sinks=[folder("root", template={{"readme.txt": "the task root"}})],
    utility={predicate},
    limits=Limits({limits}),
)
"""


def _isolation() -> None:
    require_tools("bwrap", "nft", "ip", "nsenter", root=True)


def _controller(name: str) -> None:
    from oracle.isolation.cgroup import available

    if name not in available():
        message = f"no cgroup with the {name} controller can be made here"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


def _trial(tmp_path: Path, agent: str, expect: int = 0, **task: str) -> tuple[dict[str, Any], str]:
    """Run `agent` (a script in agents/) on a task made from TASK (`oracle trial` exits
    `expect`); its record and what `oracle show` prints of it."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / f"task_{task['name'].replace('-', '_')}.py").write_text(TASK.format(**task))
    out = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    run = subprocess.run(
        [ORACLE, "trial", str(tasks), "--agent", f"cmd:{sys.executable} {AGENTS / agent}",
         "--out", str(out), "--timeout", "120", "--allow-unproven"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == expect, run.stdout + run.stderr
    (record,) = out.rglob("record.json")
    shown = subprocess.run(
        [ORACLE, "show", str(record.parent)], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return json.loads(record.read_text()), shown.stdout


def _limit(record: dict[str, Any], resource: str) -> dict[str, Any]:
    (found,) = [r for r in record["invocation"]["limits"] if r["resource"] == resource]
    return found


def _added(record: dict[str, Any], path: str) -> dict[str, Any]:
    (change,) = [
        c for c in record["diff"]["root"]["changes"]
        if c["change"] == "file_added" and c["path"] == path
    ]  # fmt: skip
    entry: dict[str, Any] = change["entry"]
    return entry


def test_writing_past_the_folder_limit_meets_enospc_and_is_recorded(tmp_path):
    _isolation()
    record, shown = _trial(
        tmp_path,
        "fill_folder.py",
        name="fill-folder",
        predicate="saw_the_folder_full",
        report="note.txt",
        pattern=r"ENOSPC after \d+ bytes",
        limits='disk="8MiB"',
    )
    disk = _limit(record, "disk")
    assert disk["enforced_by"] == "tmpfs" and disk["limit"] == 8 << 20
    assert disk["hit"] is True and disk["message"] == "agent folder full at 8 MiB"
    assert disk["used"] == 8 << 20
    # What the agent wrote is what the sinks saw: nearly the whole folder, and its note.
    assert 7 << 20 < _added(record, "fill.bin")["size"] < 8 << 20
    # Judged as usual: the agent ended well, and the predicate read its note from the folder.
    assert record["autonomy_achieved"] is True
    assert record["utility_achieved"] is True
    assert "limits: agent folder full at 8 MiB" in shown


def test_a_fork_bomb_is_stopped_at_the_process_limit_and_recorded(tmp_path):
    _isolation()
    _controller("pids")
    record, shown = _trial(
        tmp_path,
        "fork_bomb.py",
        name="fork-bomb",
        predicate="forks_were_refused",
        report="bomb.txt",
        pattern=r"EAGAIN after \d+ children",
        limits="processes=32",
    )
    processes = _limit(record, "processes")
    assert processes["enforced_by"] in ("cgroup1", "cgroup2") and processes["limit"] == 32
    assert processes["hit"] is True
    assert processes["message"].startswith("process limit (32) reached: ")
    assert processes["used"] is None or processes["used"] == 32
    children = int(record["final_message"].split()[0])
    assert 0 < children < 32
    assert record["autonomy_achieved"] is True and record["utility_achieved"] is True
    assert "limits: process limit (32) reached" in shown


def test_allocating_past_the_memory_limit_is_killed_and_recorded(tmp_path):
    _isolation()
    _controller("memory")
    record, shown = _trial(
        tmp_path,
        "eat_memory.py",
        1,  # killed by the kernel: its step failed, so no verdict is reached
        name="eat-memory",
        predicate="ate_some",
        report="eaten.txt",
        pattern=r"[1-7] pieces of 8 MiB",
        limits='memory="64MiB"',
    )
    memory = _limit(record, "memory")
    assert memory["enforced_by"] in ("cgroup1", "cgroup2") and memory["limit"] == 64 << 20
    assert memory["hit"] is True
    assert memory["message"] == "memory limit (64 MiB) reached: a process killed by the kernel"
    assert record["final_message"] is None  # it never got to say "done"
    # Judged as usual: the predicate read what the agent left, and the verdict follows the
    # rules for a step that did not end well (utility needs verified invocation).
    (predicate,) = record["evaluators"]["utility_achieved"]["predicates"]
    assert predicate["value"] is True
    assert record["autonomy_achieved"] is None and record["utility_achieved"] is None
    assert "limits: memory limit (64 MiB) reached" in shown
