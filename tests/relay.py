"""A TCP relay between the oracle and a real server, which stops forwarding on cue.

What a stalled link looks like from the client: the TCP connection stays open and accepts
bytes, and nothing comes back. The relay forwards both ways until it sees `freeze_on` in what a
client sends (once `armed_by` exists, when given); from then on it forwards nothing on any
connection, drops what it reads, and parks new connections without an answer.

Example::

    with Relay(("127.0.0.1", 5432), freeze_on=b"DROP DATABASE", armed_by=marker) as relay:
        url = f"postgresql://postgres@127.0.0.1:{relay.port}/postgres"
        ...
    relay.frozen.is_set()            # whether the cue was seen
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from types import TracebackType


class Relay:
    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        freeze_on: bytes | None = None,
        armed_by: Path | None = None,
    ) -> None:
        self.upstream = upstream
        self.freeze_on = freeze_on
        self.armed_by = armed_by
        self.frozen = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        self._closing = False

    def __enter__(self) -> Relay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing = True
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.append(s)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            if self.frozen.is_set():
                continue  # parked: connected, and never answered
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._keep(server)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _armed(self) -> bool:
        return self.freeze_on is not None and (self.armed_by is None or self.armed_by.exists())

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        tail = b""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                if not self.frozen.is_set():
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                return
            if from_client and not self.frozen.is_set() and self._armed():
                assert self.freeze_on is not None
                if self.freeze_on in tail + data:
                    self.frozen.set()
                tail = (tail + data)[-len(self.freeze_on) :]
            if self.frozen.is_set():
                continue  # read and dropped: the "server" takes the bytes and never answers
            try:
                dst.sendall(data)
            except OSError:
                return
