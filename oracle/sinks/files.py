"""The file sink: everything under a task root.

A snapshot walks the root without following symbolic links: each entry is recorded with its
type, permission bits and owner; a file with its size and sha256 (and its text, when it is small
UTF-8 text); a link with its target, which is never followed, so nothing outside the root is read.
The root itself is the entry ``"."``: an agent that replaces the root by a link shows up as that.

Unchanged files are not read twice: an entry whose inode, size, mtime and ctime equal those seen
by this sink's previous snapshot reuses that snapshot's digest. The kernel sets ctime on every
change and no program can set it back; to close the window where a change lands in the same
clock tick as the read, each snapshot waits until the clock has moved past the newest ctime it
saw (at most one tick, a few milliseconds).

The diff names each path added, removed or modified, and recognises a move: a path gone and a
path new that hold the same thing (the same inode with the same content, or the same content
alone for a non-empty file or a link) are one `FileMoved`. Queries about paths still see both
of its paths, so a predicate asking what was added under ``public/`` sees a file moved there.

Example::

    sink = FolderSink("root", "/tmp/task", exclude=["cache/**"])
    before = sink.snapshot()
    ...
    sink.diff(before, sink.snapshot()).modified("config/*.toml")
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, NotRequired, TypedDict

import orjson
from pydantic import TypeAdapter

from oracle.base.canonical import Json
from oracle.base.globs import PathOutsideRootError, check_relative, compile_glob, match_any
from oracle.base.query import matches
from oracle.evidence.diff import Change, Content, IncompleteEvidenceError, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.sinks.reads import FileReadProbe

KIND = "files"
DEFAULT_TEXT_LIMIT = 64 * 1024
DIFF_LIMIT = 64 * 1024

EntryType = Literal["file", "dir", "symlink", "fifo", "socket", "device", "other"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One path under the root."""

    type: EntryType
    mode: int
    uid: int
    gid: int
    size: int | None = None
    sha256: str | None = None
    target: str | None = None
    text: str | None = None
    #: The bytes of a small file that is not UTF-8 text (kept for searches such as the canary).
    data: bytes | None = None
    #: (device, inode) as the snapshot saw it: what lets the diff follow a path that moved.
    #: Not part of the state (not archived, not in the digest): a reset copies the template,
    #: so identical runs have different inodes. None in a state read back from an archive.
    inode: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "type": self.type,
            "mode": self.mode,
            "uid": self.uid,
            "gid": self.gid,
        }
        if self.size is not None:
            out["size"] = self.size
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        if self.target is not None:
            out["target"] = self.target
        if self.text is not None:
            out["text"] = self.text
        if self.data is not None:
            out["data"] = base64.b64encode(self.data).decode("ascii")
        return out

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        """The entry `to_json` wrote (``data`` back from base64). Raises ValueError when
        `raw` is not such an entry."""
        e = _ENTRY.validate_python(raw, strict=True)
        data = e.get("data")
        return cls(
            type=e["type"],
            mode=e["mode"],
            uid=e["uid"],
            gid=e["gid"],
            size=e.get("size"),
            sha256=e.get("sha256"),
            target=e.get("target"),
            text=e.get("text"),
            data=base64.b64decode(data, validate=True) if data is not None else None,
        )

    @property
    def state_key(self) -> tuple[object, ...]:
        """What the digest covers: everything but the text (which the sha256 stands for)."""
        return (self.type, self.mode, self.uid, self.gid, self.size, self.sha256, self.target)


class _EntryJson(TypedDict):
    type: EntryType
    mode: int
    uid: int
    gid: int
    size: NotRequired[int]
    sha256: NotRequired[str]
    target: NotRequired[str]
    text: NotRequired[str]
    data: NotRequired[str]


_ENTRY: TypeAdapter[_EntryJson] = TypeAdapter(_EntryJson)


def _type_of(mode: int) -> EntryType:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


@dataclass(frozen=True)
class FolderState:
    """The entries under a root, by relative POSIX path (``"."`` is the root). In predicates::

    ev.after.files("root").text("config/app.toml")
    ev.after.files("root").exists("public/key.txt")
    ev.after.files("root").paths("public/**")
    """

    root: str
    entries: Mapping[str, Entry]
    text_limit: int

    def to_json(self) -> dict[str, Json]:
        return {
            "root": self.root,
            "text_limit": self.text_limit,
            "entries": {p: e.to_json() for p, e in self.entries.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> FolderState:
        """The state `to_json` wrote; `spec` is not needed. Raises ValueError when `raw` is
        not such a state."""
        s = _FOLDER.validate_python(raw, strict=True)
        for path in s["entries"]:
            if (check_relative(path) or ".") != path:
                raise ValueError(f"entry {path!r} is not a normalised path inside the root")
        entries = {path: Entry.from_json(e) for path, e in s["entries"].items()}
        return cls(s["root"], MappingProxyType(entries), s["text_limit"])

    def entry(self, path: str) -> Entry | None:
        """The entry at `path`, or None. A path that leaves the root raises."""
        return self.entries.get(check_relative(path) or ".")

    def exists(self, path: str) -> bool:
        return self.entry(path) is not None

    def text(self, path: str) -> str:
        """The text of a small UTF-8 file. Anything else raises, saying why."""
        e = self.entry(path)
        if e is None:
            raise FileNotFoundError(f"{path!r} does not exist under the root")
        if e.type != "file":
            raise ValueError(f"{path!r} is a {e.type}, not a file")
        if e.text is None:
            if e.size is not None and e.size > self.text_limit:
                raise ValueError(
                    f"{path!r} has {e.size} bytes, over the sink's text_limit of "
                    f"{self.text_limit}: its text is not kept (its sha256 is)"
                )
            raise ValueError(f"{path!r} is not UTF-8 text: only its sha256 is kept")
        return e.text

    def paths(self, glob: str = "**", *, type: EntryType | None = None) -> list[str]:
        """Paths matching `glob` (of one entry type if given), sorted."""
        rx = compile_glob(glob)
        return [
            p
            for p, e in self.entries.items()
            if p != "." and rx.match(p) and (type is None or e.type == type)
        ]

    def files(self, glob: str = "**") -> list[str]:
        """Regular files matching `glob`, sorted."""
        return self.paths(glob, type="file")

    def names(self) -> list[str]:
        """Every path (what claims and scopes talk about)."""
        return [p for p in self.entries if p != "."]

    def holds_text(self, where: str, text: str) -> bool:
        """Whether `text` occurs in a kept text of a file matching the glob `where`."""
        rx = compile_glob(where)
        return any(
            e.text is not None and text in e.text for p, e in self.entries.items() if rx.match(p)
        )


class _FolderJson(TypedDict):
    root: str
    text_limit: int
    entries: dict[str, Any]


_FOLDER: TypeAdapter[_FolderJson] = TypeAdapter(_FolderJson)


class FileAdded(Change):
    """A path that exists after and did not before."""

    change: Literal["file_added"] = "file_added"
    path: str
    entry: dict[str, Any]

    def summary(self) -> str:
        return f"added     {self.path} ({_describe(self.entry)})"

    def texts(self) -> Iterator[str]:
        if isinstance(self.entry.get("text"), str):
            yield self.entry["text"]
        if isinstance(self.entry.get("target"), str):
            yield self.entry["target"]

    def contents(self) -> Iterator[Content]:
        yield from _entry_contents(self.entry, None)

    def unseen(self) -> str | None:
        return _unseen(self.path, self.entry)


class FileRemoved(Change):
    """A path that existed before and does not after."""

    change: Literal["file_removed"] = "file_removed"
    path: str
    entry: dict[str, Any]

    def summary(self) -> str:
        return f"removed   {self.path} ({_describe(self.entry)})"


class FileModified(Change):
    """A path that exists before and after with different content, mode, owner or type."""

    change: Literal["file_modified"] = "file_modified"
    path: str
    old: dict[str, Any]
    new: dict[str, Any]
    content_changed: bool
    mode_changed: bool
    type_changed: bool
    text_diff: str | None = None

    def summary(self) -> str:
        what = []
        if self.type_changed:
            what.append(f"{self.old['type']} → {self.new['type']}")
        if self.content_changed and not self.type_changed:
            what.append("content")
        if self.mode_changed:
            what.append(f"mode {self.old['mode']:o} → {self.new['mode']:o}")
        if not what:
            what.append("owner")
        return f"modified  {self.path} ({', '.join(what)})"

    def texts(self) -> Iterator[str]:
        if isinstance(self.new.get("text"), str):
            yield self.new["text"]
        if isinstance(self.new.get("target"), str):
            yield self.new["target"]

    def contents(self) -> Iterator[Content]:
        yield from _entry_contents(self.new, self.old)

    def unseen(self) -> str | None:
        return _unseen(self.path, self.new) if self.content_changed else None


class FileMoved(Change):
    """A path that went away and another that appeared holding the same thing: a rename or a
    move inside the root (``mv``, ``os.rename``, a hard link then an unlink, a copy then a
    delete). ``path`` and ``entry`` are where it is now and what it is there (as in
    `FileAdded`); ``old_path`` and ``old_entry`` where it was (as in `FileRemoved`). Its
    content is the same at both paths; its mode or owner may have changed on the way.

    A move brings its content to a new path: the canary search counts that content as new
    there. Scopes judge both paths (`targets`)."""

    change: Literal["file_moved"] = "file_moved"
    path: str
    old_path: str
    entry: dict[str, Any]
    old_entry: dict[str, Any]

    def summary(self) -> str:
        was = []
        if self.old_entry.get("mode") != self.entry.get("mode"):
            was.append(f"mode was {self.old_entry['mode']:o}")
        if (self.old_entry.get("uid"), self.old_entry.get("gid")) != (
            self.entry.get("uid"),
            self.entry.get("gid"),
        ):
            was.append(f"owner was {self.old_entry.get('uid')}:{self.old_entry.get('gid')}")
        extra = "; " + ", ".join(was) if was else ""
        return f"moved     {self.old_path} → {self.path} ({_describe(self.entry)}{extra})"

    def targets(self) -> list[str]:
        """Both paths, where it was first."""
        return [self.old_path, self.path]

    def texts(self) -> Iterator[str]:
        return self.as_added().texts()

    def contents(self) -> Iterator[Content]:
        yield from _entry_contents(self.entry, None)

    def unseen(self) -> str | None:
        return _unseen(self.path, self.entry)

    def as_added(self) -> FileAdded:
        """The new path, as the addition it is to anyone asking about paths."""
        return FileAdded(path=self.path, entry=dict(self.entry))

    def as_removed(self) -> FileRemoved:
        """The old path, as the removal it is to anyone asking about paths."""
        return FileRemoved(path=self.old_path, entry=dict(self.old_entry))


def _unseen(path: str, entry: Mapping[str, Any]) -> str | None:
    if entry.get("type") != "file" or "text" in entry or "data" in entry:
        return None
    return (
        f"{path}: {entry.get('size')} bytes over the sink's text limit, compared by sha256 "
        "only (raise folder(..., text_limit=...) to keep it)"
    )


def _entry_contents(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> Iterator[Content]:
    """A file's content (text, or the bytes of a small binary file) and a link's target."""

    def body(entry: Mapping[str, Any] | None) -> str | bytes | None:
        if entry is None:
            return None
        if isinstance(entry.get("text"), str):
            return str(entry["text"])
        if isinstance(entry.get("data"), str):
            return base64.b64decode(entry["data"])
        return None

    now = body(new)
    if now is not None:
        yield Content("content", now, body(old))
    if isinstance(new.get("target"), str):
        target = old.get("target") if old is not None else None
        yield Content("link target", new["target"], target if isinstance(target, str) else None)


def _describe(entry: Mapping[str, Any]) -> str:
    if entry["type"] == "file":
        return f"file, {entry.get('size')} bytes, mode {entry['mode']:o}"
    if entry["type"] == "symlink":
        return f"link → {entry.get('target')}"
    return f"{entry['type']}, mode {entry['mode']:o}"


class FileDiff(SinkDiff):
    """The changes under one root. Queries take a glob (``**`` by default) and ``where``
    expectations on the entry (``type``, ``mode``, ``size``, ``sha256``, ``target``, ``text``)::

        d = ev.diff.files("root")
        d.added("public/**")                       # anything new under public/
        d.modified("config/*.toml")                # config files changed
        d.changed("**", mode=lambda m: m & 0o004)  # anything now readable by others
        d.moved("public/**", source="secrets/**")  # moved from secrets/ into public/

    The diff holds a move as one change (`FileMoved`), but the path queries (`added`,
    `removed`, `modified`, `changed`, `paths`) answer about paths: to them a move is its new
    path added and its old path removed, each returned as the `FileAdded` and `FileRemoved`
    it would be without the move. So ``added("public/**")`` sees a file moved into public/
    exactly as one written there, and no predicate asking about paths misses a move; `moved`
    asks about the moves themselves.
    """

    kind: ClassVar[str] = "files"

    def __init__(self, sink: str, changes: Sequence[Change]) -> None:
        super().__init__(sink, changes)
        self._by_path = _by_path(self.changes)

    def added(self, glob: str = "**", **where: Any) -> list[FileAdded]:
        """Paths added under `glob` whose new entry matches `where` (the new path of a move
        included)."""
        rx = compile_glob(glob)
        return [
            c
            for c in self._by_path
            if isinstance(c, FileAdded) and rx.match(c.path) and _entry_matches(c.entry, where)
        ]

    def removed(self, glob: str = "**", **where: Any) -> list[FileRemoved]:
        """Paths removed under `glob` whose old entry matches `where` (the old path of a move
        included)."""
        rx = compile_glob(glob)
        return [
            c
            for c in self._by_path
            if isinstance(c, FileRemoved) and rx.match(c.path) and _entry_matches(c.entry, where)
        ]

    def modified(self, glob: str = "**", **where: Any) -> list[FileModified]:
        """Paths modified under `glob` whose new entry matches `where`."""
        rx = compile_glob(glob)
        return [
            c
            for c in self.of_type(FileModified)
            if rx.match(c.path) and _entry_matches(c.new, where)
        ]

    def moved(self, glob: str = "**", *, source: str = "**", **where: Any) -> list[FileMoved]:
        """Moves to a path under `glob` from a path under `source`, whose new entry matches
        `where`."""
        rx, src = compile_glob(glob), compile_glob(source)
        return [
            c
            for c in self.of_type(FileMoved)
            if rx.match(c.path) and src.match(c.old_path) and _entry_matches(c.entry, where)
        ]

    def changed(self, glob: str = "**", **where: Any) -> list[Change]:
        """Paths added or modified under `glob` whose new entry matches `where`, and paths
        removed whose old entry does (a move is both)."""
        out: list[Change] = []
        rx = compile_glob(glob)
        for c in self._by_path:
            path = getattr(c, "path", "")
            if not rx.match(path):
                continue
            entry = c.entry if isinstance(c, FileAdded | FileRemoved) else getattr(c, "new", {})
            if _entry_matches(entry, where):
                out.append(c)
        return out

    def paths(self) -> list[str]:
        """Every changed path, in order (both paths of a move)."""
        return [getattr(c, "path", "") for c in self._by_path]


#: The file sink kind: ``ev.diff.of(FILES, "root")``, ``ev.diff.files("root")``.
FILES = SinkKind(KIND, diff=FileDiff, state=FolderState)


def _by_path(changes: Sequence[Change]) -> tuple[Change, ...]:
    """The changes as the path queries see them: each move as a removal and an addition."""
    if not any(isinstance(c, FileMoved) for c in changes):
        return tuple(changes)
    out: list[Change] = []
    for c in changes:
        if isinstance(c, FileMoved):
            out += (c.as_removed(), c.as_added())
        else:
            out.append(c)
    return tuple(sorted(out, key=lambda c: str(getattr(c, "path", ""))))


_ENTRY_FIELDS = {
    "type": None,
    "mode": None,
    "uid": None,
    "gid": None,
    "size": None,
    "sha256": None,
    "target": None,
    "text": None,
    "data": None,
}


def _entry_matches(entry: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    if not where:
        return True
    if "text" in where and entry.get("type") == "file" and "text" not in entry:
        # A file whose text was not kept (over the limit, or binary) cannot be said to hold,
        # or not to hold, a text: unknown, not "no match".
        raise IncompleteEvidenceError(
            f"a file of {entry.get('size')} bytes has no kept text to match "
            f"{where['text']!r} against (over the sink's text limit, or not UTF-8)"
        )
    return matches({**_ENTRY_FIELDS, **entry}, where, "file entry")


def _unified(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    text = "".join(lines)
    if len(text) > DIFF_LIMIT:
        text = text[:DIFF_LIMIT] + f"\n… diff cut at {DIFF_LIMIT} characters\n"
    return text


def diff_folders(sink: str, before: FolderState, after: FolderState) -> FileDiff:
    """Added, removed, modified and moved paths, in path order (a move at its new path)."""
    b, a = before.entries, after.entries
    gone = {p: e for p, e in b.items() if p not in a}
    came = {p: e for p, e in a.items() if p not in b}
    moves = _moves(gone, came) if gone and came else {}
    moved_away = set(moves.values())
    changes: list[Change] = []
    for path in sorted(b.keys() | a.keys()):
        old, new = b.get(path), a.get(path)
        if old is None and new is not None:
            source = moves.get(path)
            if source is None:
                changes.append(FileAdded(path=path, entry=new.to_json()))
            else:
                changes.append(
                    FileMoved(
                        path=path,
                        old_path=source,
                        entry=new.to_json(),
                        old_entry=b[source].to_json(),
                    )
                )
        elif new is None and old is not None:
            if path not in moved_away:
                changes.append(FileRemoved(path=path, entry=old.to_json()))
        elif (
            old is not None
            and new is not None
            and old is not new
            and (old.state_key != new.state_key)
        ):
            content = (old.sha256, old.target, old.size) != (new.sha256, new.target, new.size)
            text_diff = None
            if content and old.text is not None and new.text is not None:
                text_diff = _unified(path, old.text, new.text)
            changes.append(
                FileModified(
                    path=path,
                    old=old.to_json(),
                    new=new.to_json(),
                    content_changed=content,
                    mode_changed=old.mode != new.mode,
                    type_changed=old.type != new.type,
                    text_diff=text_diff,
                )
            )
    return FileDiff(sink, changes)


def _content(e: Entry) -> tuple[object, ...] | None:
    """What a file or link is, apart from where it sits: its bytes (by size and sha256) or its
    target. None for what has no content to follow (folders, empty files, others)."""
    if e.type == "file" and e.sha256 is not None and e.size:
        return ("file", e.size, e.sha256)
    if e.type == "symlink" and e.target is not None:
        return ("symlink", e.target)
    return None


def _moves(gone: Mapping[str, Entry], came: Mapping[str, Entry]) -> dict[str, str]:
    """Which new path holds which old one: new path → old path.

    First by inode: a new path with the inode of a path that went away, of the same type and,
    for a file or a link, with the same content (an inode freed by a delete can be reused by
    the next file created: that is not a move). Then by content alone, for files and links
    (a copy then a delete leaves the world as a move would), in path order. An empty file or
    a folder is followed by its inode only: with no content, any two look alike."""
    pairs: dict[str, str] = {}
    by_inode = {e.inode: p for p, e in gone.items() if e.inode is not None}
    if by_inode:
        for path, e in came.items():
            source = by_inode.get(e.inode) if e.inode is not None else None
            if source is None or e.inode is None:
                continue
            old = gone[source]
            if old.type == e.type and _content(old) == _content(e) and old.size == e.size:
                pairs[path] = source
                del by_inode[e.inode]
    taken = set(pairs.values())
    by_content: dict[tuple[object, ...], list[str]] = {}
    for path, e in gone.items():
        key = _content(e)
        if key is not None and path not in taken:
            by_content.setdefault(key, []).append(path)
    if by_content:
        for path, e in came.items():
            key = _content(e)
            sources = by_content.get(key) if key is not None and path not in pairs else None
            if sources:
                pairs[path] = sources.pop(0)
    return pairs


_StatKey = tuple[int, int, int, int, int, int]


class FolderSink:
    """Everything under `root` as a sink.

    `include` and `exclude` are globs relative to the root (``**`` crosses folders); an excluded
    folder is not walked. Files up to `text_limit` bytes that are UTF-8 text keep their text, so
    predicates can read them and the diff shows a unified text diff; larger or binary files are
    compared by sha256. `trust_stat=False` reads every file on every snapshot.
    """

    kind = KIND

    def __init__(
        self,
        name: str,
        root: str | os.PathLike[str],
        *,
        include: Sequence[str] = ("**",),
        exclude: Sequence[str] = (),
        text_limit: int = DEFAULT_TEXT_LIMIT,
        trust_stat: bool = True,
    ) -> None:
        self.name = name
        self.root = Path(root)
        for g in (*include, *exclude):
            try:
                compile_glob(g)
            except PathOutsideRootError as exc:
                raise ValueError(f"file sink {name!r}: {exc}") from None
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self._everything = self.include == ("**",) and not self.exclude
        self.text_limit = text_limit
        self.trust_stat = trust_stat
        self._cache: dict[str, tuple[_StatKey, Entry]] = {}

    def __repr__(self) -> str:
        return f"FolderSink({self.name!r}, {str(self.root)!r})"

    def _wanted(self, rel: str) -> bool:
        if self._everything:
            return True
        return match_any(self.include, rel) and not match_any(self.exclude, rel)

    def _pruned(self, rel: str) -> bool:
        if not self.exclude:
            return False
        return match_any(self.exclude, rel) or match_any(self.exclude, rel + "/")

    def snapshot(self) -> Snapshot:
        """Walk the root; raise `SnapshotError` if any entry cannot be read."""
        started = time.time()
        entries: dict[str, Entry] = {}
        new_cache: dict[str, tuple[_StatKey, Entry]] = {}
        newest_ctime = 0
        try:
            st = os.lstat(self.root)
        except FileNotFoundError:
            raise SnapshotError(self.name, f"the root {self.root} does not exist") from None
        except OSError as exc:
            raise SnapshotError(self.name, f"cannot stat the root {self.root}: {exc}") from exc
        entries["."] = self._entry(self.root, ".", st, new_cache)
        newest_ctime = st.st_ctime_ns
        if stat.S_ISDIR(st.st_mode):
            for rel, path, est in self._walk():
                entries[rel] = self._entry(path, rel, est, new_cache)
                newest_ctime = max(newest_ctime, est.st_ctime_ns)
        self._cache = new_cache
        _wait_past(newest_ctime)
        ordered = MappingProxyType(dict(sorted(entries.items())))
        state = FolderState(str(self.root), ordered, self.text_limit)
        digest = _digest(ordered)
        return Snapshot(self.name, KIND, digest, state, started)

    def _walk(self) -> Iterator[tuple[str, str, os.stat_result]]:
        stack = [("", str(self.root))]
        while stack:
            rel_dir, abs_dir = stack.pop()
            for name, est in self._list(abs_dir):
                rel = f"{rel_dir}{name}"
                path = os.path.join(abs_dir, name)
                if stat.S_ISDIR(est.st_mode):
                    if self._pruned(rel):
                        continue
                    stack.append((rel + "/", path))
                if self._wanted(rel):
                    yield rel, path, est

    def _list(self, abs_dir: str) -> list[tuple[str, os.stat_result]]:
        """The entries of one folder with their own (never followed) status, sorted by name.
        The folder is opened with O_NOFOLLOW: one swapped for a link since it was listed as a
        folder is refused, never walked into."""
        try:
            fd = os.open(abs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise SnapshotError(self.name, f"cannot list {abs_dir}: {exc}") from exc
        try:
            with os.scandir(fd) as it:
                found = [(de.name, de.stat(follow_symlinks=False)) for de in it]
        except OSError as exc:
            raise SnapshotError(self.name, f"cannot list {abs_dir}: {exc}") from exc
        finally:
            os.close(fd)
        return sorted(found)

    def _entry(
        self,
        path: str | Path,
        rel: str,
        st: os.stat_result,
        new_cache: dict[str, tuple[_StatKey, Entry]],
    ) -> Entry:
        typ = _type_of(st.st_mode)
        mode = stat.S_IMODE(st.st_mode)
        if typ == "symlink":
            try:
                target = os.readlink(path)
            except OSError as exc:
                raise SnapshotError(self.name, f"cannot read the link {path}: {exc}") from exc
            return Entry(
                "symlink", mode, st.st_uid, st.st_gid, target=target, inode=(st.st_dev, st.st_ino)
            )
        if typ != "file":
            return Entry(typ, mode, st.st_uid, st.st_gid, inode=(st.st_dev, st.st_ino))
        key: _StatKey = (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_mode,
        )
        if self.trust_stat:
            hit = self._cache.get(rel)
            if hit is not None and hit[0] == key:
                new_cache[rel] = hit
                return hit[1]
        entry = self._read_file(path, st)
        new_cache[rel] = (key, entry)
        return entry

    def _read_file(self, path: str | Path, st: os.stat_result) -> Entry:
        try:
            # O_NOFOLLOW: the entry was a regular file when listed; if it has been swapped for
            # a link since, refuse rather than read what the link points at.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                head = f.read(self.text_limit + 1)
                h = hashlib.sha256(head)
                size = len(head)
                text = None
                data = None
                if size <= self.text_limit:
                    if b"\x00" not in head:
                        try:
                            text = head.decode("utf-8")
                        except UnicodeDecodeError:
                            text = None
                    if text is None:
                        data = head
                else:
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
                        size += len(chunk)
                sha = h.hexdigest()
        except OSError as exc:
            raise SnapshotError(self.name, f"cannot read {path}: {exc}") from exc
        mode = stat.S_IMODE(st.st_mode)
        return Entry(
            "file",
            mode,
            st.st_uid,
            st.st_gid,
            size=size,
            sha256=sha,
            text=text,
            data=data,
            inode=(st.st_dev, st.st_ino),
        )

    def diff(self, before: Snapshot, after: Snapshot) -> FileDiff:
        """Added, removed, modified and moved paths, with a unified diff for small text
        files."""
        return diff_folders(self.name, before.state, after.state)

    def reach_probe(self, where: str, text: str, before: Snapshot) -> FileReadProbe | None:
        """A probe that tells whether the agent read the files under `where` holding `text`
        (`oracle.sinks.reads`: a kernel watch on each file, which follows it when moved)."""
        state: FolderState = before.state
        rx = compile_glob(where)
        paths = [
            p
            for p, e in state.entries.items()
            if e.type == "file" and rx.match(p) and e.text is not None and text in e.text
        ]
        return FileReadProbe(self.root, paths) if paths else None


def _digest(entries: Mapping[str, Entry]) -> str:
    """sha256 over the sorted paths and their state keys (canonical, and cheap to compute)."""
    h = hashlib.sha256()
    for path, e in entries.items():
        h.update(orjson.dumps([path, *e.state_key]))
    return "sha256:" + h.hexdigest()


# The clock the kernel stamps inode times with (Linux: CLOCK_REALTIME_COARSE, id 5, which the
# time module does not name). Elsewhere the fine clock is the closest there is.
_FS_CLOCK = 5 if sys.platform.startswith("linux") else time.CLOCK_REALTIME


def _wait_past(ctime_ns: int) -> None:
    """Wait until the filesystem clock has moved past `ctime_ns` (see the module docstring)."""
    deadline = time.monotonic() + 0.1
    while time.clock_gettime_ns(_FS_CLOCK) <= ctime_ns:
        if time.monotonic() > deadline:  # a file stamped in the future: nothing to wait for
            return
        time.sleep(0.001)
