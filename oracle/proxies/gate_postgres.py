"""PostgreSQL's login gate: the startup message is read before the server sees it.

The client speaks first. An SSLRequest or GSSENCRequest is answered ``N`` (no encryption: the
client goes on in the clear, and its startup message can be read). The StartupMessage
(protocol 3.x) names ``user`` and ``database`` (the user's name when absent, as libpq and the
server have it); only the sandbox's role on the sandbox's database is relayed. Anything else
gets a FATAL ErrorResponse with SQLSTATE 28000 naming the sandbox's account, as the server
would answer a refused login, and the connection closes.

A CancelRequest carries no user, only a backend's pid and secret key. It is relayed only when
that key is one the server handed to a session admitted through this gate (the gate notes the
BackendKeyData of every session it relays): the agent may cancel its own queries (psql's
Ctrl-C, a driver's timeout) and nobody else's — not the oracle's snapshot in flight, whose key
it never saw. Other cancel requests are refused and recorded; PostgreSQL answers none.

Once the login is relayed, the gate steps aside: PostgreSQL has no way to change the session's
user short of ``SET ROLE``/``SET SESSION AUTHORIZATION``, which the server checks against the
role's own memberships and attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

from oracle.proxies.gate import (
    Connect,
    LoginGate,
    Refuse,
    Stream,
    answer_and_close,
    close,
    pump,
)

CANCEL_REQUEST = 80877102
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
#: The server refuses longer startup packets (``MAX_STARTUP_PACKET_LENGTH``).
MAX_STARTUP = 10000


def error_response(message: str, sqlstate: str = "28000") -> bytes:
    """A FATAL ErrorResponse carrying `message`."""
    fields = b"".join(
        tag + value.encode("utf-8") + b"\0"
        for tag, value in (
            (b"S", "FATAL"),
            (b"V", "FATAL"),
            (b"C", sqlstate),
            (b"M", message),
        )
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


def startup_parameters(body: bytes) -> dict[str, str]:
    """The name/value pairs of a StartupMessage's body (after the protocol version).
    Raises ValueError on a malformed list or names that are not UTF-8."""
    parts = body.split(b"\0")
    if len(parts) < 2 or parts[-1] != b"" or parts[-2] != b"":
        raise ValueError("the parameter list is not terminated")
    items = parts[:-2]
    if len(items) % 2:
        raise ValueError("a parameter has no value")
    text = [p.decode("utf-8") for p in items]
    return dict(zip(text[::2], text[1::2], strict=True))


class PostgresGate:
    """The gate of one PostgreSQL endpoint (see the module docstring)."""

    def __init__(self, spec: LoginGate) -> None:
        self.spec = spec
        #: pid + secret key of every session relayed, as BackendKeyData carried them.
        self.cancel_keys: set[bytes] = set()

    async def serve(self, client: Stream, connect: Connect, refuse: Refuse) -> None:
        reader = client[0]
        for _ in range(3):  # at most an SSLRequest and a GSSENCRequest before the startup
            try:
                head = await reader.readexactly(4)
            except (asyncio.IncompleteReadError, ConnectionError):
                close(client)
                return
            length = struct.unpack("!I", head)[0]
            if not 8 <= length <= MAX_STARTUP:
                refuse(
                    f"{self.spec.server}: a first message of {length} bytes is no PostgreSQL "
                    "startup message; refused",
                    head,
                )
                close(client)
                return
            try:
                body = await reader.readexactly(length - 4)
            except (asyncio.IncompleteReadError, ConnectionError):
                close(client)
                return
            code = struct.unpack_from("!I", body)[0]
            if code in (SSL_REQUEST, GSSENC_REQUEST) and length == 8:
                client[1].write(b"N")
                await client[1].drain()
                continue
            if code == CANCEL_REQUEST:
                await self._cancel(client, head + body, body[4:], connect, refuse)
                return
            await self._startup(client, head + body, code, body[4:], connect, refuse)
            return
        refuse(f"{self.spec.server}: encryption requested over and over; refused", b"")
        close(client)

    async def _cancel(
        self, client: Stream, message: bytes, key: bytes, connect: Connect, refuse: Refuse
    ) -> None:
        close(client)  # the server answers a cancel request with nothing but closing
        if key not in self.cancel_keys:
            refuse(
                f"{self.spec.server}: cancel request for a session not opened through the "
                "sandbox's relay refused",
                message,
            )
            return
        with contextlib.suppress(OSError):
            server = await connect()
            server[1].write(message)
            await server[1].drain()
            close(server)

    async def _startup(
        self,
        client: Stream,
        message: bytes,
        code: int,
        body: bytes,
        connect: Connect,
        refuse: Refuse,
    ) -> None:
        if code >> 16 != 3:
            why = f"{self.spec.server}: protocol {code >> 16}.{code & 0xFFFF} is not 3.x; refused"
            refuse(why, message)
            await answer_and_close(client, error_response(f"oracle sandbox: {why}", "08P01"))
            return
        try:
            params = startup_parameters(body)
        except ValueError as exc:
            why = f"{self.spec.server}: malformed startup message ({exc}); refused"
            refuse(why, message)
            await answer_and_close(client, error_response(f"oracle sandbox: {why}", "08P01"))
            return
        user = params.get("user")
        database = params.get("database") or user
        if user is None or not self.spec.admits(user, database):
            what = (
                f"PostgreSQL login as {user!r} on database {database!r}"
                if user is not None
                else "PostgreSQL login without a user name"
            )
            why = self.spec.refusal(what)
            refuse(why, message)
            await answer_and_close(client, error_response(f"oracle sandbox: {why}"))
            return
        try:
            server = await connect()
        except OSError as exc:
            why = f"the sandbox's relay cannot reach {self.spec.server}: {exc}"
            await answer_and_close(client, error_response(why, "08006"))
            return
        server[1].write(message)
        try:
            await asyncio.gather(pump(client[0], server[1]), self._from_server(server, client))
        finally:
            close(client, server)

    async def _from_server(self, server: Stream, client: Stream) -> None:
        """Relay the server's side, noting the session's cancel key on the way."""
        reader, writer = server[0], client[1]
        with contextlib.suppress(asyncio.IncompleteReadError, OSError, ConnectionError):
            while True:  # message by message until the session is ready, or refused
                head = await reader.readexactly(5)
                length = struct.unpack_from("!I", head, 1)[0]
                body = await reader.readexactly(max(0, length - 4))
                if head[:1] == b"K":
                    self.cancel_keys.add(body)
                writer.write(head + body)
                await writer.drain()
                if head[:1] in (b"Z", b"E"):
                    break
        await pump(reader, writer)
