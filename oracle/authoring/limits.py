"""Resource limits of a trial's agent, and the one the sandbox itself enforces: its folder.

A task says how much its agent may use (`Limits`; the defaults hold for every task that says
nothing)::

    Task(..., limits=Limits(disk="64MiB", processes=128, memory="1GiB"))

- ``disk``: the size of the agent folder (task roots, SQLite files, ``HOME``). The sandbox
  mounts a tmpfs of that size on it (`oracle.sandbox.agent_folder`), so a write past it fails with
  ENOSPC;
  the folder stays mounted until the sandbox closes, so the after snapshot reads it whole.
- ``processes`` and ``memory``: for the agent's processes together (threads count as
  processes). A command agent runs in a cgroup of its own that has them
  (`oracle.isolation.cgroup`): a fork past the limit fails with EAGAIN, and past the memory
  limit the kernel kills a process.

``None`` lifts a limit. Whether each was reached is read from the kernel — the folder's
fullness when the agent ended, the cgroup's event counters — never from what the agent
printed, and recorded in the invocation (`oracle.evidence.invocation.LimitRecord`): ``agent folder
full at 1 GiB``. Reaching a limit changes no verdict by itself: the trial is judged on what
the sinks hold, as any other.

>>> Limits(disk="8MiB").disk_bytes
8388608
>>> Limits().describe()
'disk 1 GiB, 512 processes, memory 2 GiB'
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
DEFAULT_DISK = GiB
DEFAULT_PROCESSES = 512
DEFAULT_MEMORY = 2 * GiB
#: Below these a sandbox cannot start its program at all (bubblewrap's own two processes
#: count, and an interpreter needs a few MiB), so smaller limits are refused, not tried.
MIN_DISK = MiB
MIN_PROCESSES = 4
MIN_MEMORY = 16 * MiB

_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kib": KiB,
    "m": MiB,
    "mib": MiB,
    "g": GiB,
    "gib": GiB,
    "t": TiB,
    "tib": TiB,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class LimitsError(ValueError):
    """A limit that cannot be used. ``part`` names it (``disk``, ``processes``, ``memory``)."""

    def __init__(self, part: str, message: str) -> None:
        self.part = part
        super().__init__(message)


def parse_size(value: int | str, part: str = "size") -> int:
    """Bytes from an int or a size such as ``"8MiB"``, ``"1.5GiB"``, ``"512m"`` or
    ``"100MB"`` (k, m, g, t and KiB … TiB are powers of 1024; KB … TB of 1000).

    >>> parse_size("8MiB"), parse_size("2g"), parse_size(4096)
    (8388608, 2147483648, 4096)
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise LimitsError(part, f"give bytes or a size such as '1GiB', not {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise LimitsError(
            part, f"{value!r} is not a size: write it like '8MiB', '1GiB', '512m' or '100MB'"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(n: int) -> str:
    """A size in the largest binary unit it fills: ``'8 MiB'``, ``'1.5 GiB'``, ``'512 bytes'``."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            text = f"{n / size:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Limits:
    """What a trial's agent may use (see the module docstring): ``disk`` and ``memory`` in
    bytes or as sizes such as ``"1GiB"``, ``processes`` a count; ``None`` lifts a limit.
    `check` says what is wrong with one (a `Task` checks its own when it is made, and names
    the part); `disk_bytes` and `memory_bytes` are the sizes in bytes.

    >>> Limits(disk="8MiB").disk_bytes, Limits(memory=None).memory_bytes
    (8388608, None)
    """

    disk: int | str | None = DEFAULT_DISK
    processes: int | None = DEFAULT_PROCESSES
    memory: int | str | None = DEFAULT_MEMORY

    @property
    def disk_bytes(self) -> int | None:
        """The agent folder's size limit in bytes (None: no limit)."""
        return _size("disk", self.disk, MIN_DISK)

    @property
    def memory_bytes(self) -> int | None:
        """The memory limit in bytes (None: no limit)."""
        return _size("memory", self.memory, MIN_MEMORY)

    def check(self) -> Limits:
        """These limits, each in bytes or a count; `LimitsError` naming the first that cannot
        be used."""
        processes = self.processes
        if processes is not None and (type(processes) is not int or processes < MIN_PROCESSES):
            raise LimitsError(
                "processes",
                f"give a whole number of processes of at least {MIN_PROCESSES} (the sandbox's "
                f"own processes count), or None for no limit, not {processes!r}",
            )
        return Limits(disk=self.disk_bytes, processes=processes, memory=self.memory_bytes)

    def replaced(self, **changes: int | str | None) -> Limits:
        """These limits with some changed (``replaced(memory="4GiB", processes=None)``)."""
        unknown = sorted(set(changes) - {"disk", "processes", "memory"})
        if unknown:
            raise LimitsError(unknown[0], "is not a limit: use disk, processes or memory")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        """``'disk 1 GiB, 512 processes, memory 2 GiB'``."""
        disk, memory = self.disk_bytes, self.memory_bytes
        return ", ".join(
            [
                f"disk {format_size(disk)}" if disk is not None else "no disk limit",
                f"{self.processes} processes" if self.processes is not None else "no process limit",
                f"memory {format_size(memory)}" if memory is not None else "no memory limit",
            ]
        )


def _size(part: str, value: int | str | None, minimum: int) -> int | None:
    if value is None:
        return None
    n = parse_size(value, part)
    if n < minimum:
        raise LimitsError(
            part, f"{value!r} is below the smallest usable {part} limit, {format_size(minimum)}"
        )
    return n
