"""Messages between the oracle and its scorer processes, over a Unix stream socket.

A message is a JSON header and zero or more byte blobs (the evidence files, sent as they are,
never re-encoded)::

    !I header length | header (JSON, with "blobs": [n1, n2, …]) | blob 1 | blob 2 | …

Reads take a deadline: a peer that stops answering is a `ChannelTimeout`, one that goes away a
`ChannelClosed`, so the side that waits always knows which happened.

A channel is a socket handed to the scorer process (a socketpair, its end passed as a file
descriptor), or, where none can be handed over (into a container), a connection the process
opens to the oracle's `Rendezvous` and greets with ``{"op": "hello", "token": …}``.
"""

from __future__ import annotations

import contextlib
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

_LENGTH = struct.Struct("!I")
#: A header is small (names, verdicts, reasons); anything bigger is a broken or hostile peer.
MAX_HEADER = 16 * 1024 * 1024
#: The most bytes one message may carry in blobs (a trial's snapshots and diff).
MAX_BLOBS = 8 * 1024 * 1024 * 1024


class ChannelError(RuntimeError):
    """The peer broke the protocol, went away or did not answer in time."""


class ChannelClosed(ChannelError):
    """The peer closed its end (it exited, crashed or was killed)."""


class ChannelTimeout(ChannelError):
    """No whole message arrived before the deadline."""


def send(sock: socket.socket, header: dict[str, Any], blobs: Sequence[bytes] = ()) -> None:
    """Send one message. Raises `ChannelClosed` where the peer is gone."""
    head = orjson.dumps({**header, "blobs": [len(b) for b in blobs]})
    try:
        sock.sendall(_LENGTH.pack(len(head)) + head)
        for blob in blobs:
            sock.sendall(blob)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(f"the peer went away while a message was sent: {exc}") from exc


def _read(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("no answer before the deadline")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            k = sock.recv_into(view[got:], n - got)
        except TimeoutError:
            raise ChannelTimeout("no answer before the deadline") from None
        except ConnectionResetError as exc:
            raise ChannelClosed(f"the peer went away: {exc}") from exc
        if k == 0:
            raise ChannelClosed("the peer closed the channel")
        got += k
    return bytes(buf)


def receive(
    sock: socket.socket, deadline: float | None = None
) -> tuple[dict[str, Any], list[bytes]]:
    """Receive one message: ``(header, blobs)``. `deadline` is a `time.monotonic()` instant."""
    (size,) = _LENGTH.unpack(_read(sock, _LENGTH.size, deadline))
    if size > MAX_HEADER:
        raise ChannelError(f"a message header of {size} bytes is over the limit of {MAX_HEADER}")
    try:
        header = orjson.loads(_read(sock, size, deadline))
    except orjson.JSONDecodeError as exc:
        raise ChannelError(f"a message header is not JSON: {exc}") from None
    sizes = header.pop("blobs", []) if isinstance(header, dict) else None
    if (
        not isinstance(header, dict)
        or not isinstance(sizes, list)
        or not all(type(n) is int and n >= 0 for n in sizes)
    ):
        raise ChannelError("a message header is not an object with a list of blob sizes")
    if sum(sizes) > MAX_BLOBS:
        raise ChannelError(f"a message of {sum(sizes)} bytes is over the limit of {MAX_BLOBS}")
    return header, [_read(sock, n, deadline) for n in sizes]


def send_with_fd(sock: socket.socket, header: dict[str, Any], fd: int) -> None:
    """Send a small message (no blobs) with one file descriptor passed alongside it."""
    head = orjson.dumps({**header, "blobs": []})
    data = _LENGTH.pack(len(head)) + head
    try:
        sent = socket.send_fds(sock, [data], [fd])
        if sent < len(data):
            sock.sendall(data[sent:])
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(f"the peer went away while a message was sent: {exc}") from exc


def receive_with_fd(sock: socket.socket) -> tuple[dict[str, Any], int | None]:
    """Receive a message sent by `send_with_fd` (or `send` without blobs): ``(header, fd)``."""
    sock.settimeout(None)
    data, fds, _, _ = socket.recv_fds(sock, 64 * 1024, 1)
    if not data:
        raise ChannelClosed("the peer closed the channel")
    if len(data) < _LENGTH.size:
        data += _read(sock, _LENGTH.size - len(data), None)
    (size,) = _LENGTH.unpack(data[: _LENGTH.size])
    if size > MAX_HEADER:
        raise ChannelError(f"a message header of {size} bytes is over the limit of {MAX_HEADER}")
    rest = data[_LENGTH.size :]
    if len(rest) < size:
        rest += _read(sock, size - len(rest), None)
    if len(rest) != size:
        raise ChannelError("a message with a passed descriptor ran into the next one")
    header = orjson.loads(rest)
    if not isinstance(header, dict):
        raise ChannelError("a message header is not an object")
    header.pop("blobs", None)
    return header, (fds[0] if fds else None)


#: The most bytes a greeting may take: ``{"op": "hello", "token": …}``.
MAX_HELLO = 4096


def connect_back(path: str, token: str) -> socket.socket:
    """Open a channel to the oracle's `Rendezvous` at `path` and name `token`, where a
    descriptor cannot be passed (a scorer in a container). Raises `OSError`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        send(sock, {"op": "hello", "token": token})
    except BaseException:
        sock.close()
        raise
    return sock


class Rendezvous:
    """Where scorer processes that cannot be handed a socket connect back: a Unix socket
    listening in a private folder, which a container gets bind-mounted.

    Each expected channel has a one-time token, carried by the request that starts its
    process; a connection is handed over only once it has named a token that is expected, so
    anything else that connects (a predicate in the same container) gets nothing, and a
    connection that says nothing is dropped after `greeting` seconds. One thread serves every
    greeting, so silent connections cannot hold up the ones that are awaited.

    Example::

        with Rendezvous(folder) as meeting:
            token = meeting.expect()
            start_process_that_connects(meeting.path, token)
            chan = meeting.wait(token, time.monotonic() + 60)
    """

    #: At most this many connections may be greeting at once; more are refused.
    PENDING = 64

    def __init__(self, folder: Path, *, greeting: float = 10.0) -> None:
        self.path = folder / "scorer.sock"
        self.greeting = greeting
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._expected: dict[str, socket.socket | None] = {}
        self._arrived = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True, name="oracle-rendezvous")
        self._thread.start()

    def __enter__(self) -> Rendezvous:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def expect(self) -> str:
        """A new token; the channel that names it is kept for `wait`."""
        token = secrets.token_hex(16)
        with self._lock:
            self._expected[token] = None
        return token

    def wait(
        self, token: str, deadline: float, alive: Callable[[], bool] = lambda: True
    ) -> socket.socket:
        """The channel that named `token`. Raises `ChannelTimeout` when none came before
        `deadline` (a `time.monotonic()` instant), `ChannelClosed` when `alive()` turns false
        first or the rendezvous closes; the token is spent either way."""
        with self._lock:
            try:
                while self._expected.get(token) is None:
                    if self._closed:
                        raise ChannelClosed("the rendezvous was closed")
                    if not alive():
                        raise ChannelClosed("the process ended before it connected")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ChannelTimeout("no process connected before the deadline")
                    self._arrived.wait(min(left, 0.1))
                chan = self._expected[token]
                assert chan is not None
                return chan
            finally:
                self._expected.pop(token, None)

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        # connection → (bytes read so far, when it is dropped)
        pending: dict[socket.socket, tuple[bytearray, float]] = {}
        while True:
            for key, _ in sel.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    for conn in pending:
                        conn.close()
                    sel.close()
                    return
                if sock is self._listener:
                    self._accept(sel, pending)
                else:
                    self._read_greeting(sel, pending, sock)
            now = time.monotonic()
            for conn in [c for c, (_, until) in pending.items() if until < now]:
                self._drop(sel, pending, conn)

    def _accept(
        self, sel: selectors.BaseSelector, pending: dict[socket.socket, tuple[bytearray, float]]
    ) -> None:
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if len(pending) >= self.PENDING:
            conn.close()
            return
        conn.setblocking(False)
        pending[conn] = (bytearray(), time.monotonic() + self.greeting)
        sel.register(conn, selectors.EVENT_READ)

    def _drop(
        self,
        sel: selectors.BaseSelector,
        pending: dict[socket.socket, tuple[bytearray, float]],
        conn: socket.socket,
        *,
        close: bool = True,
    ) -> None:
        sel.unregister(conn)
        del pending[conn]
        if close:
            conn.close()

    def _read_greeting(
        self,
        sel: selectors.BaseSelector,
        pending: dict[socket.socket, tuple[bytearray, float]],
        conn: socket.socket,
    ) -> None:
        buf, _ = pending[conn]
        # Never read past the greeting: what the process says next is for its reader.
        if len(buf) < _LENGTH.size:
            want = _LENGTH.size - len(buf)
        else:
            (size,) = _LENGTH.unpack(buf[: _LENGTH.size])
            want = _LENGTH.size + size - len(buf)
        try:
            got = conn.recv(want)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            got = b""
        if not got:
            self._drop(sel, pending, conn)
            return
        buf += got
        if len(buf) < _LENGTH.size:
            return
        (size,) = _LENGTH.unpack(buf[: _LENGTH.size])
        if size > MAX_HELLO:
            self._drop(sel, pending, conn)
            return
        if len(buf) < _LENGTH.size + size:
            return
        try:
            header = orjson.loads(bytes(buf[_LENGTH.size :]))
        except orjson.JSONDecodeError:
            header = None
        token = header.get("token") if isinstance(header, dict) else None
        with self._lock:
            awaited = (
                isinstance(header, dict)
                and header.get("op") == "hello"
                and isinstance(token, str)
                and token in self._expected
                and self._expected[token] is None
            )
            if awaited:
                self._drop(sel, pending, conn, close=False)
                conn.setblocking(True)
                self._expected[str(token)] = conn
                self._arrived.notify_all()
                return
        self._drop(sel, pending, conn)

    def close(self) -> None:
        """Stop listening, drop what has not been handed over, remove the socket file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            unclaimed = [c for c in self._expected.values() if c is not None]
            self._expected.clear()
            self._arrived.notify_all()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for conn in unclaimed:
            conn.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
