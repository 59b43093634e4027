"""The mitmproxy addon of the egress recorder.

Run in the recorder's child process (`egress_child`), so that no state of mitmproxy is shared
with the harness. It writes every event to the log named in the configuration of the current
lease (see `egress_log`). A connection belongs to the lease whose port it reached: anything a
connection accepted under an earlier lease sends is killed and recorded nowhere.

How a request is answered:

- The decision (blocked, canned, passed) is taken when the request's headers arrive, from the
  host the recorder would connect to. With ``connection_strategy=lazy`` nothing upstream has
  been resolved or contacted at that point, also for HTTPS (the CONNECT is answered by the
  recorder itself).
- A routed request (a host a local server answers for) is sent to that server over plain
  HTTP, its ``Host`` kept, and recorded under the host the client asked for.
- A blocked or canned request with a small body gets its response set at once: mitmproxy reads
  the body, fires ``request`` (we log the body) and answers without ever connecting upstream.
- A request with a large or unknown-length body is streamed: each chunk is counted, hashed and
  kept in a spill file up to the cap (the rest is counted and dropped, and the record says
  ``truncated``). Passed requests stream on to their host; blocked and canned ones stream to a
  local drain that discards them, and the drain's reply is replaced by the real answer.
- What a passed host answers is kept as it was sent (content coding and all) up to the same
  cap, beside the log and never in a request's record: model API responses say which model
  answered and how many tokens it used (`oracle.sinks.egress_usage`).
- Raw TCP inside a CONNECT tunnel (not TLS, not HTTP) is recorded and closed unless the host is
  allowed; a client that refuses the sandbox's certificate is recorded with that error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import h11
from mitmproxy import ctx, http, tcp, tls

from oracle.proxies.egress_log import b64, encode_event, iter_b64
from oracle.proxies.egress_policy import BLOCKED_HEADER, Decision, EgressPolicy, blocked_message

#: Bodies up to this size are kept inline in the log line; larger ones go to a spill file.
INLINE_LIMIT = 64 * 1024


class _Capture:
    """A streamed body: counted, hashed, kept in `path` up to `limit` bytes; chunks pass on."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.size = 0
        self.kept = 0
        self.hash = hashlib.sha256()
        self.file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 - closed in close()

    def __call__(self, chunk: bytes) -> bytes:
        if chunk:
            self.size += len(chunk)
            self.hash.update(chunk)
            room = self.limit - self.kept
            if room > 0 and self.file is not None:
                part = chunk[:room]
                self.file.write(part)
                self.kept += len(part)
        return chunk

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def event(self, complete: bool) -> dict[str, Any]:
        self.close()
        return {
            "size": self.size,
            "kept": self.kept,
            "sha256": self.hash.hexdigest(),
            "spill": self.path.name,
            "complete": complete,
        }


class _Counter:
    """A streamed response body: counted and hashed, passed on unchanged; with a `keep`
    capture, also kept up to its cap (the response of a passed request)."""

    def __init__(self, keep: _Capture | None = None) -> None:
        self.size = 0
        self.hash = hashlib.sha256()
        self.keep = keep

    def __call__(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        self.hash.update(chunk)
        if self.keep is not None:
            self.keep(chunk)
        return chunk


@dataclass
class _Flow:
    id: int
    decision: Decision
    capture: _Capture | None = None
    redirected: bool = False
    counter: _Counter | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _answer(decision: Decision, host: str, port: int) -> http.Response:
    if decision.canned is not None:
        c = decision.canned
        headers = {"content-type": c.media_type, **dict(c.headers), BLOCKED_HEADER: "canned"}
        return http.Response.make(c.status, c.data, headers)
    return http.Response.make(
        403,
        blocked_message(host, port),
        {"content-type": "text/plain; charset=utf-8", BLOCKED_HEADER: "blocked"},
    )


class EgressAddon:
    """Records every request and answers it by the policy (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.drain: tuple[str, int] | None = None
        self.log: BinaryIO | None = None
        #: The port of the current lease (None between leases, and until the first one
        #: listens); only connections that reached it are served and recorded.
        self.port: int | None = None
        #: Every port a lease of this process listened on: a new lease never reuses one.
        self.used_ports: set[int] = set()
        self.begin(config)

    def begin(self, config: Mapping[str, Any]) -> None:
        """Take the configuration of a new lease (a fresh log, policy and state). Nothing is
        served until `port` is set."""
        self.end()
        self.policy = EgressPolicy.from_json(config["policy"])
        self.log = open(config["log"], "ab")  # noqa: SIM115 - closed in end()
        self.spill_dir = Path(config["spill_dir"])
        self.limit = int(config["body_limit"])
        self.stream_at = min(int(config.get("stream_threshold", 256 * 1024)), self.limit)
        self.flows: dict[str, _Flow] = {}
        self.next_id = 1
        #: Client connections that have not yet carried anything recorded (→ their CONNECT
        #: target, if they asked for one). Recorded on disconnect, so nothing goes unseen.
        self.quiet: dict[str, tuple[str, int] | None] = {}

    def listen(self, port: int) -> None:
        self.port = port
        self.used_ports.add(port)

    def end(self) -> None:
        """End the current lease: from now on nothing is served or written to its log."""
        self.port = None
        for state in getattr(self, "flows", {}).values():
            if state.capture is not None:
                state.capture.close()
            if state.counter is not None and state.counter.keep is not None:
                state.counter.keep.close()
        self.flows = {}
        self.quiet = {}
        if self.log is not None:
            self.log.close()
            self.log = None

    def _mine(self, client: Any) -> bool:
        """Whether `client` connected to the current lease's port (not to an earlier one)."""
        sockname: Any = getattr(client, "sockname", None)
        return self.port is not None and bool(sockname) and sockname[1] == self.port

    # -- the log ----------------------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        if self.log is None:
            return
        self.log.write(encode_event(event))
        self.log.flush()

    def _start(
        self, flow_id: str, decision: Decision, fields: dict[str, Any], conn: str | None = None
    ) -> _Flow:
        if conn is not None:
            self.quiet.pop(conn, None)
        rid = self.next_id
        self.next_id += 1
        self.emit(
            {
                "e": "start",
                "id": rid,
                "t": time.time(),
                "answer": decision.answer,
                "rule": decision.rule,
                **fields,
            }
        )
        state = _Flow(rid, decision)
        self.flows[flow_id] = state
        return state

    # -- hooks ------------------------------------------------------------------------------

    async def running(self) -> None:
        server = await asyncio.start_server(_drain, "127.0.0.1", 0)
        self.drain = ("127.0.0.1", server.sockets[0].getsockname()[1])
        m: Any = ctx.master
        addrs = m.addons.get("proxyserver").listen_addrs()
        if not addrs:  # it failed to bind; `serve` reports why once the master has stopped
            m.shutdown()
            return
        self.listen(int(addrs[0][1]))
        print(json.dumps({"port": addrs[0][1]}), flush=True)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if not self._mine(flow.client_conn):
            _kill(flow)
            return
        req = flow.request
        decision = self.policy.decide(req.host, req.port, req.path)
        client = flow.client_conn.peername
        state = self._start(
            flow.id,
            decision,
            {
                "method": req.method,
                "scheme": req.scheme,
                "host": req.host,
                "port": req.port,
                "path": req.path,
                "url": req.pretty_url,
                "http_version": req.http_version,
                "headers": list(iter_b64(req.headers.fields)),
                "client": f"{client[0]}:{client[1]}" if client else "",
            },
            flow.client_conn.id,
        )
        te = req.headers.get("transfer-encoding", "")
        try:
            length: int | None = int(req.headers["content-length"])
        except (KeyError, ValueError):
            length = None
        unknown = length is None and ("chunked" in te.lower() or req.is_http2 or req.is_http3)
        forwarded = decision.answer in ("passed", "routed")
        if decision.answer == "routed" and decision.upstream is not None:
            # To the local server that answers for this host, over plain HTTP, with the
            # host's own name kept in Host (the server answers by it).
            name = req.host
            req.scheme, req.host, req.port = "http", decision.upstream[0], decision.upstream[1]
            req.headers["Host"] = name
            if req.authority:
                req.authority = name
        if unknown or (length is not None and length > self.stream_at):
            state.capture = _Capture(self.spill_dir / f"{state.id}.body", self.limit)
            req.stream = state.capture
            if not forwarded and self.drain is not None:
                state.redirected = True
                state.extra.update(host=req.host, port=req.port)
                req.scheme, req.host, req.port = "http", self.drain[0], self.drain[1]
        elif not forwarded:
            flow.response = _answer(decision, req.host, req.port)

    def request(self, flow: http.HTTPFlow) -> None:
        state = self.flows.get(flow.id)
        if state is None:
            if not self._mine(flow.client_conn):
                _kill(flow)
            return
        if state.capture is not None:
            self.emit({"e": "body", "id": state.id, **state.capture.event(True)})
            return
        data = flow.request.raw_content or b""
        self.emit({"e": "body", "id": state.id, **self._body(state.id, data)})

    def _body(self, rid: int, data: bytes, suffix: str = "body") -> dict[str, Any]:
        kept = data[: self.limit]
        out: dict[str, Any] = {
            "size": len(data),
            "kept": len(kept),
            "sha256": hashlib.sha256(data).hexdigest(),
            "complete": True,
        }
        if len(kept) <= INLINE_LIMIT:
            out["inline"] = b64(kept)
        else:
            name = f"{rid}.{suffix}"
            (self.spill_dir / name).write_bytes(kept)
            out["spill"] = name
        return out

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = self.flows.get(flow.id)
        if state is None and not self._mine(flow.client_conn):
            _kill(flow)
            return
        if state is None or state.redirected or flow.response is None:
            return
        length = flow.response.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > self.stream_at:
            # What a passed host answered is kept (as sent, content coding and all) up to the
            # cap: model API responses say which model answered and what it used.
            keep = (
                _Capture(self.spill_dir / f"{state.id}.response", self.limit)
                if state.decision.answer == "passed"
                else None
            )
            state.counter = _Counter(keep)
            flow.response.stream = state.counter

    def response(self, flow: http.HTTPFlow) -> None:
        state = self.flows.pop(flow.id, None)
        if state is None and not self._mine(flow.client_conn):
            _kill(flow)
            return
        if state is None or flow.response is None:
            return
        if state.redirected:
            host, port = str(state.extra["host"]), int(state.extra["port"])
            flow.response = _answer(state.decision, host, port)
        resp = flow.response
        kept: dict[str, Any] | None = None
        if state.counter is not None:
            size, digest = state.counter.size, state.counter.hash.hexdigest()
            if state.counter.keep is not None:
                kept = state.counter.keep.event(True)
        else:
            body = resp.raw_content or b""
            size, digest = len(body), hashlib.sha256(body).hexdigest()
            if state.decision.answer == "passed":
                kept = self._body(state.id, body, "response")
        self.emit(
            {
                "e": "answer",
                "id": state.id,
                "t": time.time(),
                "status": resp.status_code,
                "headers": list(iter_b64(resp.headers.fields)),
                "size": size,
                "sha256": digest,
                **({"body": kept} if kept is not None else {}),
            }
        )

    def error(self, flow: http.HTTPFlow) -> None:
        state = self.flows.pop(flow.id, None)
        if state is None:
            return
        event: dict[str, Any] = {
            "e": "error",
            "id": state.id,
            "t": time.time(),
            "message": flow.error.msg if flow.error else "unknown error",
        }
        if state.capture is not None:
            event["body"] = {"id": state.id, **state.capture.event(False)}
        if state.counter is not None and state.counter.keep is not None:
            # What a passed host began to answer before the exchange broke: a model that
            # answered used its tokens even when the client hung up mid-stream.
            event["response_body"] = state.counter.keep.event(False)
            if flow.response is not None:
                event["response_status"] = flow.response.status_code
                event["response_headers"] = list(iter_b64(flow.response.headers.fields))
        self.emit(event)

    def http_connect(self, flow: http.HTTPFlow) -> None:
        """A tunnel opens; until it carries TLS or TCP, a snapshot waits a moment for it (a
        handshake that fails is recorded only when it has failed)."""
        if not self._mine(flow.client_conn):
            _kill(flow)
            return
        self.emit({"e": "tunnel", "conn": flow.client_conn.id, "t": time.time()})
        if flow.client_conn.id in self.quiet:
            self.quiet[flow.client_conn.id] = (flow.request.host, flow.request.port)

    def client_connected(self, client: Any) -> None:
        if not self._mine(client):
            # Accepted by the listener of an earlier lease: refused, recorded nowhere.
            client.error = "the recorder's lease for this port has ended"
            return
        self.quiet[client.id] = None

    def client_disconnected(self, client: Any) -> None:
        """A connection that closes having carried nothing recorded (not HTTP, a malformed
        request, a tunnel left unused) is recorded as such."""
        if client.id not in self.quiet:
            return
        target = self.quiet.pop(client.id)
        host, port = target if target is not None else ("", 0)
        state = self._start(
            f"conn:{client.id}",
            Decision("blocked"),
            {
                "method": "CONNECT" if target is not None else "",
                "scheme": "",
                "host": host,
                "port": port,
                "path": "",
                "url": f"{host}:{port}" if target is not None else "",
                "http_version": "",
                "headers": [],
                "client": f"{client.peername[0]}:{client.peername[1]}" if client.peername else "",
            },
        )
        self.flows.pop(f"conn:{client.id}", None)
        self.emit(
            {
                "e": "error",
                "id": state.id,
                "t": time.time(),
                "message": "the connection closed without a request the recorder could read "
                "(not HTTP, malformed, or a tunnel left unused)",
            }
        )

    def tls_established_client(self, data: tls.TlsData) -> None:
        if not self._mine(data.context.client):
            return
        self.emit({"e": "tunnel_done", "conn": data.context.client.id})

    def tls_failed_client(self, data: tls.TlsData) -> None:
        """The client refused the handshake (most often: it does not trust the sandbox's CA).
        No request will follow; record the attempt with the reason."""
        if not self._mine(data.context.client):
            return
        server = data.context.server.address or ("", 0)
        host = data.conn.sni or str(server[0])
        port = int(server[1])
        state = self._tunnel(data.context.client, host, port, "CONNECT")
        self.flows.pop(f"tls:{state.id}", None)
        self.emit(
            {
                "e": "error",
                "id": state.id,
                "t": time.time(),
                "message": f"the client refused the TLS handshake: {data.conn.error}",
            }
        )
        self.emit({"e": "tunnel_done", "conn": data.context.client.id})

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        """Raw TCP in a tunnel: recorded; closed unless the host is allowed."""
        if not self._mine(flow.client_conn):
            _kill(flow)
            return
        host, port = flow.server_conn.address or ("", 0)
        state = self._tunnel(flow.client_conn, str(host), int(port), "TCP")
        self.emit({"e": "tunnel_done", "conn": flow.client_conn.id})
        if self.policy.may_tunnel(str(host), int(port)):
            self.emit({"e": "answer_kind", "id": state.id, "answer": "passed"})
            self.emit({"e": "answer", "id": state.id, "t": time.time(), "status": None})
            return
        killable: Any = flow
        killable.kill()
        self.emit(
            {
                "e": "error",
                "id": state.id,
                "t": time.time(),
                "message": f"raw TCP to {host}:{port} closed: the host is not allowed",
            }
        )

    def _tunnel(self, client: Any, host: str, port: int, method: str) -> _Flow:
        peer = getattr(client, "peername", None)
        decision = Decision("passed") if self.policy.may_tunnel(host, port) else Decision("blocked")
        self.quiet.pop(getattr(client, "id", ""), None)
        return self._start(
            f"tls:{self.next_id}",
            decision,
            {
                "method": method,
                "scheme": "tcp" if method == "TCP" else "https",
                "host": host,
                "port": port,
                "path": "",
                "url": f"{host}:{port}",
                "http_version": "",
                "headers": [],
                "client": f"{peer[0]}:{peer[1]}" if peer else "",
            },
        )


def _kill(flow: Any) -> None:
    """Kill a flow of a connection from an earlier lease: it reaches nothing."""
    if flow.killable:
        flow.kill()


async def _drain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A local HTTP/1.1 endpoint that reads and discards requests and answers 204. Streamed
    requests that must not reach their host are sent here; their real answer replaces this."""
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(1 << 16)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.EndOfMessage):
                out = conn.send(h11.Response(status_code=204, headers=[("content-length", "0")]))
                out = (out or b"") + (conn.send(h11.EndOfMessage()) or b"")
                writer.write(out)
                await writer.drain()
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                break
    except (h11.ProtocolError, ConnectionError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
