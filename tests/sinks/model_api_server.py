"""A small model API server on loopback for the usage tests: OpenAI's chat completions and
responses shapes and Anthropic's messages shape, each streamed (server-sent events) or not,
with the model it answers as, the token counts it reports, the content coding of its bodies
and padding (to outgrow the recorder's cap) set per test.

    with ModelApi() as api:
        api.answer_as = "gpt-test-2025-01-01"     # None: the model the request asked for
        api.url                                   # http://127.0.0.1:<port>
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class ModelApi:
    """The server; its attributes say how the next answers look."""

    def __init__(self) -> None:
        self.answer_as: str | None = None
        self.input_tokens = 11
        self.output_tokens = 7
        self.encoding: str | None = None  # "gzip", "br" or "zstd": the body's content coding
        self.pad = 0  # bytes of filler text in the answer
        self.delay = 0.0  # seconds between the chunks of a stream
        self.hold_end = 0.0  # seconds between a stream's last event and the end of its transfer
        self.received: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"

    def __enter__(self) -> ModelApi:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def model(self, request: dict[str, Any]) -> str:
        return self.answer_as or str(request.get("model"))

    def text(self) -> str:
        return "done." + " filler" * (self.pad // 7)

    # -- bodies, one per shape -------------------------------------------------------------

    def chat(self, req: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": self.model(req),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.text()},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": self.input_tokens,
                "completion_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens,
            },
        }

    def chat_stream(self, req: dict[str, Any]) -> Iterator[bytes]:
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1}
        base["model"] = self.model(req)
        for piece in ("do", "ne.", self.text()[5:]):
            delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            yield _sse({**base, "choices": [delta]})
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (req.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": self.input_tokens,
                "completion_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens,
            }
            yield _sse({**base, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    def response(self, req: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": self.model(req),
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": self.text(), "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + self.output_tokens,
            },
        }

    def message(self, req: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": self.model(req),
            "content": [{"type": "text", "text": self.text()}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        }

    def message_stream(self, req: dict[str, Any]) -> Iterator[bytes]:
        start = {**self.message(req), "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": self.input_tokens, "output_tokens": 1}
        yield _sse({"type": "message_start", "message": start}, "message_start")
        block = {"type": "content_block_start", "index": 0}
        yield _sse({**block, "content_block": {"type": "text", "text": ""}}, block["type"])
        for piece in ("do", "ne.", self.text()[5:]):
            delta = {"type": "content_block_delta", "index": 0}
            delta["delta"] = {"type": "text_delta", "text": piece}
            yield _sse(delta, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        final = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
        final["usage"] = {"output_tokens": self.output_tokens}
        yield _sse(final, "message_delta")
        yield _sse({"type": "message_stop"}, "message_stop")


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data) + "\n\n").encode()


def _encode(data: bytes, coding: str | None) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "br":
        import brotli  # type: ignore[import-untyped]

        return bytes(brotli.compress(data))
    if coding == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return data


def _handler(api: ModelApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            api.received.append({"path": self.path, **req})
            path = self.path.split("?", 1)[0]
            if path.endswith("/chat/completions"):
                body, stream = api.chat, api.chat_stream
            elif path.endswith("/responses"):
                body, stream = api.response, None
            elif path.endswith("/messages"):
                body, stream = api.message, api.message_stream
            else:
                self.send_error(404)
                return
            if req.get("stream") and stream is not None:
                self._stream(b"".join(stream(req)))
            else:
                self._whole(json.dumps(body(req)).encode())

        def _whole(self, data: bytes) -> None:
            data = _encode(data, api.encoding)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            if api.encoding:
                self.send_header("content-encoding", api.encoding)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, data: bytes) -> None:
            # Chunked, as model APIs stream: the recorder sees no length and streams it on.
            data = _encode(data, api.encoding)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            if api.encoding:
                self.send_header("content-encoding", api.encoding)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for i in range(0, len(data), 200):
                    part = data[i : i + 200]
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.flush()
                    time.sleep(api.delay)
                time.sleep(api.hold_end)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client (or the recorder for it) hung up

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler
