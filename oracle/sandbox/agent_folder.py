"""The agent folder with its size limit: a tmpfs of the task's ``disk`` limit
(`oracle.authoring.limits`).

The sandbox mounts it on its agent folder when it opens and unmounts it when it closes, so
that everything in between — seeding, every reset, the agent's run and the snapshots after it
— sees one folder; a write past the limit fails with ENOSPC. Only root may mount: elsewhere
the folder stays on the host's disk without a limit, and the record says so.

Whether the agent reached the limit is read from the file system itself (no block or inode
left when it ended), never from what it printed. A process that dies with its sandbox open
leaves the tmpfs mounted; the next process to mount one unmounts it (each mount has an owner
record beside it, `oracle.fixtures.owner`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
from pathlib import Path

from oracle.authoring.limits import KiB, format_size
from oracle.evidence.invocation import LimitRecord

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
#: The source name of every agent folder's tmpfs, so that a crashed process's are found.
SOURCE = "oracle-agent"
#: Each file and folder takes an inode; a tmpfs gets one per 4 KiB of its size (at least this
#: many), so that a folder of empty files cannot hold kernel memory without bound either.
MIN_INODES = 4096
_swept = False


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _umount(path: Path) -> None:
    """Detach the mount at `path` (lazily: what still holds it open keeps it until it lets go).
    Raises `OSError`."""
    if _libc().umount2(os.fsencode(path), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))


def _unescape(field: str) -> str:
    """A path of ``/proc/self/mountinfo`` (space, tab, newline and backslash are octal)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def agent_folder_mounts() -> list[Path]:
    """Where this mount namespace has an agent folder's tmpfs mounted (any process's)."""
    found: list[Path] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 2 and tail[:2] == ["tmpfs", SOURCE]:
            found.append(Path(_unescape(fields[4])))
    return found


def _owner_file(path: Path) -> Path:
    return path.parent / f"{path.name}.owner"


def sweep_stale_folders() -> list[Path]:
    """Unmount the agent folders of processes that are gone (a crashed or killed run), which
    would otherwise hold their memory until the next reboot; the folders swept. A folder whose
    owner record is missing or unreadable is left alone."""
    swept: list[Path] = []
    for path in agent_folder_mounts():
        try:
            text = _owner_file(path).read_text(encoding="utf-8")
        except OSError:
            continue
        from oracle.fixtures.owner import stale_record  # the fixtures import the core

        if stale_record(text):
            with contextlib.suppress(OSError):
                _umount(path)
                _owner_file(path).unlink(missing_ok=True)
                swept.append(path)
    return swept


class AgentFolder:
    """The sandbox's agent folder with its size limit: a tmpfs of `limit` bytes mounted on
    `path` by `mount`, for the sandbox's lifetime. Where it cannot be mounted (not root, no
    tmpfs), the folder stays on the host's disk without a limit and `note` says why.

    Example::

        folder = AgentFolder(Path("/tmp/oracle-x/agent"), 8 * MiB)
        folder.mount()
        ...                     # fixtures seed it, the agent writes, sinks snapshot it
        folder.record().message # 'agent folder full at 8 MiB', where the agent filled it
        folder.unmount()
    """

    def __init__(self, path: Path, limit: int | None) -> None:
        self.path = path
        self.limit = limit
        self.mounted = False
        self.inodes: int | None = None
        self.note = "" if limit is not None else "no limit set"

    def mount(self) -> None:
        """Mount the size-limited tmpfs on the (existing, empty) folder; never raises: where it
        cannot, the folder is left as it is and `note` says why."""
        global _swept
        if self.limit is None:
            return
        if not _swept:
            _swept = True
            sweep_stale_folders()
        st = self.path.stat()
        self.inodes = max(MIN_INODES, self.limit // (4 * KiB))
        options = (
            f"size={self.limit},nr_inodes={self.inodes},mode={st.st_mode & 0o7777:o},"
            f"uid={st.st_uid},gid={st.st_gid}"
        )
        try:
            from oracle.fixtures.owner import Owner

            # The owner record first: a mount is never left without one.
            _owner_file(self.path).write_text(Owner.current().to_text(), encoding="utf-8")
            libc = _libc()
            flags = MS_NOSUID | MS_NODEV
            if libc.mount(
                SOURCE.encode(), os.fsencode(self.path), b"tmpfs", flags, options.encode()
            ):
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
        except (OSError, AttributeError) as exc:
            _owner_file(self.path).unlink(missing_ok=True)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            hint = (
                " (mounting a tmpfs needs root)"
                if getattr(exc, "errno", None) == errno.EPERM
                else ""
            )
            self.note = (
                f"not limited: a size-limited tmpfs could not be mounted on the agent folder: "
                f"{why}{hint}; the folder is on the host's disk"
            )
            return
        self.mounted = True
        self.note = f"a tmpfs of {format_size(self.limit)} and {self.inodes} files and folders"

    def unmount(self) -> None:
        """Unmount it (its content is gone afterwards). Idempotent; never raises."""
        if self.mounted:
            with contextlib.suppress(OSError):
                _umount(self.path)
            self.mounted = False
        _owner_file(self.path).unlink(missing_ok=True)

    def record(self) -> LimitRecord:
        """The agent folder's limit as the agent left it: full or not, and how much it used.

        Full means no block (or no inode) left when the agent ended, which is what a write
        refused with ENOSPC leaves; a folder the agent filled and then emptied again before
        it ended is not told apart from one it never filled."""
        if not self.mounted or self.limit is None:
            return LimitRecord(
                resource="disk", limit=self.limit, enforced_by=None, hit=None, note=self.note
            )
        try:
            st = os.statvfs(self.path)
        except OSError as exc:
            return LimitRecord(
                resource="disk",
                limit=self.limit,
                enforced_by="tmpfs",
                hit=None,
                note=f"{self.note}; its fullness could not be read: {exc}",
            )
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        message = None
        if st.f_bavail == 0:
            message = f"agent folder full at {format_size(self.limit)}"
        elif st.f_favail == 0:
            message = (
                f"agent folder full at {st.f_files} files and folders "
                f"(its size limit: {format_size(self.limit)})"
            )
        return LimitRecord(
            resource="disk",
            limit=self.limit,
            enforced_by="tmpfs",
            hit=message is not None,
            message=message,
            used=used,
            note=self.note,
        )
