"""Decoys: the empty folders an isolated agent sees in place of the oracle's, and what they saw.

Each hidden folder is covered, inside the sandbox, by a read-only bind of an empty folder the
harness made (its decoy), instead of an anonymous tmpfs; the harness watches every decoy with
inotify. A program that lists a hidden folder (``ls``, a glob, ``os.walk``, ``find``) opens
it, and the watch fires: `Decoys.opened` names the folder. What cannot be seen: opening a
file by name inside it fails before anything is opened (there is no such file), and a write
fails on the read-only mount; neither reaches the decoy, so neither leaves a trace.

    with Decoys([Path("/srv/runs")]) as decoys:
        decoys.folders          # {Path('/srv/runs'): Path('/tmp/oracle-decoys-…/0')}
        ...                     # run the sandbox with them
        decoys.opened()         # [Path('/srv/runs')] if the program listed it
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

IN_ACCESS = 0x00000001
IN_OPEN = 0x00000020
IN_ONESHOT = 0x80000000  # one event per watch: the queue cannot overflow, whatever the program does
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (of the name that follows)


class Decoys:
    """An empty decoy folder per hidden folder, each watched for being opened. A context
    manager; raises `OSError` where the folders cannot be made or watched."""

    def __init__(self, hidden: Sequence[Path]) -> None:
        self.hidden = list(hidden)
        self.root: Path | None = None
        self.folders: dict[Path, Path] = {}
        self._fd = -1
        self._watches: dict[int, Path] = {}
        self._seen: set[Path] = set()

    def __enter__(self) -> Decoys:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.root = Path(tempfile.mkdtemp(prefix="oracle-decoys-"))
        try:
            self._fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1 failed")
            for i, folder in enumerate(self.hidden):
                decoy = self.root / str(i)
                decoy.mkdir()
                wd = libc.inotify_add_watch(
                    self._fd, os.fsencode(decoy), IN_OPEN | IN_ACCESS | IN_ONESHOT
                )
                if wd < 0:
                    raise OSError(ctypes.get_errno(), f"cannot watch {decoy}")
                self.folders[folder] = decoy
                self._watches[wd] = folder
        except BaseException:
            self.close()
            raise

    def opened(self) -> list[Path]:
        """The hidden folders the program opened so far, in the order given."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, at)
                at += _EVENT.size + length
                if mask & (IN_OPEN | IN_ACCESS) and wd in self._watches:
                    self._seen.add(self._watches[wd])
        return [f for f in self.hidden if f in self._seen]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
