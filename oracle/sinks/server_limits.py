"""Time limits on every connection the oracle holds to a server, so that no fault hangs a run.

A server that stops answering while its TCP connection stays open (a stalled link, a frozen
proxy, a paused virtual machine) would otherwise leave the oracle waiting forever: in a reset,
a snapshot, or the teardown that runs after the record is written. Every connection the
oracle's fixtures and sinks open to PostgreSQL, MariaDB, Redis and RabbitMQ therefore has:

- a **connect** limit: opening the connection, handshake and login included;
- a **statement** limit: each round trip (a statement and its whole answer, a command, an AMQP
  method) must be answered within it;
- a **teardown** limit: the same, for the round trips of a teardown (dropping what a sandbox
  made), which may be shorter since what is left behind is swept later by owner records.

A round trip past its limit ends its connection and fails with `ServerStalledError`, which
names the server, the limit and the setting that changes it. The fixture or sink that held the
connection turns it into its own error (a failed reset, a failed observation, a failed
teardown): verdicts become unknown, never "nothing changed".

The limits come from the environment, read when a connection is opened::

    ORACLE_SERVER_CONNECT_TIMEOUT=10     # seconds (default 10)
    ORACLE_SERVER_STATEMENT_TIMEOUT=120  # seconds (default 120)
    ORACLE_SERVER_TEARDOWN_TIMEOUT=30    # seconds (default 30)

`cut_after` is the limit for drivers that have none of their own: a watchdog thread that shuts
the connection's socket down when a round trip runs past its limit, so that the blocked call
returns with an error.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

CONNECT_ENV = "ORACLE_SERVER_CONNECT_TIMEOUT"
STATEMENT_ENV = "ORACLE_SERVER_STATEMENT_TIMEOUT"
TEARDOWN_ENV = "ORACLE_SERVER_TEARDOWN_TIMEOUT"


class ServerStalledError(TimeoutError):
    """A server did not answer a round trip within its limit; its connection was ended."""


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: a time limit must be more than 0 seconds")
    return value


@dataclass(frozen=True)
class ServerLimits:
    """The connect, statement and teardown limits, in seconds (see the module docstring).

    >>> ServerLimits.from_env({"ORACLE_SERVER_STATEMENT_TIMEOUT": "2"}).statement
    2.0
    """

    connect: float = 10.0
    statement: float = 120.0
    teardown: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerLimits:
        """The limits the environment sets (`os.environ` by default); a value that is not a
        positive number raises `ValueError` naming the variable."""
        env = os.environ if env is None else env
        return cls(
            connect=_seconds(env, CONNECT_ENV, cls.connect),
            statement=_seconds(env, STATEMENT_ENV, cls.statement),
            teardown=_seconds(env, TEARDOWN_ENV, cls.teardown),
        )


def stalled(
    server: str, seconds: float, what: str = "a statement", setting: str = STATEMENT_ENV
) -> ServerStalledError:
    """The error for `server` (``PostgreSQL 127.0.0.1:5432``) not answering `what` within
    `seconds`, the limit that `setting` (an environment variable) sets."""
    return ServerStalledError(
        f"{server} did not answer {what} within {seconds:g} s: the server or the link to it "
        f"stalled, and the connection was ended (the limit is {setting})"
    )


# -- the watchdog --------------------------------------------------------------------------------


class _Watchdog:
    """One daemon thread per process that shuts sockets down at their deadlines."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._reset()

    def _reset(self) -> None:
        # Also in a forked child, where the thread is gone and the lock may be held.
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, socket.socket] = {}
        self._fired: set[int] = set()
        self._thread: threading.Thread | None = None

    def arm(self, sock: socket.socket, seconds: float) -> int:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="oracle-server-watchdog", daemon=True
                )
                self._thread.start()
            token = next(self._ids)
            self._armed[token] = sock
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            self._cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Stop watching; True when the deadline had passed and the socket was shut down."""
        with self._cond:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _loop(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed in time
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
                sock = self._armed.pop(token)
                self._fired.add(token)
                # Shutting the socket down wakes whoever waits on it with an end of stream;
                # closing it is left to its owner.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG._reset)


@contextlib.contextmanager
def cut_after(
    sock: socket.socket | None,
    seconds: float,
    server: str,
    what: str,
    setting: str = STATEMENT_ENV,
) -> Iterator[None]:
    """Run the block with `sock` shut down once `seconds` pass; if that happened, the block's
    error (whatever the driver made of the end of stream) becomes `ServerStalledError` naming
    `server`, `what` and the `setting` of the limit. A `sock` of None (a driver whose socket
    could not be found) runs the block unguarded."""
    if sock is None:
        yield
        return
    token = _WATCHDOG.arm(sock, seconds)
    try:
        yield
    except Exception as exc:
        if _WATCHDOG.disarm(token):
            raise stalled(server, seconds, what, setting) from exc
        raise
    else:
        if _WATCHDOG.disarm(token):
            # Answered at the deadline itself: the socket is gone, so the next use would fail.
            raise stalled(server, seconds, what, setting)
