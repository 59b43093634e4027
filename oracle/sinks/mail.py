"""The SMTP mailbox sink: mail that reached the sandbox's SMTP server (boundary evidence).

A snapshot is every message the `SmtpCapture` accepted since its last reset, parsed (envelope,
headers, body parts, attachments, defects, raw bytes), and every message that did not arrive
whole (`MessageLost`: the client dropped in DATA, the message was over the size limit). The
diff is what was sent between two snapshots.

In predicates::

    out = ev.boundary.mail("outbox")                 # or ev.diff.mail("outbox")
    out.sent(to="attacker@evil.test")                # any envelope recipient
    out.sent(to=re.compile(r"@evil\\.test$"), subject=re.compile("invoice", re.I))
    out.sent(body="ACCT-5521", attachment="*.csv")
    out.carrying(SECRET)                             # messages holding the secret, any encoding
    out.recipients()                                 # every envelope recipient, sorted
    out.lost()                                       # what did not arrive whole
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, TypeAdapter

from oracle.base.canonical import Json, digest_json
from oracle.evidence.diff import Change, Content, IncompleteEvidenceError, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.proxies.smtp import Captured, SmtpCapture, SmtpError
from oracle.sinks.message import ParsedMessage, message_contents, parse_message

KIND = "mail"


class MailMessage(BaseModel):
    """One accepted message: the SMTP envelope and session, and the parsed message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    time: float
    peer: str
    helo: str | None
    login: str | None
    envelope_from: str
    envelope_to: list[str]
    message: ParsedMessage

    @property
    def subject(self) -> str | None:
        return self.message.subject


class LostMessage(BaseModel):
    """A message that did not arrive whole, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    time: float
    peer: str
    envelope_from: str | None
    envelope_to: list[str]
    reason: str


def _matches(value: Any, expected: Any) -> bool:
    if isinstance(expected, re.Pattern):
        return isinstance(value, str) and expected.search(value) is not None
    if callable(expected):
        return bool(expected(value))
    return isinstance(value, str) and value.lower() == str(expected).lower()


def _contains(value: str, expected: Any) -> bool:
    if isinstance(expected, re.Pattern):
        return expected.search(value) is not None
    if callable(expected):
        return bool(expected(value))
    return str(expected) in value


def message_matches(
    m: MailMessage,
    *,
    to: Any = None,
    sender: Any = None,
    subject: Any = None,
    body: Any = None,
    attachment: str | None = None,
) -> bool:
    """`to`: any envelope recipient equals it (any case), or matches a regex or callable;
    `sender`: the envelope sender, likewise; `subject` and `body` (the text body parts): a
    substring, a regex or a callable; `attachment`: a glob over attachment file names."""
    if to is not None and not any(_matches(r, to) for r in m.envelope_to):
        return False
    if sender is not None and not _matches(m.envelope_from, sender):
        return False
    if subject is not None and not _contains(m.message.subject or "", subject):
        return False
    if body is not None and not _contains(m.message.body_text(), body):
        return False
    return attachment is None or any(
        fnmatch.fnmatchcase(a.filename or "", attachment) for a in m.message.attachments()
    )


@dataclass(frozen=True)
class MailState:
    """The messages captured so far. In predicates::

    ev.after.mail("outbox").messages(to="billing@shop.test")
    """

    accepted: tuple[MailMessage, ...]
    losses: tuple[LostMessage, ...]

    def to_json(self) -> dict[str, Json]:
        return {
            "messages": [m.model_dump(mode="json") for m in self.accepted],
            "lost": [m.model_dump(mode="json") for m in self.losses],
        }

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> MailState:
        """The state `to_json` wrote; `spec` is not needed. Raises ValueError when `raw` is
        not such a state."""
        s = _STATE.validate_python(raw, strict=True)
        return cls(
            tuple(MailMessage.model_validate(m, strict=True) for m in s["messages"]),
            tuple(LostMessage.model_validate(m, strict=True) for m in s["lost"]),
        )

    def messages(self, **where: Any) -> list[MailMessage]:
        """Messages matching `where` (see `message_matches`)."""
        return [m for m in self.accepted if message_matches(m, **where)]


class _StateJson(TypedDict):
    messages: list[dict[str, Any]]
    lost: list[dict[str, Any]]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


class MessageSent(Change):
    """A message the SMTP server accepted during the trial."""

    change: Literal["mail_sent"] = "mail_sent"
    mail: MailMessage

    def summary(self) -> str:
        m = self.mail
        to = ", ".join(m.envelope_to)
        return f"mail #{m.id} from {m.envelope_from or '<>'} to {to}: {m.subject or '(no subject)'}"

    def target(self) -> str:
        return ", ".join(sorted(self.mail.envelope_to))

    def targets(self) -> list[str]:
        return list(self.mail.envelope_to)

    def texts(self) -> Iterator[str]:
        for c in self.contents():
            if isinstance(c.value, str):
                yield c.value

    def contents(self) -> Iterator[Content]:
        yield Content("envelope to", ", ".join(self.mail.envelope_to))
        yield from message_contents(self.mail.message)


def _might_match(lost: LostMessage, where: Mapping[str, Any]) -> bool:
    """Whether a lost message could have matched `where`, judging by its envelope alone."""
    to = where.get("to")
    if to is not None and lost.envelope_to:
        return any(_matches(r, to) for r in lost.envelope_to)
    return True


class MessageLost(Change):
    """A message that did not arrive whole during the trial (it was still attempted)."""

    change: Literal["mail_lost"] = "mail_lost"
    mail: LostMessage

    def summary(self) -> str:
        m = self.mail
        return f"mail #{m.id} to {', '.join(m.envelope_to) or '?'} LOST: {m.reason}"

    def target(self) -> str:
        return ", ".join(sorted(self.mail.envelope_to))

    def targets(self) -> list[str]:
        return list(self.mail.envelope_to)

    def unseen(self) -> str | None:
        m = self.mail
        return (
            f"mail #{m.id} to {', '.join(m.envelope_to) or '?'} did not arrive whole ({m.reason})"
        )


class MailDiff(SinkDiff):
    """The messages sent during the trial (see the module docstring for the queries)."""

    kind: ClassVar[str] = KIND

    def all(self) -> list[MailMessage]:
        return [c.mail for c in self.of_type(MessageSent)]

    def sent(self, **where: Any) -> list[MailMessage]:
        """Messages matching `where`: ``to``, ``sender``, ``subject``, ``body``,
        ``attachment`` (see `message_matches`). When none matches but a message that did not
        arrive whole might have, raises `IncompleteEvidenceError` (unknown, not "none")."""
        found = [m for m in self.all() if message_matches(m, **where)]
        if not found:
            maybe = [lost for lost in self.lost() if _might_match(lost, where)]
            if maybe:
                raise IncompleteEvidenceError(
                    f"no message matches, but {len(maybe)} message(s) that might did not arrive "
                    f"whole: {'; '.join(f'#{m.id} to {m.envelope_to}: {m.reason}' for m in maybe)}"
                )
        return found

    def to(self, address: Any) -> list[MailMessage]:
        """Messages with `address` among the envelope recipients."""
        return self.sent(to=address)

    def recipients(self) -> list[str]:
        return sorted({r.lower() for m in self.all() for r in m.envelope_to})

    def lost(self) -> list[LostMessage]:
        return [c.mail for c in self.of_type(MessageLost)]

    def carrying(
        self, secret: str | bytes, where: Callable[[MailMessage], bool] | None = None
    ) -> list[MailMessage]:
        """Messages whose headers, body parts, attachments or raw bytes hold `secret`, raw or
        encoded; `where` narrows them (``lambda m: "x@evil.test" in m.envelope_to``). When
        none is found but a message did not arrive whole, raises `IncompleteEvidenceError`
        (unknown, not "not sent"): what it held is not known, so `where` cannot rule it out
        either."""

        def keep(c: Change) -> bool:
            if isinstance(c, MessageLost):
                return True
            return isinstance(c, MessageSent) and (where is None or where(c.mail))

        found = {
            h.change.mail.id: h.change.mail
            for h in self.find_secret(secret, keep)
            if isinstance(h.change, MessageSent)
        }
        return [found[k] for k in sorted(found)]


#: The SMTP mailbox sink kind, boundary evidence: ``ev.boundary.of(MAIL)``, ``ev.diff.mail("out")``.
MAIL = SinkKind(KIND, diff=MailDiff, state=MailState, boundary=True)


class MailSink:
    """The messages of an `SmtpCapture` as a sink (parsed once per message)."""

    kind = KIND

    def __init__(self, name: str, capture: SmtpCapture) -> None:
        self.name = name
        self.capture = capture
        self._parsed: dict[int, MailMessage] = {}

    def __repr__(self) -> str:
        return f"MailSink({self.name!r}, {self.capture!r})"

    def _message(self, c: Captured) -> MailMessage:
        hit = self._parsed.get(c.id)
        if hit is None:
            hit = MailMessage(
                id=c.id,
                time=c.time,
                peer=c.peer,
                helo=c.helo,
                login=c.login,
                envelope_from=c.mail_from,
                envelope_to=list(c.rcpt_tos),
                message=parse_message(c.raw),
            )
            self._parsed[c.id] = hit
        return hit

    def snapshot(self) -> Snapshot:
        started = time.time()
        try:
            self.capture.settle()
            captured = self.capture.messages()
            losses = self.capture.losses()
        except SmtpError as exc:
            raise SnapshotError(self.name, str(exc)) from exc
        accepted = tuple(self._message(c) for c in captured)
        self._parsed = {m.id: m for m in accepted}
        lost = tuple(
            LostMessage(
                id=x.id,
                time=x.time,
                peer=x.peer,
                envelope_from=x.mail_from,
                envelope_to=list(x.rcpt_tos),
                reason=x.reason,
            )
            for x in losses
        )
        state = MailState(accepted, lost)
        digest = digest_json(
            {
                "messages": [
                    [m.id, m.envelope_from, m.envelope_to, m.message.sha256] for m in accepted
                ],
                "lost": [x.model_dump(mode="json") for x in lost],
            }
        )
        return Snapshot(self.name, KIND, digest, state, started)

    def diff(self, before: Snapshot, after: Snapshot) -> MailDiff:
        old_m = {m.id for m in before.state.accepted}
        old_l = {x.id for x in before.state.losses}
        changes: list[Change] = [
            MessageSent(mail=m) for m in after.state.accepted if m.id not in old_m
        ]
        changes += [MessageLost(mail=x) for x in after.state.losses if x.id not in old_l]
        return MailDiff(self.name, changes)
