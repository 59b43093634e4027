"""The egress recorder's log: events written by the recorder, folded into one record per request.

The recorder appends one JSON line per event as it happens, so that a request is on record from
the moment its headers arrive, whatever happens next (the client drops, the body never ends,
the upstream fails):

- ``start``: method, URL, headers, the time, the client, and the decision (blocked, canned,
  passed) with the rule that made it;
- ``body``: the request body as received — its size, sha256 of every byte, and the bytes kept
  (inline, or in a spill file when large), with ``truncated`` when the body went past the cap;
- ``answer``: what the client was answered (status, headers, response size and digest);
- ``error``: what went wrong (client disconnected mid-body, upstream unreachable, TLS refused).

`fold` turns the lines into `EgressRequest` records, in the order requests started.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict

State = Literal["pending", "complete", "failed"]


class Header(BaseModel):
    """One header field as sent. ``value`` is UTF-8 text (bytes that are not UTF-8 are replaced
    by U+FFFD there); ``raw_base64`` then holds the exact bytes of ``name: value``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: str
    raw_base64: str | None = None

    @classmethod
    def of(cls, name: bytes, value: bytes) -> Header:
        try:
            return cls(name=name.decode("utf-8"), value=value.decode("utf-8"))
        except UnicodeDecodeError:
            raw = base64.b64encode(name + b": " + value).decode("ascii")
            return cls(
                name=name.decode("utf-8", "replace"),
                value=value.decode("utf-8", "replace"),
                raw_base64=raw,
            )

    def raw(self) -> bytes:
        """The exact bytes of the value as sent."""
        if self.raw_base64 is None:
            return self.value.encode("utf-8")
        return base64.b64decode(self.raw_base64).split(b": ", 1)[1]


class Body(BaseModel):
    """A body as the recorder received it.

    ``size`` counts every byte received, ``sha256`` covers all of them; the first ``kept``
    bytes are kept (``text`` when they are UTF-8, ``base64`` otherwise). ``truncated`` says the
    body went past the recorder's cap; ``complete`` is false when the client stopped sending
    before the end of the body."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int
    kept: int
    truncated: bool
    complete: bool
    sha256: str
    text: str | None = None
    base64: str | None = None

    @classmethod
    def of(cls, data: bytes, *, size: int, sha256: str, complete: bool = True) -> Body:
        text: str | None
        try:
            text = data.decode("utf-8")
            b64 = None
        except UnicodeDecodeError:
            text, b64 = None, base64.b64encode(data).decode("ascii")
        return cls(
            size=size,
            kept=len(data),
            truncated=size > len(data),
            complete=complete,
            sha256=sha256,
            text=text,
            base64=b64,
        )

    def data(self) -> bytes:
        """The kept bytes."""
        if self.text is not None:
            return self.text.encode("utf-8")
        return base64.b64decode(self.base64 or "")


class EgressRequest(BaseModel):
    """One request the agent made through the recorder, and what the recorder answered.

    ``answer`` is ``blocked`` (a 403 from the recorder), ``canned`` (a response the task
    serves), ``passed`` (forwarded to an allowed host), ``routed`` (answered by a local server
    of the sandbox for its host: a GitHub world's) or, for a CONNECT that never carried a
    request (the client refused the sandbox's certificate, or spoke something other than
    HTTP), what the tunnel would have been. ``state`` is ``pending`` while the exchange is not
    finished, ``failed`` when it ended in an error (``error`` says which)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    time: float
    method: str
    scheme: str
    host: str
    port: int
    path: str
    url: str
    http_version: str
    headers: list[Header]
    client: str
    answer: str
    rule: str | None
    state: State
    body: Body | None = None
    status: int | None = None
    response_headers: list[Header] = []
    response_size: int | None = None
    response_sha256: str | None = None
    error: str | None = None
    finished_at: float | None = None

    def header(self, name: str) -> str | None:
        """The first header called `name` (any case), or None."""
        low = name.lower()
        return next((h.value for h in self.headers if h.name.lower() == low), None)

    def body_bytes(self) -> bytes:
        """The body bytes kept (empty when there was none)."""
        return self.body.data() if self.body is not None else b""

    def body_text(self) -> str:
        """The kept body as text (bytes that are not UTF-8 replaced)."""
        return self.body_bytes().decode("utf-8", "replace")


def encode_event(event: Mapping[str, Any]) -> bytes:
    """One log line."""
    return orjson.dumps(event) + b"\n"


def read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete lines of the log from byte `offset`, and the offset after the last one.

    A line still being written (no newline yet) is left for the next read."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    events = [orjson.loads(line) for line in data[: end + 1].splitlines() if line.strip()]
    return events, offset + end + 1


def _headers(raw: Iterable[Sequence[str]]) -> list[Header]:
    """Headers from the log: ``[name_b64, value_b64]`` pairs (bytes exactly as sent)."""
    return [Header.of(base64.b64decode(n), base64.b64decode(v)) for n, v in raw]


def _body(event: Mapping[str, Any], spill_dir: Path) -> Body:
    if "inline" in event:
        data = base64.b64decode(event["inline"])
    else:
        try:
            data = (spill_dir / str(event["spill"])).read_bytes()
        except (OSError, KeyError) as exc:
            raise ValueError(f"request {event.get('id')}: the body file is missing: {exc}") from exc
        data = data[: int(event["kept"])]
    return Body.of(
        data,
        size=int(event["size"]),
        sha256=str(event["sha256"]),
        complete=bool(event.get("complete", True)),
    )


def fold(events: Iterable[Mapping[str, Any]], spill_dir: Path) -> list[EgressRequest]:
    """One `EgressRequest` per ``start`` event, with the later events of the same id applied.
    Events whose start is not among `events` (a request begun before a reset) are ignored."""
    records: dict[int, dict[str, Any]] = {}
    for ev in events:
        kind, rid = ev.get("e"), ev.get("id")
        if not isinstance(rid, int):
            continue
        if kind == "start":
            records[rid] = {
                "id": rid,
                "time": ev["t"],
                "method": ev["method"],
                "scheme": ev["scheme"],
                "host": ev["host"],
                "port": ev["port"],
                "path": ev["path"],
                "url": ev["url"],
                "http_version": ev["http_version"],
                "headers": _headers(ev["headers"]),
                "client": ev["client"],
                "answer": ev["answer"],
                "rule": ev.get("rule"),
                "state": "pending",
            }
            continue
        rec = records.get(rid)
        if rec is None:
            continue
        if kind == "body":
            rec["body"] = _body(ev, spill_dir)
        elif kind == "answer":
            rec["status"] = ev["status"]
            rec["response_headers"] = _headers(ev.get("headers") or ())
            rec["response_size"] = ev.get("size")
            rec["response_sha256"] = ev.get("sha256")
            rec["finished_at"] = ev["t"]
            if rec["state"] == "pending":
                rec["state"] = "complete"
        elif kind == "error":
            rec["error"] = ev["message"]
            rec["state"] = "failed"
            rec["finished_at"] = ev["t"]
            if "body" in ev and "body" not in rec:
                rec["body"] = _body(ev["body"], spill_dir)
        elif kind == "answer_kind":  # a decision taken after the start (a tunnel)
            rec["answer"] = ev["answer"]
    return [EgressRequest.model_validate(r) for _, r in sorted(records.items())]


class ResponseBody(NamedTuple):
    """The response body the recorder kept for a passed request. When the exchange broke
    (`error`), `body` is what arrived before it and `status` and `headers` what the host
    had answered."""

    body: Body
    error: str | None = None
    status: int | None = None
    headers: tuple[Header, ...] = ()


def response_bodies(
    events: Iterable[Mapping[str, Any]], spill_dir: Path
) -> dict[int, ResponseBody]:
    """Request id → the response body the recorder kept for it (passed requests only).
    Kept apart from `EgressRequest`: what a host answered is not the agent's request, and a
    model's answer is no evidence."""
    out: dict[int, ResponseBody] = {}
    for ev in events:
        rid = ev.get("id")
        if not isinstance(rid, int):
            continue
        if ev.get("e") == "answer" and isinstance(ev.get("body"), dict):
            out[rid] = ResponseBody(_body(ev["body"], spill_dir))
        elif ev.get("e") == "error" and isinstance(ev.get("response_body"), dict):
            status = ev.get("response_status")
            out[rid] = ResponseBody(
                _body(ev["response_body"], spill_dir),
                str(ev.get("message", "")),
                status if isinstance(status, int) else None,
                tuple(_headers(ev.get("response_headers") or ())),
            )
    return out


def open_tunnels(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """Tunnels (CONNECTs) that have not yet carried TLS or TCP, nor failed."""
    opened: set[str] = set()
    for ev in events:
        if ev.get("e") == "tunnel":
            opened.add(str(ev["conn"]))
        elif ev.get("e") == "tunnel_done":
            opened.discard(str(ev["conn"]))
    return opened


def iter_b64(pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[list[str]]:
    """Header pairs as they go into the log: both halves base64, so no byte is lost."""
    for n, v in pairs:
        yield [base64.b64encode(n).decode("ascii"), base64.b64encode(v).decode("ascii")]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


__all__ = [
    "Body",
    "EgressRequest",
    "Header",
    "ResponseBody",
    "encode_event",
    "fold",
    "read_events",
    "response_bodies",
]
