"""Messages between the oracle and its scorer processes, over a Unix stream socket.

A message is a JSON header and zero or more byte blobs (the evidence files, sent as they are,
never re-encoded)::

    !I header length | header (JSON, with "blobs": [n1, n2, …]) | blob 1 | blob 2 | …

Reads take a deadline: a peer that stops answering is a `ChannelTimeout`, one that goes away a
`ChannelClosed`, so the side that waits always knows which happened.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence
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
