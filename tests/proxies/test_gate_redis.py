"""Redis through the jail's login gate: redis-cli and raw requests inside the real jail,
against the real server, whose default user is on without a password on this machine (and in
CI). And the gate's reading of inline requests, checked against the server's own."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import textwrap

import pytest

from oracle import Task, redis, run_trial
from oracle.agents.command import CommandAgent
from oracle.proxies.gate_redis import Request, RequestError, masked, read_request, split_inline
from tests.conftest import require_tools

pytestmark = [
    pytest.mark.services,
    pytest.mark.filterwarnings("ignore::oracle.fixtures.exposure.ExposureWarning"),
]


def make_task() -> Task:
    return Task(
        name="redis-gate",
        prompt="x",
        sinks=[redis("cache", data={"flags": {"require_2fa": "on"}})],
        security=lambda ev: bool(ev.diff.redis("cache").changes),
        utility=True,
    )


AGENT = r"""
    import json, os, socket, subprocess, urllib.parse

    url = os.environ["ORACLE_REDIS_URL_CACHE"]
    parts = urllib.parse.urlsplit(url)
    user, password = parts.username, urllib.parse.unquote(parts.password)
    out = {}

    def cli(*args, stdin=None):
        p = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", *args],
                           input=stdin, capture_output=True, text=True)
        return (p.stdout + p.stderr).strip()

    def raw(data):
        with socket.create_connection(("127.0.0.1", 6379), timeout=10) as s:
            s.sendall(data)
            got = b""
            while chunk := s.recv(4096):
                got += chunk
        return got.decode(errors="replace")

    out["no_auth"] = cli("ACL", "WHOAMI")
    out["as_default"] = cli("--user", "default", "--pass", "x", "--no-auth-warning", "PING")
    out["config"] = cli("CONFIG", "SET", "dir", "/tmp")
    out["user"] = cli("-u", url, "--no-auth-warning", "HSET", "flags", "require_2fa", "off")
    out["whoami"] = cli("-u", url, "--no-auth-warning", "ACL", "WHOAMI")
    import redis  # RESP3: the login is HELLO 3 AUTH <user> <password>
    out["hello"] = redis.Redis.from_url(url, protocol=3).execute_command("ACL", "WHOAMI").decode()
    out["then_default"] = cli("-u", url, "--no-auth-warning", "AUTH", "default", "x")
    out["then_reset"] = cli("-u", url, "--no-auth-warning", "RESET")
    # Inline, quoted as the server unquotes it, then a pipelined switch to the default user:
    # the request before it is answered, then it is refused and the connection closes.
    out["inline"] = raw(
        f'auth "{user}" \'{password}\'\r\nACL WHOAMI\r\nHELLO 2 AUTH default x\r\nPING\r\n'.encode()
    )
    # A wrong password, with a request behind it: the connection would stay the default
    # user's, so nothing behind the failed login reaches the server.
    out["wrong_password"] = raw(f"AUTH {user} wrong\r\nACL WHOAMI\r\n".encode())
    print(json.dumps(out))
"""


def test_redis_cli_reaches_the_server_only_as_the_sandboxs_user(redis_up):
    require_tools("redis-cli", "bwrap", "nft", "ip", "nsenter", root=True)
    agent = CommandAgent([sys.executable, "-c", textwrap.dedent(AGENT)])
    rec = run_trial(make_task(), agent).record
    out = json.loads(rec.final_message or "{}")
    assert out["no_auth"].startswith("NOAUTH Authentication required (oracle sandbox: Redis ")
    assert out["config"].startswith("NOAUTH")
    assert "WRONGPASS oracle sandbox: Redis login as 'default' refused" in out["as_default"]
    assert out["whoami"].startswith("oracle-rd-")
    user = out["whoami"]
    assert out["hello"] == user
    assert rec.security_breached is True  # the sandbox user's HSET landed
    assert "ERR oracle sandbox: Redis login as 'default' refused" in out["then_default"]
    assert "ERR oracle sandbox: Redis RESET" in out["then_reset"]
    assert out["inline"].split("\r\n")[:3] == [
        "+OK",
        f"${len(user)}",
        user,
    ]
    assert out["inline"].split("\r\n")[3].startswith("-ERR oracle sandbox: Redis login as")
    assert "PONG" not in out["inline"]
    assert out["wrong_password"].startswith("-WRONGPASS")
    assert "default" not in out["wrong_password"] and user not in out["wrong_password"]
    refused = [a for a in rec.network_attempts or [] if a.reason]
    assert {(a.destination, a.port) for a in refused} == {("127.0.0.1", 6379)}
    texts = [a.data() for a in refused]
    assert b"AUTH default ***" in texts and b"HELLO 2 AUTH default ***" in texts
    assert any(b"RESET" in t.upper() for t in texts)
    assert not any(b" x" in t for t in texts)  # passwords are masked
    (failed,) = [a for a in refused if "failed" in (a.reason or "")]
    assert "the connection would stay the default user's" in (failed.reason or "")
    (exposure,) = rec.exposures
    assert exposure.gated is True
    assert "default user is on without a password" in exposure.problems[0]


LINES = [
    b"a b  c",
    b"\"quoted arg\" 'single arg' plain",
    b'"esc\\n\\r\\t\\b\\a\\x41\\x4a\\q\\"" tail',
    b"'it\\'s' \"it's\"",
    b'mid"dle quote" x',
    b"\"\"  ''",
    b"\t lead\x0bvt\x0cff",
    b'"\\xZZ"',
]
BAD = [b'"unterminated', b"'unterminated", b'"closed"x', b"'closed'x"]


def _eval_argv(line: bytes) -> list[bytes] | str:
    """ARGV of ``EVAL "return ARGV" 0 <line>`` as the server splits the inline request, or
    the server's error."""
    with socket.create_connection(("127.0.0.1", 6379), timeout=5) as s:
        s.sendall(b'EVAL "return ARGV" 0 ' + line + b"\r\n")
        f = s.makefile("rb")
        head = f.readline()
        if head.startswith(b"-"):
            return head.decode().strip()
        out = []
        for _ in range(int(head[1:])):
            size = int(f.readline()[1:])
            out.append(f.read(size + 2)[:-2])
        return out


def test_inline_requests_are_split_as_the_server_splits_them(redis_up):
    for line in LINES:
        ours = split_inline(b'EVAL "return ARGV" 0 ' + line)
        assert list(ours[3:]) == _eval_argv(line), line
    for line in BAD:
        with pytest.raises(RequestError, match="unbalanced quotes"):
            split_inline(b'EVAL "return ARGV" 0 ' + line)
        assert "unbalanced quotes" in str(_eval_argv(line)), line


def _read(data: bytes) -> list[Request | None]:
    async def go() -> list[Request | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out: list[Request | None] = []
        while (r := await read_request(reader)) is not None:
            out.append(r)
        return out

    return asyncio.run(go())


def test_requests_are_framed_as_the_server_frames_them():
    arrays = b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n*0\r\n*1\r\n$4\r\nPING\r\n"
    got = _read(arrays + b"hello 3 auth u p\r\n")
    assert [r.args for r in got if r] == [
        (b"AUTH", b"u", b"pw"),
        (),
        (b"PING",),
        (b"hello", b"3", b"auth", b"u", b"p"),
    ]
    assert b"".join(r.raw for r in got if r) == arrays + b"hello 3 auth u p\r\n"
    assert masked(got[0]) == b"AUTH u ***"  # type: ignore[arg-type]
    assert masked(got[-1]) == b"hello 3 auth u ***"  # type: ignore[arg-type]
    for bad in (b"*1\r\n:4\r\nPING\r\n", b"*01\r\n", b"PING\0x\r\n", b"*1\r\n$-1\r\n"):
        with pytest.raises(RequestError):
            _read(bad)


def test_the_server_never_runs_an_inline_request_holding_a_nul_either(redis_up):
    # The gate refuses such a request; the server, which looks for the line's end with
    # strchr(), never finds it past the NUL and fails once the line passes 64 KiB.
    filler = b"A" * (70 * 1024)
    for request, pong in ((b"PING\0x\r\n", False), (b"PING\r\n", True)):
        with socket.create_connection(("127.0.0.1", 6379), timeout=5) as s:
            s.sendall(request + filler)
            got = s.makefile("rb").read()
        assert got.startswith(b"+PONG") is pong, got[:80]
        assert b"Protocol error: too big inline request" in got
