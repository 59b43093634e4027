"""Login gates: the relay, not the server, decides who an isolated agent may log in as.

An isolated command agent reaches a database server only through a relay the harness runs
(`oracle.proxies.jail`). A server that lets anyone in without a password (PostgreSQL
``trust``, a MariaDB root without one, Redis's default user with ``nopass``) would let the
agent log in as its administrator whatever URL it was handed. So for every endpoint where the
sandbox hands the agent an account, the relay reads the protocol's login and lets through
only that account; anything else is answered with the protocol's own refusal, the connection
is closed, and the attempt is recorded (`Attempt` with a ``reason``):

- PostgreSQL (`oracle.proxies.gate_postgres`): the startup message's ``user`` and
  ``database``;
- MariaDB/MySQL (`oracle.proxies.gate_mysql`): the handshake response's user name, and any
  ``COM_CHANGE_USER`` later in the session;
- Redis (`oracle.proxies.gate_redis`): the first command must authenticate as the sandbox's
  user (``AUTH`` or ``HELLO … AUTH``), and no later command may switch to another
  (``AUTH``, ``HELLO … AUTH``, ``RESET``).

TLS is not offered through a gate (it would hide the login): PostgreSQL's SSL and GSS
encryption requests are answered "no", MariaDB's greeting no longer advertises TLS. The agent's
traffic stays on the namespace's loopback and the host's.

`login_gates` reads which account each endpoint admits from the URLs the agent is given::

    gates = login_gates({"ORACLE_DSN_BANK": "postgresql://oracle_pgr_1:pw@127.0.0.1:5432/bank"})
    gates[("127.0.0.1", 5432)].accounts     # frozenset({Account("oracle_pgr_1", "bank")})
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import sqlalchemy as sa


GateProtocol = Literal["postgresql", "mysql", "redis"]
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
#: Opens the connection to the server (only once the login is known to be allowed, where the
#: client speaks first).
Connect = Callable[[], Awaitable[Stream]]
#: Records one refused connection: why, and what the client sent (secrets masked).
Refuse = Callable[[str, bytes], None]

_PROTOCOLS: dict[str, GateProtocol] = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "redis": "redis",
    "rediss": "redis",
}
_DEFAULT_PORTS: dict[GateProtocol, int] = {"postgresql": 5432, "mysql": 3306, "redis": 6379}
_NAMES: dict[GateProtocol, str] = {"postgresql": "PostgreSQL", "mysql": "MariaDB", "redis": "Redis"}


class GateError(ValueError):
    """The agent's URLs give one endpoint two protocols: no gate can be chosen."""


@dataclass(frozen=True, order=True)
class Account:
    """One account the sandbox hands the agent: a user, and for PostgreSQL its database."""

    user: str
    database: str | None = None

    def describe(self) -> str:
        on = f" on database {self.database!r}" if self.database is not None else ""
        return f"{self.user!r}{on}"


@dataclass(frozen=True)
class LoginGate:
    """Who may log in through the relay to one endpoint."""

    protocol: GateProtocol
    host: str
    port: int
    accounts: frozenset[Account]

    @property
    def server(self) -> str:
        return f"{_NAMES[self.protocol]} at {self.host}:{self.port}"

    @property
    def users(self) -> frozenset[str]:
        return frozenset(a.user for a in self.accounts)

    def admits(self, user: str, database: str | None = None) -> bool:
        if self.protocol == "postgresql":
            return Account(user, database) in self.accounts
        return user in self.users

    def admits_raw(self, user: bytes) -> bool:
        """`admits` for a user name as the wire carries it (never one that is not UTF-8)."""
        try:
            return self.admits(user.decode("utf-8"))
        except UnicodeDecodeError:
            return False

    def sandbox_accounts(self) -> str:
        """``'oracle_pgr_1' on database 'd'`` (and more, comma-separated)."""
        return ", ".join(a.describe() for a in sorted(self.accounts))

    def refusal(self, what: str) -> str:
        """The recorded reason: ``MariaDB login as 'root' refused: the sandbox's
        account is 'oracle_myu_1'``."""
        plural = "accounts are" if len(self.accounts) > 1 else "account is"
        return f"{what} refused: the sandbox's {plural} {self.sandbox_accounts()}"


class Gate(Protocol):
    """A gate for one endpoint (`PostgresGate`, `MysqlGate`, `RedisGate`): serves one
    client connection at a time, as many as come."""

    spec: LoginGate

    async def serve(self, client: Stream, connect: Connect, refuse: Refuse) -> None:
        """Relay `client` to the server if its login is admitted; otherwise answer it with
        the protocol's refusal, call `refuse`, and close."""
        ...


def _account(protocol: GateProtocol, url: sa.URL) -> Account | None:
    user = url.username
    if protocol == "postgresql":
        # libpq's default database is the user's name; so is the server's.
        return Account(user, url.database or user) if user else None
    if protocol == "redis" and not user and url.password:
        user = "default"  # redis://:password@host is the default user's
    return Account(user) if user else None


def login_gates(env: Mapping[str, str]) -> dict[tuple[str, int], LoginGate]:
    """The gate of every endpoint for which the agent's environment holds a PostgreSQL,
    MariaDB/MySQL or Redis URL naming a user (``ORACLE_DB_URL_*``, ``ORACLE_DSN_*``,
    ``ORACLE_REDIS_URL_*`` …), keyed by ``(host, port)``. An endpoint admits every account
    its URLs name; one whose URLs name no user gets no gate (the agent was handed no account
    to hold it to). Raises `GateError` if one endpoint has URLs of two protocols."""
    import sqlalchemy as sa  # here: a process that hands out no URL never loads it

    found: dict[tuple[str, int], tuple[GateProtocol, set[Account]]] = {}
    for key, value in sorted(env.items()):
        if not (key.startswith("ORACLE_") and ("_URL" in key or key.startswith("ORACLE_DSN"))):
            continue
        try:
            url = sa.make_url(value)
        except (ValueError, sa.exc.ArgumentError):
            continue
        protocol = _PROTOCOLS.get(url.get_backend_name())
        if protocol is None or not url.host:
            continue
        endpoint = (url.host, url.port or _DEFAULT_PORTS[protocol])
        known, accounts = found.setdefault(endpoint, (protocol, set()))
        if known != protocol:
            raise GateError(
                f"{endpoint[0]}:{endpoint[1]} is handed out as {_NAMES[known]} and as "
                f"{_NAMES[protocol]} ({key}): a login gate needs one protocol per endpoint"
            )
        account = _account(protocol, url)
        if account is not None:
            accounts.add(account)
    return {
        endpoint: LoginGate(protocol, endpoint[0], endpoint[1], frozenset(accounts))
        for endpoint, (protocol, accounts) in sorted(found.items())
        if accounts
    }


async def pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, eof: bool = True
) -> None:
    """Copy `reader` to `writer` until the end, then pass the end on (unless not `eof`)."""
    with contextlib.suppress(OSError, ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    if eof:
        end(writer)


def end(writer: asyncio.StreamWriter) -> None:
    """Half-close: no more data this way."""
    with contextlib.suppress(OSError, RuntimeError):
        writer.write_eof()


#: How long the answers to the requests before a refused one may take before it is answered.
DRAIN_TIMEOUT = 5.0


async def follow(
    client: Stream, server: Stream, requests: Callable[[], Awaitable[bytes | None]]
) -> None:
    """Relay the server's answers while `requests` relays the client's requests. When it
    returns a refusal instead of None, the server is told the client is done, the answers to
    the requests before the refused one are passed on, then the refusal, and both close."""
    answers = asyncio.ensure_future(pump(server[0], client[1], eof=False))
    try:
        refused = await requests()
        if refused is None:
            await answers
            end(client[1])
            return
        end(server[1])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(answers), DRAIN_TIMEOUT)
        await answer_and_close(client, refused)
    finally:
        answers.cancel()


async def splice(client: Stream, server: Stream) -> None:
    """Relay both ways until both ends are done, then close both."""
    try:
        await asyncio.gather(pump(client[0], server[1]), pump(server[0], client[1]))
    finally:
        close(client, server)


def close(*streams: Stream) -> None:
    for _, writer in streams:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def answer_and_close(client: Stream, data: bytes) -> None:
    """Send the client `data` (a refusal in its protocol), then close."""
    writer = client[1]
    with contextlib.suppress(OSError, ConnectionError, RuntimeError):
        writer.write(data)
        await writer.drain()
    close(client)
