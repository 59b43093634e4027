"""A stand-in model server on loopback: it speaks the OpenAI chat-completions and the Anthropic
messages protocols well enough for the real SDKs, answers what a test scripts, and records
every request it receives. It is not a model: its verdicts are written by the test.

    with ModelServer() as server:
        server.script(Reply(status=429, headers={"Retry-After": "0.2"}), Reply(text="{...}"))
        ...  # point OPENAI_BASE_URL at server.url, ANTHROPIC_BASE_URL at server.anthropic_url
        assert server.requests[0].body["temperature"] == 0
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

DEFAULT_VERDICT = json.dumps({"is_success": False, "reasoning": "default"})

# The error types each provider names in its error body, by status.
OPENAI_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    404: "The model does not exist.",
    429: "Rate limit reached for requests.",
    500: "The server had an error while processing your request.",
    503: "The engine is currently overloaded.",
    529: "Overloaded.",
}


@dataclass(frozen=True)
class Reply:
    """One scripted answer (by default the verdict ``{"is_success": false, "reasoning":
    "default"}``).

    `status` >= 400 answers with the provider's error body (`message` in it, or a stock one);
    `body` replaces the whole body with raw bytes. `finish` None is the protocol's own
    "finished normally" (``stop`` for OpenAI, ``end_turn`` for Anthropic). `delay` seconds pass
    before the answer is sent.
    """

    status: int = 200
    text: str | None = DEFAULT_VERDICT
    model: str = "stand-in-model"
    finish: str | None = None
    refusal: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes | None = None
    message: str | None = None


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any


Responder = Callable[[Any], Reply]


def user_text(body: Any) -> str:
    """The text of the user messages of a chat-completions or messages request body."""
    return "\n".join(
        _text(m.get("content")) for m in body.get("messages", []) if m.get("role") == "user"
    )


def system_text(body: Any) -> str:
    """The system prompt of a request body: Anthropic's `system`, or OpenAI's system messages."""
    if "system" in body:
        return _text(body["system"])
    roles = ("system", "developer")
    return "\n".join(
        _text(m.get("content")) for m in body.get("messages", []) if m.get("role") in roles
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def verdict(is_success: bool, reasoning: str = "scripted") -> str:
    """The JSON text of a judge's verdict."""
    return json.dumps({"is_success": is_success, "reasoning": reasoning})


def rubric_responder(rules: Iterable[tuple[str, bool]], default: bool = False) -> Responder:
    """A scripted stand-in judge, not a model: the verdict of the first `(substring, verdict)`
    rule whose substring occurs in the request's user message, else `default`.

        server.responder = rubric_responder([("deleted the backup", True)])
    """
    ordered = list(rules)

    def respond(body: Any) -> Reply:
        text = user_text(body)
        for needle, answer in ordered:
            if needle in text:
                return Reply(text=verdict(answer, f"the output mentions {needle!r}"))
        return Reply(text=verdict(default, "no rule matched"))

    return respond


#: A span of planted attack text the prompt marks as quoted (`oracle.judging.llm.spec`).
QUOTED_ATTACK = re.compile(r"<<QUOTED-ATTACK-(\w+)>>.*?<</QUOTED-ATTACK-\1>>", re.DOTALL)


def rubric_of(body: Any) -> str:
    """The rubric of a judge's request (the text between ``Rubric:`` and the content)."""
    text = user_text(body)
    return text.partition("Rubric:\n")[2].partition("\n\nContent (")[0]


def own_content(body: Any) -> str:
    """What a judge's request asks about, without the rubric and without the spans marked as
    quoted attack text: the agent's own words."""
    return QUOTED_ATTACK.sub("", user_text(body).partition("\n\nContent (")[2])


def quote_aware_responder(judges: Mapping[str, Iterable[str]], default: bool = False) -> Responder:
    """A scripted stand-in judge, not a model, that keeps the prompt's rule that quoted attack
    text is not the agent's: for the first key of `judges` found in the request's rubric, yes
    when one of its phrases occurs (in any case) in `own_content`; else `default`.

        server.responder = quote_aware_responder({"two-factor": ["disable 2fa", "untick"]})
    """
    table = [(key, [p.lower() for p in phrases]) for key, phrases in judges.items()]

    def respond(body: Any) -> Reply:
        rubric, own = rubric_of(body), own_content(body).lower()
        for key, phrases in table:
            if key in rubric:
                hit = next((p for p in phrases if p in own), None)
                why = f"the agent's own words say {hit!r}" if hit else "no phrase of the rubric"
                return Reply(text=verdict(hit is not None, why))
        return Reply(text=verdict(default, "no judge of this rubric is scripted"))

    return respond


def default_responder(body: Any) -> Reply:
    return Reply()


class ModelServer:
    """The server, started on construction on 127.0.0.1 (a free port) in a daemon thread."""

    def __init__(self, responder: Responder = default_responder) -> None:
        self.responder = responder
        self.requests: list[Recorded] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The OpenAI SDK's base URL (it appends ``/chat/completions``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        """The Anthropic SDK's base URL (it appends ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order, then with the responder."""
        with self._lock:
            self._queue.extend(replies)

    def next_reply(self, body: Any) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(body)

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def wait(self, seconds: float) -> None:
        """Sleep, but wake when the server closes."""
        self._closing.wait(seconds)

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests read `server.requests`, not a log

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = raw.decode("utf-8", "replace")
            server.record(
                Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            path = self.path.split("?")[0]
            if path == "/v1/chat/completions":
                protocol = "openai"
            elif path == "/v1/messages":
                protocol = "anthropic"
            else:
                self._send(404, b'{"error": {"message": "no such path"}}', {})
                return
            reply = server.next_reply(body if isinstance(body, dict) else {})
            if reply.delay:
                server.wait(reply.delay)
            payload = _payload(protocol, reply, body if isinstance(body, dict) else {})
            # The client may have given up waiting (a timeout test).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(reply.status, payload, reply.headers)

        def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

    return Handler


def _payload(protocol: str, reply: Reply, request: dict[str, Any]) -> bytes:
    if reply.body is not None:
        return reply.body
    if reply.status >= 400:
        message = reply.message or MESSAGES.get(reply.status, f"HTTP {reply.status}")
        if protocol == "openai":
            kind, code = OPENAI_ERRORS.get(reply.status, ("api_error", None))
            error: dict[str, Any] = {"message": message, "type": kind, "param": None, "code": code}
            return json.dumps({"error": error}).encode()
        kind = ANTHROPIC_ERRORS.get(reply.status, "api_error")
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    if protocol == "openai":
        return json.dumps(_chat_completion(reply, request)).encode()
    return json.dumps(_message(reply, request)).encode()


def _chat_completion(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    prompt = len(user_text(request).split()) + len(system_text(request).split())
    completion = len((reply.text or "").split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text, "refusal": reply.refusal},
                "logprobs": None,
                "finish_reason": reply.finish or "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _message(reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
    content = [] if reply.text is None else [{"type": "text", "text": reply.text}]
    stop = reply.finish or ("refusal" if reply.refusal else "end_turn")
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": len(user_text(request).split()) + len(system_text(request).split()),
            "output_tokens": len((reply.text or "").split()),
        },
    }
