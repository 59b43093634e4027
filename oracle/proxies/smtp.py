"""SMTP capture: a local aiosmtpd server that accepts every message and keeps it whole.

`SmtpCapture` is a context manager. It listens on 127.0.0.1 on an ephemeral port (aiosmtpd's
controller cannot take port 0 itself: it connects to the port to check that the server is up,
so a free port is found first and handed to it). Every accepted message is kept as it arrived —
envelope sender and recipients, the raw bytes — with the session's HELO name, login and the
client's address. Parsing happens later, by the mail sink, so that nothing a client sends can
make the server fail.

What is not accepted is recorded too, as a `Loss`: a client that drops the connection during
DATA, a message over the size limit, a line longer than SMTP allows.

Example::

    with SmtpCapture() as smtp:
        with smtplib.SMTP(smtp.host, smtp.port) as s:
            s.sendmail("a@x.test", ["b@y.test"], b"Subject: hi\\r\\n\\r\\nhello\\r\\n")
        smtp.messages()[0].rcpt_tos        # ('b@y.test',)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

DEFAULT_SIZE_LIMIT = 16 << 20


class SmtpError(RuntimeError):
    """The SMTP capture could not start, or is not running. Names the server and the cause."""

    def __init__(self, name: str, message: str) -> None:
        self.server = name
        super().__init__(f"SMTP capture {name!r}: {message}")


@dataclass(frozen=True)
class Captured:
    """One message the server accepted, exactly as it arrived."""

    id: int
    time: float
    peer: str
    helo: str | None
    login: str | None
    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes


@dataclass(frozen=True)
class Loss:
    """A message that did not arrive whole, and why (the client's envelope, as far as it got)."""

    id: int
    time: float
    peer: str
    mail_from: str | None
    rcpt_tos: tuple[str, ...]
    reason: str


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (bound to 0, read, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class _Store:
    """Messages and losses, shared by the server thread and the harness."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.messages: list[Captured] = []
        self.losses: list[Loss] = []
        self.open = 0  # client connections not yet closed

    def add_message(self, session: Session, envelope: Envelope) -> None:
        raw = envelope.original_content or b""
        with self.lock:
            self.messages.append(
                Captured(
                    id=next(self.ids),
                    time=time.time(),
                    peer=_peer(session),
                    helo=session.host_name,
                    login=_login(session),
                    mail_from=str(envelope.mail_from or ""),
                    rcpt_tos=tuple(str(r) for r in envelope.rcpt_tos),
                    raw=bytes(raw),
                )
            )

    def add_loss(self, session: Session | None, envelope: Envelope | None, reason: str) -> None:
        with self.lock:
            self.losses.append(
                Loss(
                    id=next(self.ids),
                    time=time.time(),
                    peer=_peer(session),
                    mail_from=str(envelope.mail_from) if envelope and envelope.mail_from else None,
                    rcpt_tos=tuple(str(r) for r in envelope.rcpt_tos) if envelope else (),
                    reason=reason,
                )
            )


def _peer(session: Session | None) -> str:
    peer = getattr(session, "peer", None)
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer or "")


def _login(session: Session) -> str | None:
    data = getattr(session, "auth_data", None)
    login = getattr(data, "login", None)
    if isinstance(login, bytes):
        return login.decode("utf-8", "replace")
    return None if login is None else str(login)


class _Handler:
    def __init__(self, store: _Store) -> None:
        self.store = store

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.store.add_message(session, envelope)
        return "250 OK: message captured"


class _RecordingSMTP(SMTP):
    """aiosmtpd's server, noting DATA that did not end in an accepted message."""

    def __init__(self, handler: _Handler, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._store = handler.store
        self._last_status = ""

    def connection_made(self, transport: Any) -> None:
        with self._store.lock:
            self._store.open += 1
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            with self._store.lock:
                self._store.open -= 1

    async def push(self, status: Any) -> None:
        self._last_status = status if isinstance(status, str) else str(status)
        await super().push(status)

    async def smtp_MAIL(self, arg: str | None) -> None:
        self._last_status = ""
        await super().smtp_MAIL(arg)
        if self._last_status.startswith("552"):  # a declared SIZE over the limit
            self._store.add_loss(
                self.session,
                None,
                f"refused at MAIL FROM ({(arg or '').strip()}): {self._last_status.strip()}",
            )

    async def smtp_DATA(self, arg: str) -> None:
        before = len(self._store.messages)
        envelope = self.envelope
        self._last_status = ""
        try:
            await super().smtp_DATA(arg)
        except asyncio.CancelledError:
            self._store.add_loss(
                self.session,
                envelope,
                "DATA did not finish: the connection closed before the final '.' "
                "(the client disconnected, or the server stopped)",
            )
            raise
        except ConnectionError as exc:
            self._store.add_loss(self.session, envelope, f"the connection broke in DATA: {exc}")
            raise
        status = self._last_status
        refused = status.startswith(("552", "500", "554", "451"))
        nothing_kept = len(self._store.messages) == before
        if refused and nothing_kept and envelope is not None and envelope.rcpt_tos:
            self._store.add_loss(self.session, envelope, f"refused: {status.strip()}")


def _accept_any(
    server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
) -> AuthResult:
    """Any login is accepted (and recorded): the sandbox is not where credentials are checked."""
    return AuthResult(success=True, auth_data=auth_data)


class _Controller(Controller):
    def __init__(self, handler: _Handler, size_limit: int, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._size_limit = size_limit

    def factory(self) -> SMTP:
        return _RecordingSMTP(
            self.handler,
            data_size_limit=self._size_limit,
            enable_SMTPUTF8=True,
            decode_data=False,
            authenticator=_accept_any,
            auth_require_tls=False,
            hostname="oracle-smtp",
        )


class SmtpCapture:
    """A local SMTP server that captures every message (see the module docstring)."""

    def __init__(
        self,
        name: str = "smtp",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        size_limit: int = DEFAULT_SIZE_LIMIT,
    ) -> None:
        self.name = name
        self.host = host
        self.requested_port = port
        self.size_limit = size_limit
        self._store = _Store()
        self._controller: _Controller | None = None
        self._port: int | None = None

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port}" if self._port else "stopped"
        return f"SmtpCapture({self.name!r}, {where})"

    def __enter__(self) -> SmtpCapture:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise SmtpError(self.name, "it is not running")
        return self._port

    @property
    def running(self) -> bool:
        return self._controller is not None

    def start(self) -> None:
        """Listen; a free port is picked when none was given (retried if taken meanwhile)."""
        if self._controller is not None:
            return
        attempts = 1 if self.requested_port else 5
        last: Exception | None = None
        if self.requested_port:
            # aiosmtpd reports a port it cannot bind only after its ready timeout: look first.
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((self.host, self.requested_port))
                except OSError as exc:
                    raise SmtpError(
                        self.name, f"could not listen on {self.host}:{self.requested_port}: {exc}"
                    ) from exc
        for _ in range(attempts):
            port = self.requested_port or free_port(self.host)
            controller = _Controller(
                _Handler(self._store), self.size_limit, hostname=self.host, port=port
            )
            try:
                controller.start()
            except Exception as exc:
                last = exc
                with contextlib.suppress(Exception):
                    controller.stop(no_assert=True)
                continue
            self._controller, self._port = controller, port
            return
        raise SmtpError(self.name, f"could not listen on {self.host}: {last}")

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        self._port = None
        if controller is not None:
            with contextlib.suppress(Exception):
                controller.stop(no_assert=True)

    def reset(self) -> None:
        """Forget every message and loss (a fresh mailbox for the next trial)."""
        with self._store.lock:
            self._store.messages.clear()
            self._store.losses.clear()

    def settle(self, timeout: float = 1.0) -> None:
        """Wait until every client connection has closed (a message dropped mid-DATA is
        recorded as lost only once the server sees the connection go). Raises `SmtpError`
        when some are still open after `timeout`: what they carry is not known yet."""
        deadline = time.monotonic() + timeout
        while True:
            self._check()
            with self._store.lock:
                still = self._store.open
            if still <= 0:
                return
            if time.monotonic() >= deadline:
                raise SmtpError(
                    self.name,
                    f"{still} client connection(s) still open: what they are sending is not "
                    "known yet",
                )
            time.sleep(0.005)

    def messages(self) -> list[Captured]:
        """The messages accepted since the last reset, in arrival order."""
        self._check()
        with self._store.lock:
            return list(self._store.messages)

    def losses(self) -> list[Loss]:
        """What arrived broken since the last reset."""
        self._check()
        with self._store.lock:
            return list(self._store.losses)

    def _check(self) -> None:
        controller = self._controller
        if controller is None:
            raise SmtpError(self.name, "it is not running")
        thread = getattr(controller, "_thread", None)
        if thread is not None and not thread.is_alive():
            raise SmtpError(self.name, "its server thread has stopped")
