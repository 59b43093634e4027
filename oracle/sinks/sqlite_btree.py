"""The SQLite file format, as far as `oracle.sinks.sqlite_pages` reads it: the header, table
b-tree pages and their cells (https://sqlite.org/fileformat.html), and the main file's bytes
read under a snapshot's read transaction."""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

_LEAF, _INTERIOR = 0x0D, 0x05
_MAX_DEPTH = 40


class NotUnderstood(Exception):
    """A page that is not what a table b-tree holds: read the table whole."""


@dataclass(frozen=True)
class Header:
    page_size: int
    usable: int
    fields: tuple[int, ...]


def read_header(data: bytes) -> Header:
    if len(data) < 100 or data[:16] != b"SQLite format 3\x00":
        raise NotUnderstood("not a SQLite database image")
    size = int.from_bytes(data[16:18])
    page_size = 65536 if size == 1 else size
    reserved = data[20]
    if page_size < 512 or page_size & (page_size - 1) or len(data) % page_size:
        raise NotUnderstood(f"page size {page_size} does not fit an image of {len(data)} bytes")
    fields = (
        page_size,
        reserved,
        data[18],
        data[19],
        int.from_bytes(data[40:44]),  # schema cookie
        int.from_bytes(data[44:48]),  # schema format
        int.from_bytes(data[52:56]),  # largest root page: auto-vacuum when not 0
        int.from_bytes(data[56:60]),  # text encoding
    )
    return Header(page_size, page_size - reserved, fields)


FIELD_NAMES = (
    "page size",
    "reserved bytes per page",
    "file format (write version)",
    "file format (read version)",
    "schema cookie (VACUUM?)",
    "schema format",
    "auto-vacuum",
    "text encoding",
)


def varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        b = data[pos + i]
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, pos + i + 1
    return (value << 8) | data[pos + 8], pos + 9


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Tree:
    """Page-level reading of one image."""

    def __init__(self, data: bytes, head: Header) -> None:
        self.data = data
        self.head = head
        self.pages = len(data) // head.page_size

    def _start(self, pgno: int) -> tuple[int, int]:
        if not 1 < pgno <= self.pages:
            raise NotUnderstood(f"page {pgno} is outside the database")
        off = (pgno - 1) * self.head.page_size
        return off, off  # a table's pages are never page 1, whose header starts at 100

    def _pointers(self, pgno: int, off: int, hdr: int, n: int, array: int) -> tuple[int, ...]:
        end = array + 2 * n
        if end - off > self.head.usable:
            raise NotUnderstood(f"page {pgno}: {n} cells do not fit")
        ptrs: tuple[int, ...] = struct.unpack_from(f">{n}H", self.data, array)
        if n and (min(ptrs) < end - off or max(ptrs) >= self.head.usable):
            raise NotUnderstood(f"page {pgno}: a cell pointer points outside its content")
        return ptrs

    def leaves(self, root: int) -> list[int]:
        """The table's leaf pages in key order; every page of its b-tree in `self.seen`."""
        self.seen: list[int] = []
        out: list[int] = []
        self._walk(root, 0, out, set())
        return out

    def _walk(self, pgno: int, depth: int, out: list[int], seen: set[int]) -> None:
        if depth > _MAX_DEPTH or pgno in seen:
            raise NotUnderstood(f"page {pgno} is reached twice or too deep")
        seen.add(pgno)
        self.seen.append(pgno)
        off, hdr = self._start(pgno)
        data = self.data
        kind = data[hdr]
        if kind == _LEAF:
            out.append(pgno)
            return
        if kind != _INTERIOR:
            raise NotUnderstood(f"page {pgno} is of type {kind}, not a table b-tree page")
        n = int.from_bytes(data[hdr + 3 : hdr + 5])
        ptrs = self._pointers(pgno, off, hdr, n, hdr + 12)
        children = [int.from_bytes(data[off + p : off + p + 4]) for p in ptrs]
        children.append(int.from_bytes(data[hdr + 8 : hdr + 12]))
        ps, pages = self.head.page_size, self.pages
        for child in children:
            # Leaves, most of the pages, are taken here without a call of their own.
            if 1 < child <= pages and child not in seen and data[(child - 1) * ps] == _LEAF:
                seen.add(child)
                self.seen.append(child)
                out.append(child)
            else:
                self._walk(child, depth + 1, out, seen)

    def leaf(self, pgno: int) -> tuple[int, int, int, bool]:
        """A leaf page's first rowid, last rowid, cell count, and whether a cell spills to
        overflow pages."""
        off, hdr = self._start(pgno)
        data = self.data
        n = int.from_bytes(data[hdr + 3 : hdr + 5])
        if n == 0:
            return 0, 0, 0, False
        ptrs = self._pointers(pgno, off, hdr, n, hdr + 8)
        first = signed(varint(data, varint(data, off + ptrs[0])[1])[0])
        last = signed(varint(data, varint(data, off + ptrs[-1])[1])[0])
        limit = self.head.usable - 35
        if n > 1:
            # Most pages at once: when every cell's payload size is a varint of two bytes
            # whose first byte is small enough, no payload exceeds what the page holds.
            at = [off + p for p in ptrs]
            first_bytes = itemgetter(*at)(data)
            second_bytes = itemgetter(*[a + 1 for a in at])(data)
            if (
                min(first_bytes) >= 0x80
                and max(second_bytes) < 0x80
                and (((max(first_bytes) & 0x7F) << 7) | 0x7F) <= limit
            ):
                return first, last, n, False
        overflow = False
        for p in ptrs:
            # The payload size, a varint: one or two bytes in nearly every cell.
            b0 = data[off + p]
            if b0 < 0x80:
                size = b0
            else:
                b1 = data[off + p + 1]
                size = ((b0 & 0x7F) << 7) | b1 if b1 < 0x80 else varint(data, off + p)[0]
            if size > limit:
                overflow = True
                break
        return first, last, n, overflow

    def overflows(self, pgno: int) -> bool:
        """Whether a table leaf page holds a cell that spills to overflow pages."""
        return self.leaf(pgno)[3]

    def page(self, pgno: int) -> bytes:
        ps = self.head.page_size
        return self.data[(pgno - 1) * ps : pgno * ps]


def file_image(cur: Any, limit: int) -> bytes | None:
    """The main database file's bytes, read through SQLite's own open file, or None.

    Only in rollback-journal mode: the read transaction holds a shared lock, under which no
    writer may change the file, so its bytes are the pages SQLite reads. The file is read
    through the descriptor SQLite opened (found in ``/proc/self/fd``), never opened again:
    closing a second descriptor of the file would drop SQLite's locks on it (POSIX locks
    belong to the process), and a path can name another file by the time it is opened. In
    WAL mode the pages come from `sqlite3_serialize` instead, which reads through the log."""
    if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        return None
    rows = cur.execute("PRAGMA database_list").fetchall()
    path = next((r[2] for r in rows if r[1] == "main"), "")
    if not path:
        return None
    try:
        where = os.stat(path)
        # Every descriptor of this process on the file the path names, or that was opened
        # under the path: if one of these is on another file, which one SQLite reads is not
        # known (the file was replaced), and the pages come through SQLite instead.
        fds: list[tuple[int, bool]] = []
        for entry in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/self/fd/{entry}")
                same = _same_file(os.stat(f"/proc/self/fd/{entry}"), where)
                if same or link in (path, f"{path} (deleted)"):
                    fds.append((int(entry), same))
        if not fds or not all(same for _, same in fds):
            return None
        fd = fds[0][0]
        size = os.fstat(fd).st_size
        if size > limit:
            return None
        data = os.pread(fd, size, 0)
        if len(data) != size or not _same_file(os.stat(path), where):
            return None
    except OSError:
        return None
    count = cur.execute("PRAGMA page_count").fetchone()[0]
    if len(data) < 100 or count * _page_size(data) != len(data):
        return None
    return data


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _page_size(data: bytes) -> int:
    size = int.from_bytes(data[16:18])
    return 65536 if size == 1 else size
