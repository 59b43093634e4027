"""A command agent's process and memory limits: its run's own cgroups, or rlimits."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from oracle import Task, folder, run_trial
from oracle.agents.command import CommandAgent
from oracle.authoring.limits import Limits
from oracle.evidence.invocation import LimitRecord
from oracle.isolation import cgroup
from tests.conftest import require_tools


@pytest.fixture(autouse=True)
def _isolation_tools() -> None:
    require_tools("bwrap", "nft", "ip", "nsenter", root=True)


def _controllers(*names: str) -> None:
    missing = [n for n in names if n not in cgroup.available()]
    if missing:
        message = f"no cgroup with the {', '.join(missing)} controller can be made here"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


def _task(limits: Limits) -> Task:
    return Task(
        name="caps",
        prompt="p",
        sinks=[folder("root")],
        utility=lambda ev: True,
        limits=limits,
    )


def _records(record) -> dict[str, LimitRecord]:
    assert record.invocation is not None
    return {r.resource: r for r in record.invocation.limits}


def _run_cgroups() -> list[Path]:
    places, _ = cgroup._places(os.environ.get(cgroup.CGROUP_ENV))
    return [
        p
        for place in places
        for p in place.parent.iterdir()
        if p.name.startswith(f"{cgroup.PREFIX}{os.getpid()}-")
    ]


def test_an_agent_within_its_limits_reaches_none_and_its_cgroups_are_gone():
    _controllers("pids", "memory")
    record = run_trial(_task(Limits(processes=64, memory="256MiB")), CommandAgent("true")).record
    found = _records(record)
    for resource in ("processes", "memory"):
        assert found[resource].enforced_by in ("cgroup1", "cgroup2")
        assert found[resource].hit is False and found[resource].message is None
    assert found["processes"].limit == 64 and found["memory"].limit == 256 << 20
    assert found["memory"].used is not None and found["memory"].used > 0
    assert record.autonomy_achieved is True
    assert _run_cgroups() == []


def test_a_timed_out_agent_keeps_its_limit_records_and_leaves_no_cgroup():
    _controllers("pids")
    agent = CommandAgent(["sh", "-c", "sleep 1000.5151"], timeout=1)
    record = run_trial(_task(Limits(processes=16)), agent).record
    assert record.invocation is not None and record.invocation.timed_out
    assert _records(record)["processes"].hit is False
    assert _run_cgroups() == []


EAT = """
held = []
try:
    for n in range(1, 33):
        held.append(b"m" * (8 << 20))
except MemoryError:
    print(f"MemoryError after {n - 1} pieces")
"""


def test_without_cgroups_memory_falls_back_to_an_rlimit_and_processes_are_not_limited(
    monkeypatch,
):
    """ORACLE_CGROUP=none: the oracle makes no cgroups. Memory is then limited per process
    (RLIMIT_DATA): the allocation fails inside the program, and nothing tells the oracle,
    so the record says the limit is there and its hit unknown."""
    monkeypatch.setenv(cgroup.CGROUP_ENV, "none")
    agent = CommandAgent([sys.executable, "-c", textwrap.dedent(EAT)])
    record = run_trial(_task(Limits(processes=16, memory="64MiB")), agent).record
    assert record.final_message is not None
    assert record.final_message.startswith("MemoryError after ")
    found = _records(record)
    memory, processes = found["memory"], found["processes"]
    assert (memory.enforced_by, memory.hit, memory.limit) == ("rlimit", None, 64 << 20)
    assert "ORACLE_CGROUP=none" in memory.note and "RLIMIT_DATA" in memory.note
    assert (processes.enforced_by, processes.hit, processes.limit) == (None, None, 16)
    assert processes.note == "not limited: ORACLE_CGROUP=none: the oracle makes no cgroups"


def test_without_isolation_nothing_but_the_folder_is_limited():
    record = run_trial(_task(Limits(processes=16)), CommandAgent("true", isolation="none")).record
    found = _records(record)
    for resource in ("processes", "memory"):
        assert found[resource].enforced_by is None and found[resource].hit is None
        assert "isolation 'none'" in found[resource].note
    assert found["disk"].resource == "disk"


def test_an_empty_run_cgroup_a_crashed_process_left_is_swept():
    _controllers("pids")
    places, _ = cgroup._places(os.environ.get(cgroup.CGROUP_ENV))
    parent = next(p.parent for p in places if "pids" in p.controllers)
    old = parent / f"{cgroup.PREFIX}1-deadbeef"
    new = parent / f"{cgroup.PREFIX}{os.getpid()}-fresh"
    old.mkdir()
    new.mkdir()
    try:
        hour_ago = time.time() - 3600
        os.utime(old, (hour_ago, hour_ago))
        cgroup._sweep(parent)
        assert not old.exists()
        assert new.exists()  # a run's cgroup is empty for a moment after it is made
    finally:
        for p in (old, new):
            if p.exists():
                p.rmdir()
