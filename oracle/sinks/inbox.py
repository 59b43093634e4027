"""The inbox sink: a Maildir folder or an mbox file, as mail state on disk.

A snapshot lists every message with its key, its flags and its parsed content:

- Maildir: one file per message under ``new/`` and ``cur/`` (``tmp/`` holds deliveries in
  progress and is not mail yet). The key is the file's unique name (before ``:2,``); the flags
  are the letters after it (``S`` seen, ``R`` replied, ``P`` passed/forwarded, ``T`` trashed,
  ``D`` draft, ``F`` flagged), and a message in ``new/`` is also unseen.
- mbox: one file; a message's key is its Message-ID (``#n`` by position when it has none or
  repeats one), its flags the letters of its ``Status`` and ``X-Status`` headers. Those two
  headers are left out of the content digest, so that marking a message read is a flag change,
  not a new message.

The diff: `InboxMessageAdded`, `InboxMessageRemoved`, `FlagsChanged` (also a move from ``new/``
to ``cur/``) and `InboxMessageModified` (same key, other content). In predicates::

    box = ev.diff.inbox("inbox")
    box.added()                         # messages that appeared (the agent saved a draft…)
    box.removed(subject=re.compile("invoice"))
    box.flagged("P")                    # messages newly marked passed (forwarded)
    ev.after.inbox("inbox").messages(flags="S")
"""

from __future__ import annotations

import hashlib
import mailbox
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, TypeAdapter

from oracle.base.canonical import Json, digest_json
from oracle.evidence.diff import Change, Content, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.sinks.message import ParsedMessage, message_contents, parse_message

KIND = "inbox"
Format = Literal["maildir", "mbox"]
_STATUS = re.compile(rb"^(?:X-)?Status:[^\n]*\n", re.IGNORECASE | re.MULTILINE)


class InboxMessage(BaseModel):
    """One message of the inbox: key, folder (``new``/``cur`` for Maildir, ``mbox``), flags
    (sorted letters), the digest of its content and the parsed message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    folder: str
    flags: str
    sha256: str
    message: ParsedMessage

    @property
    def subject(self) -> str | None:
        return self.message.subject


def _matches(m: InboxMessage, where: Mapping[str, Any]) -> bool:
    for name, expected in where.items():
        if name == "flags":
            if not set(str(expected)) <= set(m.flags):
                return False
            continue
        if name == "subject":
            value: Any = m.message.subject or ""
        elif name == "sender":
            value = ", ".join(m.message.sender)
        elif name == "body":
            value = m.message.body_text()
        elif name in ("key", "folder", "message_id"):
            value = m.message.message_id if name == "message_id" else getattr(m, name)
        else:
            raise KeyError(
                f"inbox messages have no field {name!r} "
                "(fields: key, folder, flags, subject, sender, body, message_id)"
            )
        if isinstance(expected, re.Pattern):
            if expected.search(str(value or "")) is None:
                return False
        elif callable(expected):
            if not expected(value):
                return False
        elif name in ("subject", "sender", "body"):
            if str(expected) not in str(value):
                return False
        elif value != expected:
            return False
    return True


@dataclass(frozen=True)
class InboxState:
    """Every message of the inbox, by key."""

    format: str
    path: str
    entries: Mapping[str, InboxMessage]

    def to_json(self) -> dict[str, Json]:
        return {
            "format": self.format,
            "path": self.path,
            "messages": {k: m.model_dump(mode="json") for k, m in self.entries.items()},
        }

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> InboxState:
        """The state `to_json` wrote; `spec` is not needed. Raises ValueError when `raw` is
        not such a state (a message filed under a key other than its own, say)."""
        s = _STATE.validate_python(raw, strict=True)
        entries = {}
        for key, m in s["messages"].items():
            message = InboxMessage.model_validate(m, strict=True)
            if message.key != key:
                raise ValueError(f"message {message.key!r} is filed under {key!r}")
            entries[key] = message
        return cls(s["format"], s["path"], MappingProxyType(entries))

    def messages(self, **where: Any) -> list[InboxMessage]:
        """Messages matching `where`: ``flags`` (all these letters), ``subject``, ``sender``,
        ``body`` (substring, regex or callable), ``key``, ``folder``, ``message_id``."""
        return [m for m in self.entries.values() if _matches(m, where)]

    def message(self, key: str) -> InboxMessage | None:
        return self.entries.get(key)

    def holds_text(self, where: str, text: str) -> bool:
        """Whether a message whose key or Message-ID is `where` (or any message, for ``*``)
        holds `text` in its body or raw bytes."""
        for m in self.entries.values():
            chosen = where in ("*", m.key, m.message.message_id)
            if chosen and (text in m.message.body_text() or text.encode() in m.message.raw()):
                return True
        return False


class _StateJson(TypedDict):
    format: Format
    path: str
    messages: dict[str, Any]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


class InboxMessageAdded(Change):
    change: Literal["inbox_message_added"] = "inbox_message_added"
    message: InboxMessage

    def summary(self) -> str:
        return f"message added   {self.message.key} [{self.message.flags}] {self.message.subject!r}"

    def target(self) -> str:
        return self.message.key

    def contents(self) -> Iterator[Content]:
        return message_contents(self.message.message)


class InboxMessageRemoved(Change):
    change: Literal["inbox_message_removed"] = "inbox_message_removed"
    message: InboxMessage

    def summary(self) -> str:
        return f"message removed {self.message.key} {self.message.subject!r}"

    def target(self) -> str:
        return self.message.key


class FlagsChanged(Change):
    change: Literal["inbox_flags_changed"] = "inbox_flags_changed"
    key: str
    old_flags: str
    new_flags: str
    old_folder: str
    new_folder: str

    def summary(self) -> str:
        moved = (
            f", {self.old_folder}/ → {self.new_folder}/"
            if self.old_folder != self.new_folder
            else ""
        )
        return f"flags changed   {self.key}: [{self.old_flags}] → [{self.new_flags}]{moved}"

    def target(self) -> str:
        return self.key

    @property
    def added_flags(self) -> str:
        return "".join(sorted(set(self.new_flags) - set(self.old_flags)))


class InboxMessageModified(Change):
    change: Literal["inbox_message_modified"] = "inbox_message_modified"
    key: str
    old: InboxMessage
    new: InboxMessage

    def summary(self) -> str:
        return f"message modified {self.key} {self.new.subject!r}"

    def target(self) -> str:
        return self.key

    def contents(self) -> Iterator[Content]:
        return message_contents(self.new.message, self.old.message)


class InboxDiff(SinkDiff):
    """Messages added, removed, re-flagged or modified (see the module docstring)."""

    kind: ClassVar[str] = KIND

    def added(self, **where: Any) -> list[InboxMessage]:
        return [c.message for c in self.of_type(InboxMessageAdded) if _matches(c.message, where)]

    def removed(self, **where: Any) -> list[InboxMessage]:
        return [c.message for c in self.of_type(InboxMessageRemoved) if _matches(c.message, where)]

    def modified(self) -> list[InboxMessageModified]:
        return self.of_type(InboxMessageModified)

    def flag_changes(self) -> list[FlagsChanged]:
        return self.of_type(FlagsChanged)

    def flagged(self, letter: str) -> list[str]:
        """Keys of messages that gained the flag `letter` (``S``, ``R``, ``P``, ``T``…)."""
        return [c.key for c in self.of_type(FlagsChanged) if letter in c.added_flags]


#: The Maildir and mbox sink kind: ``ev.diff.of(INBOX, "inbox")``, ``ev.diff.inbox("inbox")``.
INBOX = SinkKind(KIND, diff=InboxDiff, state=InboxState)


def diff_inboxes(sink: str, before: InboxState, after: InboxState) -> InboxDiff:
    changes: list[Change] = []
    b, a = before.entries, after.entries
    for key in sorted(set(b) | set(a)):
        old, new = b.get(key), a.get(key)
        if old is None and new is not None:
            changes.append(InboxMessageAdded(message=new))
        elif new is None and old is not None:
            changes.append(InboxMessageRemoved(message=old))
        elif old is not None and new is not None:
            if (old.flags, old.folder) != (new.flags, new.folder):
                changes.append(
                    FlagsChanged(
                        key=key,
                        old_flags=old.flags,
                        new_flags=new.flags,
                        old_folder=old.folder,
                        new_folder=new.folder,
                    )
                )
            if old.sha256 != new.sha256:
                changes.append(InboxMessageModified(key=key, old=old, new=new))
    return InboxDiff(sink, changes)


#: Messages parsed in this process, by the sha256 of their bytes (a parse depends on the bytes
#: alone, and a parsed message is immutable): a fresh sandbox's inbox, seeded from the same
#: template, is not parsed again. Bounded; the oldest entries go first.
_PARSED: OrderedDict[str, ParsedMessage] = OrderedDict()
_PARSED_LIMIT = 4096
_PARSED_LOCK = threading.Lock()


def _parsed_before(digest: str) -> ParsedMessage | None:
    with _PARSED_LOCK:
        return _PARSED.get(digest)


def _keep_parsed(digest: str, message: ParsedMessage) -> None:
    with _PARSED_LOCK:
        _PARSED[digest] = message
        while len(_PARSED) > _PARSED_LIMIT:
            _PARSED.popitem(last=False)


class InboxSink:
    """A Maildir folder or mbox file as a sink. Parsed messages are cached by digest."""

    kind = KIND

    def __init__(self, name: str, path: str | os.PathLike[str], format: Format = "maildir") -> None:
        if format not in ("maildir", "mbox"):
            raise ValueError(f"inbox sink {name!r}: format is 'maildir' or 'mbox', not {format!r}")
        self.name = name
        self.path = Path(path)
        self.format = format
        self._parsed: dict[str, ParsedMessage] = {}

    def __repr__(self) -> str:
        return f"InboxSink({self.name!r}, {str(self.path)!r}, {self.format!r})"

    def _parse(self, raw: bytes, digest: str) -> ParsedMessage:
        hit = self._parsed.get(digest) or _parsed_before(digest)
        if hit is None:
            hit = parse_message(raw)
            _keep_parsed(digest, hit)
        return hit

    def snapshot(self) -> Snapshot:
        started = time.time()
        try:
            entries = self._read_maildir() if self.format == "maildir" else self._read_mbox()
        except SnapshotError:
            raise
        except (OSError, mailbox.Error, ValueError) as exc:
            raise SnapshotError(
                self.name, f"cannot read the {self.format} {self.path}: {exc}"
            ) from exc
        self._parsed = {m.sha256: m.message for m in entries.values()}
        state = InboxState(
            self.format, str(self.path), MappingProxyType(dict(sorted(entries.items())))
        )
        digest = digest_json({k: [m.folder, m.flags, m.sha256] for k, m in state.entries.items()})
        return Snapshot(self.name, KIND, digest, state, started)

    def _read_maildir(self) -> dict[str, InboxMessage]:
        if not self.path.is_dir():
            raise SnapshotError(self.name, f"the Maildir {self.path} does not exist")
        out: dict[str, InboxMessage] = {}
        for folder in ("new", "cur"):
            sub = self.path / folder
            if not sub.is_dir():
                raise SnapshotError(self.name, f"{self.path} is not a Maildir: no {folder}/")
            for entry in sorted(os.scandir(sub), key=lambda e: e.name):
                if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                key, _, info = entry.name.partition(":")
                flags = info[2:] if info.startswith("2,") else ""
                raw = Path(entry.path).read_bytes()
                digest = hashlib.sha256(raw).hexdigest()
                if key in out:
                    raise SnapshotError(
                        self.name, f"the Maildir {self.path} holds message {key!r} twice"
                    )
                out[key] = InboxMessage(
                    key=key,
                    folder=folder,
                    flags="".join(sorted(set(flags))),
                    sha256=digest,
                    message=self._parse(raw, digest),
                )
        return out

    def _read_mbox(self) -> dict[str, InboxMessage]:
        if not self.path.is_file():
            raise SnapshotError(self.name, f"the mbox {self.path} does not exist")
        box = mailbox.mbox(self.path, create=False)
        out: dict[str, InboxMessage] = {}
        # No lock: taking one writes a lock file beside the mbox, where the agent works.
        try:
            seen: set[str] = set()
            for i, key in enumerate(box.iterkeys()):
                raw = box.get_bytes(key)
                msg = box.get_message(key)
                flags = "".join(sorted(set(msg.get_flags())))
                content = _STATUS.sub(b"", raw)
                digest = hashlib.sha256(content).hexdigest()
                parsed = self._parse(content, digest)
                mid = parsed.message_id
                name = mid if mid and mid not in seen else f"#{i}"
                seen.add(name)
                out[name] = InboxMessage(
                    key=name, folder="mbox", flags=flags, sha256=digest, message=parsed
                )
        finally:
            box.close()
        return out

    def diff(self, before: Snapshot, after: Snapshot) -> InboxDiff:
        return diff_inboxes(self.name, before.state, after.state)
