"""Model API traffic, read from what the egress recorder kept: which model answered a call and
how many tokens it used, as the *response* says (observed at the boundary, never claimed).

The recorder hands each exchange over as an `Exchange` (the request and the response body it
kept, content coding undone); `recognise` tells whether it is a model call and reads it:

- OpenAI-shaped: ``POST …/chat/completions``, ``…/completions`` and ``…/responses``; the
  response's ``model`` and ``usage`` (``prompt_tokens``/``completion_tokens``, or
  ``input_tokens``/``output_tokens`` for the responses API); streamed as server-sent events,
  the chunk that carries ``usage`` (chat completions send one only when the client asked with
  ``stream_options.include_usage``) or the ``response.completed`` event.
- Anthropic-shaped: ``POST …/v1/messages`` (or ``…/messages`` with an ``anthropic-version``
  header); ``model`` and ``usage.input_tokens``/``output_tokens`` (cache reads and writes count
  as input); streamed, ``message_start`` then the last ``message_delta``'s usage.

What a response does not say stays unknown (``None``) with a note saying why: a body cut at
the recorder's cap, a stream that ended early, a body that is not JSON, a stream without usage.
Nothing is taken from the request but the model it asked for, which is kept apart
(``requested_model``): the model that answered is the response's.

>>> ex = Exchange(1, "net", "POST", "api.test", "/v1/chat/completions", b'{"model": "m"}',
...     200, "application/json", b'{"model": "m-2024", "usage": {"prompt_tokens": 3,'
...     b' "completion_tokens": 5}}')
>>> c = recognise(ex)
>>> (c.provider, c.model, c.requested_model, c.input_tokens, c.output_tokens, c.streamed)
('openai', 'm-2024', 'm', 3, 5, False)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from oracle.evidence.usage import ModelCall

Api = Literal["chat.completions", "completions", "responses", "messages"]


@dataclass(frozen=True)
class Exchange:
    """One request that passed through the recorder and the response body it kept.

    `request_body` and `response_body` are whole and decoded (content coding undone), or
    ``None`` when they were not kept whole; `why_not_whole` then says why the response's is
    not (cut at the cap, the exchange failed, a coding that does not decode)."""

    request_id: int
    sink: str
    method: str
    host: str
    path: str
    request_body: bytes | None
    status: int | None
    content_type: str
    response_body: bytes | None
    why_not_whole: str | None = None
    request_headers: Mapping[str, str] = field(default_factory=dict)
    #: Where the exchange broke after the host began to answer (`response_body` None): the
    #: response as far as it arrived, decoded. Read only as a stream that reached its own
    #: end event (OpenAI's ``[DONE]``, Anthropic's ``message_stop``): an SDK hangs up there,
    #: at times before the last bytes of the transfer passed the recorder.
    partial_response_body: bytes | None = None


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def api_of(ex: Exchange) -> tuple[Literal["openai", "anthropic"], Api] | None:
    """Which model API `ex` calls, from its method, path and request; None for anything else.

    The path decides where it is unambiguous (``/chat/completions``, ``/v1/messages``); the
    generic ``/responses``, ``/completions`` and ``/messages`` also need a request body that
    names a ``model`` (or, for messages, Anthropic's version header)."""
    if ex.method.upper() != "POST":
        return None
    path = ex.path.split("?", 1)[0].rstrip("/")
    request = _json(ex.request_body)
    names_model = isinstance(request, dict) and "model" in request
    whole_but_not_json = ex.request_body is not None and not isinstance(request, dict)
    if path.endswith("/chat/completions"):
        return "openai", "chat.completions"
    if path.endswith("/messages"):
        headers = {k.lower() for k in ex.request_headers}
        if path.endswith("/v1/messages") or "anthropic-version" in headers or names_model:
            return "anthropic", "messages"
        return None
    if whole_but_not_json:
        return None
    if path.endswith("/responses") and (names_model or ex.request_body is None):
        return "openai", "responses"
    if path.endswith("/completions") and (names_model or ex.request_body is None):
        return "openai", "completions"
    return None


def _events(data: bytes) -> Iterator[tuple[str, Any]]:
    """Server-sent events as ``(event name, parsed data)``; data that is not JSON (OpenAI's
    ``[DONE]``) is skipped."""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        name, lines = "", []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                lines.append(value)
        if lines:
            parsed = _json("\n".join(lines).encode("utf-8"))
            if parsed is not None:
                yield name, parsed


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass
class _Read:
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None
    note: str | None = None
    #: A stream whose own end event was read.
    ended: bool = False


def _openai_usage(read: _Read, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    read.input_tokens = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    read.output_tokens = _int(usage.get("completion_tokens", usage.get("output_tokens")))
    details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
    if isinstance(details, dict):
        read.cached_input_tokens = _int(details.get("cached_tokens"))


def _anthropic_usage(read: _Read, usage: Any, *, start: bool) -> None:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; all are input."""
    if not isinstance(usage, dict):
        return
    if "input_tokens" in usage or start:
        plain = _int(usage.get("input_tokens"))
        reads = _int(usage.get("cache_read_input_tokens")) or 0
        writes = _int(usage.get("cache_creation_input_tokens")) or 0
        read.input_tokens = None if plain is None else plain + reads + writes
        read.cached_input_tokens, read.cache_write_tokens = reads, writes
    if "output_tokens" in usage:
        read.output_tokens = _int(usage.get("output_tokens"))


def _read_body(provider: str, body: Any) -> _Read:
    read = _Read()
    if not isinstance(body, dict):
        read.note = "the response body is not a JSON object"
        return read
    read.model = _str(body.get("model"))
    if provider == "anthropic":
        _anthropic_usage(read, body.get("usage"), start=True)
    else:
        _openai_usage(read, body.get("usage"))
    if read.input_tokens is None or read.output_tokens is None:
        read.note = "the response carries no usage"
    return read


def _read_stream(provider: str, api: Api, data: bytes) -> _Read:
    read = _Read()
    seen_end = False
    for name, ev in _events(data):
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type", name)
        if provider == "anthropic":
            if kind == "message_start" and isinstance(ev.get("message"), dict):
                read.model = _str(ev["message"].get("model")) or read.model
                _anthropic_usage(read, ev["message"].get("usage"), start=True)
                read.output_tokens = None  # message_start's count is a placeholder
            elif kind == "message_delta":
                _anthropic_usage(read, ev.get("usage"), start=False)
            elif kind == "message_stop":
                seen_end = True
            elif kind == "error":
                read.note = f"the stream reported an error: {str(ev.get('error'))[:200]}"
        elif api == "responses":
            response = ev.get("response")
            if isinstance(response, dict):
                read.model = _str(response.get("model")) or read.model
                if response.get("usage") is not None:
                    _openai_usage(read, response.get("usage"))
                seen_end = seen_end or kind in ("response.completed", "response.incomplete")
        else:
            read.model = _str(ev.get("model")) or read.model
            if ev.get("usage") is not None:
                _openai_usage(read, ev["usage"])
            seen_end = seen_end or ev.get("usage") is not None
    if b"data: [DONE]" in data:
        seen_end = True
    read.ended = seen_end
    if read.note is None and (read.input_tokens is None or read.output_tokens is None):
        if api == "chat.completions" and seen_end:
            read.note = (
                "the stream carried no usage (the client did not ask for "
                "stream_options.include_usage)"
            )
        else:
            read.note = "the stream carried no usage" + ("" if seen_end else " (it ended early)")
    if read.note is not None:
        read.input_tokens = read.output_tokens = None
    return read


def recognise(ex: Exchange) -> ModelCall | None:
    """The model call `ex` is, read from its response; None when it is no model API call."""
    shape = api_of(ex)
    if shape is None:
        return None
    provider, api = shape
    request = _json(ex.request_body)
    requested = _str(request.get("model")) if isinstance(request, dict) else None
    streamed = "text/event-stream" in ex.content_type.lower()
    read = _Read()
    if ex.status is None or not 200 <= ex.status < 300:
        status = "no answer" if ex.status is None else f"status {ex.status}"
        read.note = f"the call failed ({status}): no model answered it"
        if ex.why_not_whole and ex.status is None:
            read.note += f"; {ex.why_not_whole}"
    elif ex.response_body is None:
        if streamed and ex.partial_response_body is not None:
            read = _read_stream(provider, api, ex.partial_response_body)
        if not read.ended:
            read = _Read(
                note=f"the response body was not kept whole: {ex.why_not_whole or 'unknown'}"
            )
    elif streamed:
        read = _read_stream(provider, api, ex.response_body)
    else:
        read = _read_body(provider, _json(ex.response_body))
    return ModelCall(
        provider=provider,
        api=api,
        sink=ex.sink,
        request_id=ex.request_id,
        host=ex.host,
        path=ex.path.split("?", 1)[0],
        status=ex.status,
        model=read.model,
        requested_model=requested,
        input_tokens=read.input_tokens,
        output_tokens=read.output_tokens,
        cached_input_tokens=read.cached_input_tokens if read.input_tokens is not None else None,
        cache_write_tokens=read.cache_write_tokens if read.input_tokens is not None else None,
        streamed=streamed,
        note=read.note,
    )
