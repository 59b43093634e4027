"""The reply sink: the bytes the agent published as its reply, as the harness captured them.

The reply is *boundary* evidence: what left the agent where others read it (a command's
stdout, the text a harness backend hands over, a callable's return value). It is never read as
the agent's account of itself: a predicate asks what the reply *contains* ("does it carry a
link to a host we do not own?"), not what it says the agent did.

The trial hands the run record to the sandbox after the agent ran and before the after
snapshot; the sandbox passes it to every sink with a ``receive_run`` method (this one). A reset
clears the reply, so the before snapshot holds none. A harness that captured no reply fails
the after snapshot ("nothing captured" is not "nothing published"); a sink declared with
``required=False`` records it instead, for tasks whose other verdicts must not hang on the
reply: ``ev.boundary.reply().captured`` is false, and reading the reply raises
`IncompleteEvidenceError`, so only the predicates that read it are unknown.

In predicates::

    r = ev.boundary.reply()              # or ev.diff.reply()
    r.text                               # the reply as text ('' when there was none)
    r.contains("https://accounts.corp.test/reset")
    r.links()                            # every http(s) URL in it
    r.hosts()                            # their hosts, lower case
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NotRequired, TypedDict
from urllib.parse import urlsplit

from pydantic import Field, TypeAdapter

from oracle.base.canonical import Json, digest_json
from oracle.evidence.diff import Change, Content, IncompleteEvidenceError, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError

if TYPE_CHECKING:
    from oracle.trial.agent import RunRecord

KIND = "reply"
URL = re.compile(r"""https?://[^\s<>"'`)\]]+""", re.IGNORECASE)


def links(text: str) -> list[str]:
    """The http(s) URLs in `text`, in order (trailing punctuation left out)."""
    return [u.rstrip(".,;:!?") for u in URL.findall(text)]


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


@dataclass(frozen=True)
class ReplyState:
    """The reply at one point of the trial: none before the agent ran (``delivered`` false),
    the captured bytes after (``reply`` None when the harness captured nothing)."""

    delivered: bool
    reply: bytes | None
    #: Bytes the agent wrote past the harness's capture limit (0: the reply is whole).
    cut: int = 0

    @property
    def text(self) -> str:
        return (self.reply or b"").decode("utf-8", "replace")

    @property
    def captured(self) -> bool:
        """Whether the harness handed over a reply (an empty one counts: it published nothing)."""
        return self.delivered and self.reply is not None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"delivered": self.delivered}
        if self.cut:
            out["cut"] = self.cut
        if self.reply is not None:
            out["size"] = len(self.reply)
            out["sha256"] = hashlib.sha256(self.reply).hexdigest()
            try:
                out["text"] = self.reply.decode("utf-8")
            except UnicodeDecodeError:
                out["base64"] = base64.b64encode(self.reply).decode("ascii")
        return out

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> ReplyState:
        """The state `to_json` wrote, the reply's bytes checked against its size and sha256;
        `spec` is not needed. Raises ValueError when `raw` is not such a state."""
        s = _STATE.validate_python(raw, strict=True)
        reply: bytes | None = None
        if "text" in s and "base64" in s:
            raise ValueError("a reply is kept as text or as base64, not both")
        if "text" in s:
            reply = s["text"].encode("utf-8")
        elif "base64" in s:
            reply = base64.b64decode(s["base64"], validate=True)
        if reply is not None:
            if (s.get("size"), s.get("sha256")) != (len(reply), hashlib.sha256(reply).hexdigest()):
                raise ValueError("the reply's bytes do not match its size and sha256")
        elif "size" in s or "sha256" in s:
            raise ValueError("a size and sha256 without the reply they describe")
        return cls(s["delivered"], reply, s.get("cut", 0))


class _StateJson(TypedDict):
    delivered: bool
    cut: NotRequired[int]
    size: NotRequired[int]
    sha256: NotRequired[str]
    text: NotRequired[str]
    base64: NotRequired[str]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


class ReplyPublished(Change):
    """The reply the agent published during the trial."""

    change: Literal["reply_published"] = "reply_published"
    size: int
    sha256: str
    text: str | None = None
    base64: str | None = None
    written: int | None = Field(
        None, description="bytes the agent wrote, when more than the harness kept"
    )

    def unseen(self) -> str | None:
        if self.written is None:
            return None
        return f"the reply was cut at {self.size} of the {self.written} bytes written"

    def data(self) -> bytes:
        if self.base64 is not None:
            return base64.b64decode(self.base64)
        return (self.text or "").encode("utf-8")

    def summary(self) -> str:
        shown = self.data().decode("utf-8", "replace").replace("\n", " ")
        if len(shown) > 70:
            shown = shown[:69] + "…"
        return f"reply ({self.size} bytes): {shown}"

    def target(self) -> str:
        return "reply"

    def texts(self) -> Iterator[str]:
        yield self.data().decode("utf-8", "replace")

    def contents(self) -> Iterator[Content]:
        yield Content("reply", self.data())


class ReplyNotCaptured(Change):
    """The harness handed over no reply (a sink that is not ``required``): what the agent
    published, if anything, is not known."""

    change: Literal["reply_not_captured"] = "reply_not_captured"

    def unseen(self) -> str:
        return "the harness captured no reply"

    def summary(self) -> str:
        return "no reply captured"

    def target(self) -> str:
        return "reply"


class ReplyDiff(SinkDiff):
    """The reply published during the trial, if any (see the module docstring)."""

    kind: ClassVar[str] = KIND

    @property
    def captured(self) -> bool:
        """Whether the harness handed over a reply (always, for a ``required`` sink)."""
        return not self.of_type(ReplyNotCaptured)

    def _known(self) -> None:
        if not self.captured:
            raise IncompleteEvidenceError(f"sink {self.sink!r}: the harness captured no reply")

    @property
    def published(self) -> bool:
        """Whether the agent published a reply at all."""
        self._known()
        return bool(self.of_type(ReplyPublished))

    @property
    def data(self) -> bytes:
        """The reply's bytes; empty when there was none."""
        self._known()
        found = self.of_type(ReplyPublished)
        return found[0].data() if found else b""

    @property
    def text(self) -> str:
        """The reply as text (invalid UTF-8 replaced); empty when there was none."""
        return self.data.decode("utf-8", "replace")

    def unseen(self) -> str | None:
        """Why the reply is not known whole (cut at the capture limit, or not captured at
        all); None when it is."""
        return next((why for c in self.changes if (why := c.unseen())), None)

    def contains(self, text: str | re.Pattern[str]) -> bool:
        """Whether the reply holds `text` (a substring or a compiled regex). Not found in a
        reply that was cut: `IncompleteEvidenceError` (unknown, not "no")."""
        found = (
            text.search(self.text) is not None
            if isinstance(text, re.Pattern)
            else text in self.text
        )
        cut = self.unseen()
        if not found and cut:
            raise IncompleteEvidenceError(f"{text!r} is not in what was kept: {cut}")
        return found

    def links(self) -> list[str]:
        """The links in the reply; a reply that was cut has no complete list of them."""
        cut = self.unseen()
        if cut:
            raise IncompleteEvidenceError(f"the links of the reply are not all known: {cut}")
        return links(self.text)

    def hosts(self) -> list[str]:
        """The hosts of the links in the reply, lower case, in order, once each."""
        return list(dict.fromkeys(h for h in map(_host, self.links()) if h))


#: The reply sink kind, boundary evidence: ``ev.boundary.of(REPLY)``, ``ev.diff.reply()``.
REPLY = SinkKind(KIND, diff=ReplyDiff, state=ReplyState, boundary=True, default_sink="reply")


class ReplySink:
    """Holds the reply handed over by the trial (see the module docstring)."""

    kind = KIND

    def __init__(self, name: str = "reply", *, required: bool = True) -> None:
        self.name = name
        self.required = required
        self._lock = threading.Lock()
        self._state = ReplyState(False, None)

    def __repr__(self) -> str:
        return f"ReplySink({self.name!r})"

    def clear(self) -> None:
        """Forget the last reply (a reset)."""
        with self._lock:
            self._state = ReplyState(False, None)

    def receive_run(self, run: RunRecord) -> None:
        """Take the reply from the harness's run record (with what the capture cut off)."""
        written = run.invocation.output_truncated.get("stdout", 0)
        self.publish(run.reply, cut=written)

    def publish(self, reply: bytes | str | None, *, cut: int = 0) -> None:
        """Record `reply` as what the agent published (bytes as captured; text is UTF-8);
        `cut` is how many bytes the agent wrote when the capture kept fewer."""
        data = reply.encode("utf-8") if isinstance(reply, str) else reply
        with self._lock:
            self._state = ReplyState(True, bytes(data) if data is not None else None, cut)

    def snapshot(self) -> Snapshot:
        """The reply; after the run, a harness that captured none fails the observation (the
        task watches the reply, and "nothing captured" is not "nothing published") unless the
        sink is not `required`: then the snapshot records that none was captured."""
        with self._lock:
            state = self._state
        if self.required and state.delivered and state.reply is None:
            raise SnapshotError(
                self.name,
                "the harness handed over no reply (it captured none, or the agent returned "
                "something that is not text)",
            )
        return Snapshot(self.name, KIND, digest_json(state.to_json()), state, time.time())

    def diff(self, before: Snapshot, after: Snapshot) -> ReplyDiff:
        b: ReplyState = before.state
        a: ReplyState = after.state
        changes: list[Change] = []
        if a.delivered and a.reply is None:  # a sink that is not required, and no reply came
            changes.append(ReplyNotCaptured())
        if a.reply and (a.reply != b.reply or not b.delivered):  # an empty reply published nothing
            j: dict[str, Any] = a.to_json()
            changes.append(
                ReplyPublished(
                    size=int(j["size"]),
                    sha256=str(j["sha256"]),
                    text=j.get("text"),
                    base64=j.get("base64"),
                    written=a.cut or None,
                )
            )
        return ReplyDiff(self.name, changes)
