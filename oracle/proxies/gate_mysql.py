"""MariaDB/MySQL's login gate: the handshake and every command are read on their way.

The server speaks first. Its greeting is relayed with three capabilities cleared: TLS (the
client stays in the clear, so its login can be read), compression (so packets can be
followed), and local files (see below). The client's HandshakeResponse41 names the user; only
the sandbox's user is relayed. Anything else — another user, a TLS or compression request, a
pre-4.1 handshake — gets an ERR packet 1045 (access denied, SQLSTATE 28000) naming the
sandbox's account, and both connections close.

The authentication exchange that follows is relayed in lock step: a client packet goes to the
server only when the server asked for one (an auth switch, more data), so nothing the client
sends ahead can reach the server as a command before the login is done.

After the login, packets are followed by their length (a payload of 2²⁴−1 bytes continues in
the next packet), and the first byte of every command is read. ``COM_CHANGE_USER`` (the one
command that changes the session's user) is relayed only for the sandbox's user; for any
other, the commands before it are answered, then it gets ERR 1045 and the connection closes.
What keeps this framing exact is that the client never sends anything but commands after the
login: the local-files capability is taken out of the client's flags, so the server refuses
``LOAD DATA LOCAL INFILE`` instead of asking the client for a file (whose packets would not be
commands). After a ``COM_CHANGE_USER`` to the sandbox's own user, the authentication packets
that follow it are read as commands too: at worst one is taken for a ``COM_CHANGE_USER`` and
refused, never the other way round.
"""

from __future__ import annotations

import asyncio

from oracle.proxies.gate import (
    Connect,
    LoginGate,
    Refuse,
    Stream,
    answer_and_close,
    close,
    end,
    follow,
)

CLIENT_COMPRESS = 0x20
CLIENT_LOCAL_FILES = 0x80
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_ZSTD_COMPRESSION = 1 << 26
COM_CHANGE_USER = 0x11
MAX_PAYLOAD = 0xFFFFFF


class HandshakeError(ValueError):
    """A handshake the gate cannot read, or will not relay."""


async def read_packet(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One packet: its 4-byte header (length, sequence number) and its payload."""
    header = await reader.readexactly(4)
    payload = await reader.readexactly(int.from_bytes(header[:3], "little"))
    return header, payload


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload


def err_packet(seq: int, message: str, code: int = 1045, sqlstate: str = "28000") -> bytes:
    payload = b"\xff" + code.to_bytes(2, "little") + b"#" + sqlstate.encode() + message.encode()
    return packet(seq, payload)


def strip_greeting(payload: bytes) -> bytes:
    """The server's greeting (protocol 10) without TLS, compression and local files."""
    if not payload or payload[0] != 10:
        raise HandshakeError(f"not a protocol-10 greeting (first byte {payload[:1]!r})")
    end = payload.find(b"\0", 1)
    if end < 0:
        raise HandshakeError("the greeting's server version is not terminated")
    pos = end + 1 + 4 + 8 + 1  # connection id, scramble part 1, filler
    if len(payload) < pos + 2:
        raise HandshakeError("the greeting has no capability flags")
    out = bytearray(payload)
    lower = int.from_bytes(out[pos : pos + 2], "little")
    lower &= ~(CLIENT_SSL | CLIENT_COMPRESS | CLIENT_LOCAL_FILES)
    out[pos : pos + 2] = lower.to_bytes(2, "little")
    upper_at = pos + 2 + 1 + 2  # character set, status flags
    if len(out) >= upper_at + 2:
        upper = int.from_bytes(out[upper_at : upper_at + 2], "little")
        upper &= ~(CLIENT_ZSTD_COMPRESSION >> 16)
        out[upper_at : upper_at + 2] = upper.to_bytes(2, "little")
    return bytes(out)


def read_response(payload: bytes) -> tuple[bytes, bytes]:
    """The user name of a HandshakeResponse41 and the response with the local-files
    capability taken out. Raises `HandshakeError` for what the gate will not relay."""
    if len(payload) < 4:
        raise HandshakeError("a handshake response of fewer than 4 bytes")
    caps = int.from_bytes(payload[:4], "little")
    if caps & CLIENT_SSL:
        raise HandshakeError("TLS requested (the sandbox's relay offers none)")
    if not caps & CLIENT_PROTOCOL_41:
        raise HandshakeError("a pre-4.1 handshake")
    if caps & (CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION):
        raise HandshakeError("compression requested (the sandbox's relay offers none)")
    end = payload.find(b"\0", 32)
    if len(payload) < 33 or end < 0:
        raise HandshakeError("the handshake response names no user")
    caps &= ~CLIENT_LOCAL_FILES
    return payload[32:end], caps.to_bytes(4, "little") + payload[4:]


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class MysqlGate:
    """The gate of one MariaDB/MySQL endpoint (see the module docstring)."""

    def __init__(self, spec: LoginGate) -> None:
        self.spec = spec

    async def serve(self, client: Stream, connect: Connect, refuse: Refuse) -> None:
        try:
            server = await connect()
        except OSError:
            close(client)
            return
        try:
            if await self._login(client, server, refuse):
                await follow(client, server, lambda: self._commands(client, server, refuse))
        except (asyncio.IncompleteReadError, OSError, ConnectionError):
            pass
        finally:
            close(client, server)

    async def _login(self, client: Stream, server: Stream, refuse: Refuse) -> bool:
        """Greeting, handshake response, authentication; True once the server said OK."""
        header, greeting = await read_packet(server[0])
        if greeting[:1] == b"\xff":  # the server refused before any login (too many, blocked)
            client[1].write(header + greeting)
            await client[1].drain()
            return False
        try:
            stripped = strip_greeting(greeting)
        except HandshakeError:
            return False
        client[1].write(header + stripped)
        await client[1].drain()
        header, response = await read_packet(client[0])
        seq = header[3]
        try:
            if len(response) >= MAX_PAYLOAD:
                raise HandshakeError("a handshake response too large")
            user, relayed = read_response(response)
        except HandshakeError as exc:
            why = f"{self.spec.server}: {exc}; refused"
            await self._refuse_login(client, seq, why, response[:32], refuse)
            return False
        if not self.spec.admits_raw(user):
            why = self.spec.refusal(f"MariaDB login as {_name(user)!r}")
            # What is recorded ends with the user name: the rest holds the password's proof.
            await self._refuse_login(client, seq, why, response[: 33 + len(user)], refuse)
            return False
        server[1].write(packet(seq, relayed))
        await server[1].drain()
        while True:  # lock step: the client speaks only when the server asks
            header, reply = await read_packet(server[0])
            client[1].write(header + reply)
            await client[1].drain()
            if reply[:1] == b"\x00":
                return True
            if reply[:1] == b"\xfe" or (reply[:1] == b"\x01" and reply != b"\x01\x03"):
                header, answer = await read_packet(client[0])
                server[1].write(header + answer)
                await server[1].drain()
            elif reply[:1] != b"\x01":  # an error, or something no login sends
                return False

    async def _refuse_login(
        self, client: Stream, seq: int, why: str, sent: bytes, refuse: Refuse
    ) -> None:
        refuse(why, sent)
        reply = err_packet(seq + 1, f"Access denied (oracle sandbox: {why})")
        await answer_and_close(client, reply)

    async def _commands(self, client: Stream, server: Stream, refuse: Refuse) -> bytes | None:
        """Relay the client's commands; the ERR packet to answer a refused one with."""
        reader, writer = client[0], server[1]
        continued = False
        while True:
            try:
                header, payload = await read_packet(reader)
            except asyncio.IncompleteReadError:
                end(writer)
                return None
            if not continued and payload[:1] == bytes([COM_CHANGE_USER]):
                stop = payload.find(b"\0", 1)
                user = payload[1:stop] if stop >= 0 else payload[1:]
                if not self.spec.admits_raw(user):
                    why = self.spec.refusal(f"MariaDB COM_CHANGE_USER to {_name(user)!r}")
                    refuse(why, payload[: 1 + len(user)])
                    return err_packet(header[3] + 1, f"Access denied (oracle sandbox: {why})")
            continued = len(payload) == MAX_PAYLOAD
            writer.write(header + payload)
            await writer.drain()
