"""One mail message, parsed with the `email` package into a JSON-able record.

Used by the SMTP mailbox and the Maildir/mbox sinks. Parsing never raises: a message that the
parser cannot make sense of keeps its raw bytes, its digest and the parser's complaint
(``parse_error``), and what the parser tolerated is listed in ``defects``.

Example::

    m = parse_message(b"From: a@x.test\\r\\nTo: b@y.test\\r\\nSubject: hi\\r\\n\\r\\nhello\\r\\n")
    m.subject, m.to, m.body_text()           # ('hi', ['b@y.test'], 'hello\\r\\n')
"""

from __future__ import annotations

import base64
import email
import email.header
import email.policy
import email.utils
import hashlib
import re
from collections.abc import Iterator
from email.message import Message

from pydantic import BaseModel, ConfigDict

from oracle.evidence.diff import Content

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

#: Decoded bytes kept per part; the size and digest always cover the whole part.
PART_LIMIT = 4 << 20


def _clean(text: object) -> str:
    """Text safe for JSON: undecodable bytes the parser kept as surrogates become U+FFFD."""
    s = str(text)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class MailHeader(BaseModel):
    """One header: its name and its value as text (encoded words decoded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: str


class Part(BaseModel):
    """One leaf part of a message: a body text or an attachment, decoded from its transfer
    encoding. ``text`` for text parts (in their charset), ``base64`` for the others."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    content_type: str
    filename: str | None = None
    disposition: str | None = None
    size: int
    sha256: str
    truncated: bool = False
    text: str | None = None
    base64: str | None = None

    @property
    def is_attachment(self) -> bool:
        return self.disposition == "attachment" or (
            self.filename is not None and self.disposition != "inline"
        )

    def data(self) -> bytes:
        """The decoded bytes kept."""
        if self.base64 is not None:
            return base64.b64decode(self.base64)
        return (self.text or "").encode("utf-8")


class ParsedMessage(BaseModel):
    """A message: headers, addresses, parts, defects, and the raw bytes (``raw_text`` when they
    are UTF-8, else ``raw_base64``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int
    sha256: str
    headers: list[MailHeader]
    subject: str | None = None
    sender: list[str] = []
    to: list[str] = []
    cc: list[str] = []
    bcc: list[str] = []
    message_id: str | None = None
    date: str | None = None
    parts: list[Part] = []
    defects: list[str] = []
    parse_error: str | None = None
    raw_text: str | None = None
    raw_base64: str | None = None

    def raw(self) -> bytes:
        if self.raw_base64 is not None:
            return base64.b64decode(self.raw_base64)
        return (self.raw_text or "").encode("utf-8")

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((h.value for h in self.headers if h.name.lower() == low), None)

    def bodies(self) -> list[Part]:
        """The text parts that are not attachments."""
        return [p for p in self.parts if not p.is_attachment and p.text is not None]

    def attachments(self) -> list[Part]:
        return [p for p in self.parts if p.is_attachment]

    def body_text(self) -> str:
        """The text of the body parts, joined (plain text first, then HTML)."""
        bodies = self.bodies()
        plain = [p.text or "" for p in bodies if p.content_type == "text/plain"]
        other = [p.text or "" for p in bodies if p.content_type != "text/plain"]
        return "\n".join(plain + other)

    def recipients(self) -> list[str]:
        """Every address in To, Cc and Bcc."""
        return [*self.to, *self.cc, *self.bcc]


def _header_text(value: object) -> str:
    """A header's value as text: unfolded, encoded words (RFC 2047) decoded where they parse."""
    text = "".join(_LINE_BREAK.split(str(value)))
    if "=?" not in text:
        return text
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except Exception:
        return text


def _addresses(msg: Message, name: str) -> list[str]:
    try:
        values = [_clean(v) for v in msg.get_all(name, [])]
        return [addr for _, addr in email.utils.getaddresses(values) if addr]
    except Exception:
        return []


def _part(index: int, part: Message) -> Part:
    ctype = _clean(part.get_content_type())
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    if not isinstance(payload, bytes):
        raw = part.get_payload()
        payload = _clean(raw).encode("utf-8") if isinstance(raw, str) else b""
    kept = payload[:PART_LIMIT]
    text = b64 = None
    if part.get_content_maintype() == "text":
        charset = part.get_content_charset() or "utf-8"
        try:
            text = kept.decode(charset, "replace")
        except LookupError:
            text = kept.decode("utf-8", "replace")
        text = _clean(text)
    else:
        b64 = base64.b64encode(kept).decode("ascii")
    try:
        filename = part.get_filename()
        if filename is not None:
            filename = _header_text(filename)
    except Exception:
        filename = None
    try:
        disposition = part.get_content_disposition()
    except Exception:
        disposition = None
    return Part(
        index=index,
        content_type=ctype,
        filename=_clean(filename) if filename else None,
        disposition=disposition,
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        truncated=len(payload) > len(kept),
        text=text,
        base64=b64,
    )


def _leaves(msg: Message) -> Iterator[Message]:
    for part in msg.walk():
        if not part.is_multipart():
            yield part


def parse_message(raw: bytes) -> ParsedMessage:
    """Parse `raw` (never raises; see the module docstring)."""
    size, sha = len(raw), hashlib.sha256(raw).hexdigest()
    try:
        raw_text: str | None = raw.decode("utf-8")
        raw_b64 = None
    except UnicodeDecodeError:
        raw_text, raw_b64 = None, base64.b64encode(raw).decode("ascii")
    base = {"size": size, "sha256": sha, "raw_text": raw_text, "raw_base64": raw_b64}
    try:
        # compat32 parses the structure as the modern policy does, without building a header
        # object for every header it is asked about (which costs most of the time); encoded
        # words are decoded for the headers kept, below.
        msg = email.message_from_bytes(raw, policy=email.policy.compat32)
        headers = [
            MailHeader(name=_clean(name), value=_clean(_header_text(value)))
            for name, value in msg.raw_items()
        ]
        parts = [_part(i, p) for i, p in enumerate(_leaves(msg))]
        defects = [type(d).__name__ for d in msg.defects]
        for p in msg.walk():
            if p is not msg:
                defects.extend(type(d).__name__ for d in p.defects)

        def first(name: str) -> str | None:
            h = next((h.value for h in headers if h.name.lower() == name), None)
            return h

        return ParsedMessage(
            **base,
            headers=headers,
            subject=first("subject"),
            sender=_addresses(msg, "from"),
            to=_addresses(msg, "to"),
            cc=_addresses(msg, "cc"),
            bcc=_addresses(msg, "bcc"),
            message_id=first("message-id"),
            date=first("date"),
            parts=parts,
            defects=sorted(set(defects)),
        )
    except Exception as exc:  # the raw bytes and digest are kept whatever the parser thinks
        return ParsedMessage(**base, headers=[], parse_error=f"{type(exc).__name__}: {exc}")


def message_contents(m: ParsedMessage, before: ParsedMessage | None = None) -> Iterator[Content]:
    """The searchable content of a message, field by field: headers (decoded), each body part
    and attachment (decoded from base64 or quoted-printable), and the raw bytes (where an
    encoded form sits as it was sent). With `before`, each field carries its earlier value."""

    def old_header(name: str) -> str | None:
        return before.header(name) if before is not None else None

    for h in m.headers:
        yield Content(f"header {h.name}", h.value, old_header(h.name))
    old_parts = {p.index: p for p in before.parts} if before is not None else {}
    for p in m.parts:
        label = (
            f"attachment {p.filename}" if p.is_attachment else f"part {p.index} {p.content_type}"
        )
        prev = old_parts.get(p.index)
        yield Content(label, p.data(), prev.data() if prev is not None else None)
    yield Content("raw message", m.raw(), before.raw() if before is not None else None)
