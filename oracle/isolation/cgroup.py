"""Process and memory limits for one run of a command agent: a cgroup of its own, or rlimits.

`RunLimits` makes, for one run, a cgroup that holds every process of the agent — bubblewrap's
and the program's, and all they start — with the task's process and memory limits
(`oracle.authoring.limits.Limits`), reads afterwards whether the agent reached them, and removes the
cgroup:

- **cgroup v2** where the ``memory`` and ``pids`` controllers are delegated to the oracle: the
  cgroup named by ``ORACLE_CGROUP`` (a folder of the cgroup2 file system in which the oracle
  may make cgroups), else the oracle's own cgroup where it may enable them for its children
  (the root cgroup of its namespace). ``memory.max`` (and ``memory.swap.max`` 0), ``pids.max``;
  a hit is read from ``memory.events`` (``oom_kill``) and ``pids.events`` (``max``).
- **cgroup v1** where those controllers are mounted as v1 hierarchies: a child of the oracle's
  own cgroup in each. ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, so no
  swap), ``pids.max``; a hit is read from ``memory.oom_control`` (``oom_kill``) and
  ``pids.events`` (``max``).
- otherwise (or with ``ORACLE_CGROUP=none``, where the oracle must make no cgroups)
  **rlimits**, for memory only: ``RLIMIT_DATA`` (an allocation past it fails with
  ENOMEM, and the kernel does not say whether one did, so a hit is unknown). Processes are
  then not limited: ``RLIMIT_NPROC`` counts every process of the user, and does not bind root.

The program joins the cgroup before anything of it runs: its first process is a shell that
writes itself into the cgroup, then reads the command line it executes (`waiting`,
`hand_over`). Joining a cgroup waits for an RCU grace period (about 10 ms), so the shell is
started before the rest of the sandbox is made, and that wait passes meanwhile. A fork past
``pids.max`` fails with EAGAIN; past the memory limit the kernel's OOM killer ends the
largest process.

Example::

    with RunLimits(processes=64, memory=256 * MiB) as limits:
        proc = subprocess.Popen(limits.waiting(), stdin=subprocess.PIPE)
        ...                                  # make the rest of the sandbox
        limits.hand_over(proc, ["bwrap", ...])
        proc.wait()
        limits.records()   # [LimitRecord(resource='processes', hit=False, …), …]
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import TracebackType

from oracle.authoring.limits import format_size
from oracle.evidence.invocation import LimitRecord

CGROUP_ENV = "ORACLE_CGROUP"
PREFIX = "oracle-run-"
#: An empty cgroup of a run older than this is a leftover (its process died before removing
#: it): a run's cgroup is empty only between its making and its program's start.
STALE_AFTER = 60.0
#: Joins the cgroups named before ``--``, then reads a command line (shell words) from stdin
#: and executes it. The command line comes from the oracle, quoted word by word.
_JOIN = (
    'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; '
    'cmd=$(cat) && [ -n "$cmd" ] || exit 125; eval "exec $cmd" </dev/null'
)
_CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class _Place:
    """Where a run's cgroup is made for some controllers: a parent folder of a v1 hierarchy
    or of the cgroup2 file system."""

    version: int
    parent: Path
    controllers: frozenset[str]


def _mountinfo() -> list[tuple[str, Path, set[str]]]:
    """``(fstype, mount point, super options)`` of every cgroup mount."""
    out: list[tuple[str, Path, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((tail[0], Path(fields[4]), set(tail[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller → this process's cgroup path in its hierarchy (``""`` for cgroup v2)."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _v2_place(
    mounts: list[tuple[str, Path, set[str]]], own: dict[str, str], given: str | None
) -> tuple[_Place | None, str]:
    """The cgroup2 folder where runs get their cgroups, with the controllers enabled for its
    children; or None and why not."""
    roots = [m for kind, m, _ in mounts if kind == "cgroup2"]
    if not roots:
        return None, "no cgroup2 file system is mounted"
    if given:
        parent = Path(given)
        if not any(parent == r or r in parent.parents for r in roots):
            return None, f"{CGROUP_ENV}={given} is not a folder of the cgroup2 file system"
    elif "" in own:
        parent = roots[0] / own[""].lstrip("/")
    else:
        return None, "this process is in no cgroup2 cgroup"
    available = set(_read(parent / "cgroup.controllers").split())
    enabled = set(_read(parent / "cgroup.subtree_control").split())
    usable = {c for c in _CONTROLLERS if c in enabled}
    for c in _CONTROLLERS:
        if c in available and c not in enabled:
            try:
                (parent / "cgroup.subtree_control").write_text(f"+{c}")
                usable.add(c)
            except OSError:
                pass  # a cgroup with processes of its own cannot share controllers out
    if not usable:
        return None, (
            f"cgroup2 delegates neither memory nor pids to {parent} (set {CGROUP_ENV} to a "
            "cgroup the oracle may make cgroups in, with both controllers enabled)"
        )
    return _Place(2, parent, frozenset(usable)), ""


@lru_cache(maxsize=4)
def _places(given: str | None) -> tuple[tuple[_Place, ...], str]:
    """Where each controller's run cgroups are made (cgroup v2 first, then v1), and what was
    not found. `given` is ``ORACLE_CGROUP`` (a key of the cache)."""
    if given is not None and given.strip().lower() == "none":
        return (), f"{CGROUP_ENV}=none: the oracle makes no cgroups"
    mounts, own = _mountinfo(), _own_cgroups()
    places: list[_Place] = []
    v2, why = _v2_place(mounts, own, given)
    if v2 is not None:
        places.append(v2)
    covered = set(v2.controllers) if v2 else set()
    for c in _CONTROLLERS:
        if c in covered:
            continue
        for kind, mount, options in mounts:
            if kind == "cgroup" and c in options and c in own:
                parent = mount / own[c].lstrip("/")
                if os.access(parent, os.W_OK):
                    places.append(_Place(1, parent, frozenset({c})))
                    covered.add(c)
                    break
    missing = [c for c in _CONTROLLERS if c not in covered]
    note = f"no cgroup with the {' or '.join(missing)} controller" if missing else ""
    if missing and why:
        note += f" ({why})"
    for place in places:
        _sweep(place.parent)
    return tuple(places), note


def available() -> dict[str, str]:
    """Controller (``memory``, ``pids``) → what enforces it here (``cgroup2``, ``cgroup1``),
    for the controllers this process can give a run of its own."""
    places, _ = _places(os.environ.get(CGROUP_ENV))
    return {c: f"cgroup{p.version}" for p in places for c in sorted(p.controllers)}


def _sweep(parent: Path) -> None:
    """Remove the empty run cgroups that crashed processes left under `parent`."""
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER:
                        os.rmdir(entry.path)


def _counter(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _number(path: Path) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() else None


@dataclass
class _Group:
    version: int
    path: Path
    controllers: frozenset[str]


class RunLimits:
    """The process and memory limits of one run (see the module docstring). A context
    manager; `open` never raises: what cannot be set up is not enforced, and its record says
    why."""

    def __init__(self, processes: int | None, memory: int | None) -> None:
        self.processes = processes
        self.memory = memory
        self.groups: list[_Group] = []
        self.notes: dict[str, str] = {}
        self.rlimit_memory = False

    def __enter__(self) -> RunLimits:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _wanted(self) -> set[str]:
        return {c for c, v in (("pids", self.processes), ("memory", self.memory)) if v is not None}

    def open(self) -> None:
        """Make the run's cgroups and set their limits."""
        wanted = self._wanted()
        places, note = _places(os.environ.get(CGROUP_ENV)) if wanted else ((), "")
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        for place in places:
            controllers = place.controllers & wanted
            if not controllers:
                continue
            group = _Group(place.version, place.parent / name, controllers)
            try:
                group.path.mkdir()
            except OSError as exc:
                for c in controllers:
                    self.notes[c] = f"its cgroup could not be made in {place.parent}: {exc}"
                continue
            self.groups.append(group)
            for c in controllers:
                try:
                    self._set(group, c)
                except OSError as exc:
                    self.notes[c] = f"its cgroup's limit could not be set: {exc}"
        enforced = {c for g in self.groups for c in g.controllers if c not in self.notes}
        for c in wanted - enforced:
            self.notes.setdefault(c, note or "no cgroup could be made for it")
        if "memory" in wanted - enforced:
            self.rlimit_memory = True

    def _set(self, group: _Group, controller: str) -> None:
        p = group.path
        if controller == "pids":
            (p / "pids.max").write_text(str(self.processes))
        elif group.version == 2:
            (p / "memory.max").write_text(str(self.memory))
            if (p / "memory.swap.max").exists():
                (p / "memory.swap.max").write_text("0")
        else:
            (p / "memory.limit_in_bytes").write_text(str(self.memory))
            if (p / "memory.memsw.limit_in_bytes").exists():
                (p / "memory.memsw.limit_in_bytes").write_text(str(self.memory))

    def _group(self, controller: str) -> _Group | None:
        if controller in self.notes:
            return None
        return next((g for g in self.groups if controller in g.controllers), None)

    def waiting(self) -> list[str]:
        """A shell that joins the run's cgroups (and takes the memory rlimit where no cgroup
        limits memory), then waits for its command line on stdin (`hand_over`) and executes
        it, with stdin from ``/dev/null``. Started before the rest of the sandbox is made,
        it waits for the kernel to let it into the cgroups meanwhile."""
        procs = [str(g.path / "cgroup.procs") for g in self.groups]
        script = _JOIN
        if self.rlimit_memory and self.memory is not None:
            script = f"ulimit -d {self.memory // 1024} || exit 125; {script}"
        return ["/bin/sh", "-c", script, "sh", *procs, "--"]

    def hand_over(self, proc: subprocess.Popen[bytes], argv: Sequence[str]) -> None:
        """Give the `waiting` shell `proc` the command it executes. A shell that has already
        ended (it could not join a cgroup) is left to report its own error."""
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(shlex.join(argv).encode())
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()

    def records(self) -> list[LimitRecord]:
        """Each limit, what enforced it and whether the run reached it: read once the run has
        ended, before `close`."""
        return [self._processes(), self._memory()]

    def _processes(self) -> LimitRecord:
        group = self._group("pids")
        if self.processes is None or group is None:
            why = "no limit set" if self.processes is None else self._why_not("pids")
            return LimitRecord(
                resource="processes", limit=self.processes, enforced_by=None, hit=None, note=why
            )
        refused = _counter(_read(group.path / "pids.events"), "max")
        peak = _number(group.path / "pids.peak")
        message = None
        if refused:
            forks = "fork was" if refused == 1 else "forks were"
            message = f"process limit ({self.processes}) reached: {refused} {forks} refused"
        return LimitRecord(
            resource="processes",
            limit=self.processes,
            enforced_by=f"cgroup{group.version}",
            hit=None if refused is None else refused > 0,
            message=message,
            used=peak,
            note="" if refused is not None else "pids.events could not be read",
        )

    def _memory(self) -> LimitRecord:
        group = self._group("memory")
        if self.memory is None:
            return LimitRecord(
                resource="memory", limit=None, enforced_by=None, hit=None, note="no limit set"
            )
        if group is None:
            if self.rlimit_memory:
                return LimitRecord(
                    resource="memory",
                    limit=self.memory,
                    enforced_by="rlimit",
                    hit=None,
                    note=f"no cgroup ({self.notes.get('memory', 'none for it')}): each "
                    "process's data size is limited instead (RLIMIT_DATA); an allocation past "
                    "it fails with ENOMEM, and the kernel does not tell whether one did",
                )
            return LimitRecord(
                resource="memory",
                limit=self.memory,
                enforced_by=None,
                hit=None,
                note=self._why_not("memory"),
            )
        if group.version == 2:
            kills = _counter(_read(group.path / "memory.events"), "oom_kill")
            peak = _number(group.path / "memory.peak")
        else:
            kills = _counter(_read(group.path / "memory.oom_control"), "oom_kill")
            peak = _number(group.path / "memory.max_usage_in_bytes")
        message = None
        if kills:
            who = "a process" if kills == 1 else f"{kills} processes"
            message = (
                f"memory limit ({format_size(self.memory)}) reached: {who} killed by the kernel"
            )
        return LimitRecord(
            resource="memory",
            limit=self.memory,
            enforced_by=f"cgroup{group.version}",
            hit=None if kills is None else kills > 0,
            message=message,
            used=peak,
            note="" if kills is not None else "the cgroup's OOM kill count could not be read",
        )

    def _why_not(self, controller: str) -> str:
        return "not limited: " + self.notes.get(controller, "no cgroup for it")

    def close(self) -> None:
        """End whatever is left in the run's cgroups and remove them. Never raises."""
        for group in self.groups:
            _empty_and_remove(group)
        self.groups = []


def _pids(group: _Group) -> Iterator[int]:
    for line in _read(group.path / "cgroup.procs").split():
        if line.isdigit():
            yield int(line)


def _empty_and_remove(group: _Group, patience: float = 2.0) -> None:
    """Kill every process left in `group` and remove it; a cgroup whose last process has not
    been reaped yet is retried for up to `patience` seconds, then left to the next sweep."""
    deadline = time.monotonic() + patience
    kill = group.path / "cgroup.kill"
    while True:
        if group.version == 2 and kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        else:
            for pid in _pids(group):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        try:
            group.path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
