"""Resource limits: how a task declares them, how the command line overrides them, and the
agent folder's size limit for every kind of agent."""

from __future__ import annotations

import pytest

from oracle import Task, folder
from oracle.limits import Limits, LimitsError, format_size, parse_size
from oracle.task import TaskError


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
