"""Redis's login gate: every request is read as the server reads it.

On a server whose default user is on without a password, every new connection is already
that user's. So the first request must authenticate as the sandbox's user — ``AUTH <user>
<password>`` or ``HELLO <version> AUTH <user> <password>`` — and it goes to the server alone:
the next requests wait until its answer is known. An error answer (a wrong password) closes
the connection, which would otherwise go on as the default user. Any other first request
gets ``-NOAUTH`` and the connection closes.

Afterwards, requests that would make the connection someone else's are refused: ``AUTH`` as
another user (with one argument: the default user), ``HELLO … AUTH`` as another user, and
``RESET`` (which makes the connection the default user's, and which no ACL can deny). The
requests before it are answered first; then it gets ``-ERR`` and the connection closes.

Requests are framed exactly as the server frames them (``processMultibulkBuffer`` and
``processInlineBuffer`` of Redis 7): a request that begins with ``*`` is an array of bulk
strings; anything else is an inline command, one line split by the server's own rules
(`split_inline`, after ``sdssplitargs``). Where the two could disagree (a NUL byte in a line,
an unbalanced quote, a malformed length) the server refuses the request and closes, and so
does the gate.

What is recorded of a refused request masks its passwords.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

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

#: Redis's limit on an inline request, and on a count or length line.
INLINE_MAX = 64 * 1024
BULK_MAX = 512 * 1024 * 1024
_INTEGER = re.compile(rb"-?[1-9][0-9]*|0")
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_BLANK = b" \t\n\v\f\r"  # C's isspace()


class RequestError(ValueError):
    """A request the server would refuse as a protocol error (and close)."""


@dataclass(frozen=True)
class Request:
    """One request: its arguments and its bytes as sent."""

    args: tuple[bytes, ...]
    raw: bytes

    @property
    def name(self) -> bytes:
        return self.args[0].lower() if self.args else b""


def _integer(line: bytes, what: str) -> int:
    """``string2ll``: digits, an optional minus, no leading zero, no blanks."""
    if len(line) >= 21 or not _INTEGER.fullmatch(line):
        raise RequestError(f"invalid {what} {line[:32]!r}")
    return int(line)


def split_inline(line: bytes) -> tuple[bytes, ...]:
    """The arguments of an inline request, split as ``sdssplitargs`` splits them: blanks
    separate, "double quotes" take escapes (``\\n``, ``\\xHH``…), 'single quotes' take
    ``\\'``, and a closing quote must be followed by a blank or the end."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _BLANK:
            i += 1
        if i >= n:
            return tuple(args)
        current = bytearray()
        in_double = in_single = False
        while True:
            c = line[i] if i < n else None
            if in_double:
                if (
                    c == ord("\\")
                    and i + 3 < n
                    and line[i + 1] == ord("x")
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    current.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == ord("\\") and i + 1 < n:
                    i += 1
                    current += _ESCAPES.get(line[i], line[i : i + 1])
                elif c == ord('"'):
                    if i + 1 < n and line[i + 1] not in _BLANK:
                        raise RequestError("unbalanced quotes in request")
                    i += 1
                    break
                elif c is None:
                    raise RequestError("unbalanced quotes in request")
                else:
                    current.append(c)
            elif in_single:
                if c == ord("\\") and i + 1 < n and line[i + 1] == ord("'"):
                    i += 1
                    current += b"'"
                elif c == ord("'"):
                    if i + 1 < n and line[i + 1] not in _BLANK:
                        raise RequestError("unbalanced quotes in request")
                    i += 1
                    break
                elif c is None:
                    raise RequestError("unbalanced quotes in request")
                else:
                    current.append(c)
            elif c is None or c in b" \n\r\t":
                break
            elif c == ord('"'):
                in_double = True
            elif c == ord("'"):
                in_single = True
            else:
                current.append(c)
            i += 1
        args.append(bytes(current))


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request, or None at the end of the stream. Raises `RequestError` where the
    server would answer with a protocol error."""
    first = await reader.read(1)
    if not first:
        return None
    if first == b"*":
        return await _read_array(reader)
    line = first + await _read_until(reader, b"\n", INLINE_MAX)
    text = line[:-1]
    if text.endswith(b"\r"):
        text = text[:-1]
    if b"\0" in text:  # the server's strchr() never finds the line's end past a NUL
        raise RequestError("a NUL byte in an inline request")
    return Request(split_inline(text), line)


async def _read_until(reader: asyncio.StreamReader, end: bytes, limit: int) -> bytes:
    try:
        data = await reader.readuntil(end)
    except asyncio.LimitOverrunError as exc:
        raise RequestError("request line too long") from exc
    except asyncio.IncompleteReadError as exc:
        raise RequestError("the stream ended inside a request") from exc
    if len(data) > limit or b"\0" in data:
        raise RequestError("request line too long, or holding a NUL byte")
    return data


async def _read_array(reader: asyncio.StreamReader) -> Request:
    raw = bytearray(b"*")

    async def line() -> bytes:
        # The server looks for '\r' and skips one more byte, whatever it is.
        text = await _read_until(reader, b"\r", INLINE_MAX)
        try:
            tail = await reader.readexactly(1)
        except asyncio.IncompleteReadError as exc:
            raise RequestError("the stream ended inside a request") from exc
        raw.extend(text + tail)
        return text[:-1]

    count = _integer(await line(), "multibulk length")
    if count <= 0:
        return Request((), bytes(raw))
    if count > 1024 * 1024:
        raise RequestError("invalid multibulk length")
    args = []
    for _ in range(count):
        try:
            dollar = await reader.readexactly(1)
        except asyncio.IncompleteReadError as exc:
            raise RequestError("the stream ended inside a request") from exc
        raw.extend(dollar)
        if dollar != b"$":
            raise RequestError(f"expected '$', got {dollar!r}")
        size = _integer(await line(), "bulk length")
        if not 0 <= size <= BULK_MAX:
            raise RequestError("invalid bulk length")
        try:
            data = await reader.readexactly(size + 2)  # the last two bytes are skipped
        except asyncio.IncompleteReadError as exc:
            raise RequestError("the stream ended inside a request") from exc
        raw.extend(data)
        args.append(data[:size])
    return Request(tuple(args), bytes(raw))


def _option(arg: bytes, name: bytes) -> bool:
    """``strcasecmp`` on the option: it stops at a NUL byte."""
    return arg.split(b"\0", 1)[0].lower() == name


def hello_users(args: tuple[bytes, ...]) -> list[bytes] | None:
    """The users a HELLO authenticates as (every AUTH option), as the server reads the
    options; None where the server would refuse the options (no one is authenticated)."""
    users: list[bytes] = []
    j = 2
    while j < len(args):
        more = len(args) - 1 - j
        if _option(args[j], b"auth") and more >= 2:
            users.append(args[j + 1])
            j += 2
        elif _option(args[j], b"setname") and more >= 1:
            j += 1
        else:
            return None
        j += 1
    return users


def masked(request: Request) -> bytes:
    """The request as words, with every password replaced by ``***``."""
    args = list(request.args)
    if request.name == b"auth" and len(args) >= 2:
        args[-1] = b"***"
    elif request.name == b"hello":
        for j in range(2, len(args) - 2):
            if _option(args[j], b"auth"):
                args[j + 2] = b"***"
    return b" ".join(args)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class RedisGate:
    """The gate of one Redis endpoint (see the module docstring)."""

    def __init__(self, spec: LoginGate) -> None:
        self.spec = spec

    def _login_users(self, request: Request) -> list[bytes] | None:
        """The users `request` authenticates as, or None if it authenticates no one."""
        if request.name == b"auth":
            return {2: [b"default"], 3: [request.args[1]]}.get(len(request.args))
        if request.name == b"hello":
            return hello_users(request.args)
        return None

    async def serve(self, client: Stream, connect: Connect, refuse: Refuse) -> None:
        try:
            first = await self._first(client, refuse)
        except (RequestError, asyncio.IncompleteReadError, OSError, ConnectionError):
            close(client)
            return
        if first is None:
            return
        try:
            server = await connect()
        except OSError:
            close(client)
            return
        try:
            if await self._authenticated(client, server, first, refuse):
                await follow(client, server, lambda: self._requests(client, server, refuse))
        except (asyncio.IncompleteReadError, OSError, ConnectionError):
            pass
        finally:
            close(client, server)

    async def _first(self, client: Stream, refuse: Refuse) -> Request | None:
        """The first request that says something, if it logs in as the sandbox's user."""
        while True:
            try:
                request = await read_request(client[0])
            except RequestError as exc:
                why = f"{self.spec.server}: {exc}; refused"
                refuse(why, b"")
                await answer_and_close(client, f"-ERR Protocol error: {exc}\r\n".encode())
                return None
            if request is None:
                close(client)
                return None
            if request.args:
                break
        users = self._login_users(request)
        if not users:
            why = self.spec.refusal(
                f"Redis {_text(request.args[0])!r} before logging in as the sandbox's user"
            )
            refuse(why, masked(request))
            reply = f"-NOAUTH Authentication required (oracle sandbox: {why})\r\n"
            await answer_and_close(client, reply.encode())
            return None
        wrong = [u for u in users if not self.spec.admits_raw(u)]
        if wrong:
            why = self.spec.refusal(f"Redis login as {_text(wrong[0])!r}")
            refuse(why, masked(request))
            await answer_and_close(client, f"-WRONGPASS oracle sandbox: {why}\r\n".encode())
            return None
        return request

    async def _authenticated(
        self, client: Stream, server: Stream, first: Request, refuse: Refuse
    ) -> bool:
        """Send the login alone; relay its answer; True if it was not an error."""
        server[1].write(first.raw)
        await server[1].drain()
        kind = await server[0].readexactly(1)
        if kind in (b"-", b"!"):
            rest = await server[0].readline()
            client[1].write(kind + rest)
            await client[1].drain()
            why = (
                f"{self.spec.server}: the login as the sandbox's user failed "
                f"({_text(rest).strip()[:200]}), and the connection would stay the default "
                "user's; closed"
            )
            refuse(why, masked(first))
            return False
        client[1].write(kind)
        return True

    async def _requests(self, client: Stream, server: Stream, refuse: Refuse) -> bytes | None:
        """Relay the client's requests; the error to answer a refused one with."""
        writer = server[1]
        while True:
            try:
                request = await read_request(client[0])
            except RequestError as exc:
                refuse(f"{self.spec.server}: {exc}; refused", b"")
                return f"-ERR Protocol error: {exc}\r\n".encode()
            if request is None:
                end(writer)
                return None
            why = None
            if request.name == b"reset":
                why = self.spec.refusal(
                    "Redis RESET (it would make the connection the default user's)"
                )
            elif request.name in (b"auth", b"hello"):
                wrong = [u for u in self._login_users(request) or [] if not self.spec.admits_raw(u)]
                if wrong:
                    why = self.spec.refusal(f"Redis login as {_text(wrong[0])!r}")
            if why is not None:
                refuse(why, masked(request))
                return f"-ERR oracle sandbox: {why}\r\n".encode()
            writer.write(request.raw)
            await writer.drain()
