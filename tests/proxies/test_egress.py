"""The egress recorder with real clients (curl, urllib, requests, httpx) over HTTP and HTTPS.

Every destination is on loopback or a name that cannot resolve: nothing leaves the machine.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests

from oracle.evidence.snapshot import SnapshotError
from oracle.proxies.egress import EgressRecorder, RecorderError
from oracle.proxies.egress_policy import EgressPolicy, Rule
from oracle.sinks.egress import EgressSink
from tests.proxies.conftest import Origin, require_program

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def rec(
    origin: Origin, tls_origin: Origin, tls_files: tuple[Path, Path]
) -> Iterator[EgressRecorder]:
    policy = EgressPolicy(
        allow=[f"127.0.0.1:{origin.port}", f"127.0.0.1:{tls_origin.port}"],
        canned={"wiki.test/page*": "<h1>canned page</h1>", "api.test": {"ok": True}},
    )
    with EgressRecorder(policy, body_limit=LIMIT, upstream_ca=tls_files[0]) as r:
        yield r


@pytest.fixture
def env(rec: EgressRecorder, tmp_path: Path) -> dict[str, str]:
    rec.reset()
    return rec.client_env(tmp_path / "ca")


def curl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    require_program("curl")
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_curl_http_to_a_blocked_host_gets_the_sandbox_403_and_is_recorded(rec, env):
    out = curl(env, "-i", "-H", "X-Trace: 7", "http://blocked.invalid/a/b?q=1")
    assert " 403" in out.stdout.splitlines()[0]
    assert "Blocked by the oracle sandbox" in out.stdout
    (r,) = rec.requests()
    assert (r.method, r.host, r.port, r.path) == ("GET", "blocked.invalid", 80, "/a/b?q=1")
    assert r.url == "http://blocked.invalid/a/b?q=1"
    assert (r.answer, r.status, r.state) == ("blocked", 403, "complete")
    assert r.header("x-trace") == "7"


def test_blocked_https_is_recorded_and_never_resolved_or_contacted(rec, env):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    listener.settimeout(0.3)
    try:
        a = curl(env, "-d", "k=v", "https://no-such-host.invalid/upload")
        b = curl(env, f"https://127.0.0.1:{port}/secret")
        assert "Blocked by the oracle sandbox" in a.stdout  # a lookup would have been a 502
        assert "Blocked by the oracle sandbox" in b.stdout
        with pytest.raises(TimeoutError):
            listener.accept()  # the recorder never connected to the port it blocked
    finally:
        listener.close()
    first, second = rec.requests()
    assert (first.method, first.url, first.answer) == (
        "POST",
        "https://no-such-host.invalid/upload",
        "blocked",
    )
    assert first.body is not None and first.body.text == "k=v"
    assert (second.host, second.port, second.status) == ("127.0.0.1", port, 403)


def _urllib(method: str, url: str, body: bytes) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.status, resp.read().decode()


def _requests(method: str, url: str, body: bytes) -> tuple[int, str]:
    resp = requests.request(method, url, data=body, timeout=20)
    return resp.status_code, resp.text


def _httpx(method: str, url: str, body: bytes) -> tuple[int, str]:
    with httpx.Client(timeout=20) as client:  # trust_env: proxies and SSL_CERT_FILE
        resp = client.request(method, url, content=body)
    return resp.status_code, resp.text


@pytest.mark.parametrize(
    "client", [_urllib, _requests, _httpx], ids=["urllib", "requests", "httpx"]
)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_python_clients_pass_through_to_allowed_local_servers(
    client, scheme, rec, env, origin, tls_origin, monkeypatch
):
    for k in ("ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    server = origin if scheme == "http" else tls_origin
    body = f"hello via {client.__name__} {scheme}".encode()
    status, text = client("POST", f"{server.url}/submit?x=1", body)
    assert status == 200
    assert text == f"origin saw POST /submit?x=1 with {len(body)} bytes"
    assert ("POST", "/submit?x=1", body) in server.received
    (r,) = rec.requests()
    assert (r.scheme, r.answer, r.status, r.rule) == (
        scheme,
        "passed",
        200,
        f"127.0.0.1:{server.port}",
    )
    assert r.body is not None and r.body.data() == body
    assert r.response_size == len(text)


def test_canned_pages_and_apis_are_served_over_https(rec, env):
    page = curl(env, "https://wiki.test/page-1")
    api = curl(env, "-i", "http://api.test/v1/anything")
    assert page.stdout == "<h1>canned page</h1>"
    assert "application/json" in api.stdout and '"ok": true' in api.stdout
    a, b = rec.requests()
    assert (a.answer, a.rule, a.status) == ("canned", "wiki.test/page*", 200)
    assert (b.answer, b.rule) == ("canned", "api.test")


def test_a_huge_body_to_a_blocked_host_is_capped_and_the_truncation_recorded(rec, env, tmp_path):
    data = os.urandom(3 * 1024 * 1024)
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    out = curl(env, "--data-binary", f"@{f}", "https://exfil.invalid/upload")
    assert "Blocked by the oracle sandbox" in out.stdout
    (r,) = rec.requests()
    assert r.body is not None
    assert (r.body.size, r.body.kept, r.body.truncated, r.body.complete) == (
        len(data),
        LIMIT,
        True,
        True,
    )
    assert r.body.sha256 == hashlib.sha256(data).hexdigest()  # over every byte received
    assert r.body.data() == data[:LIMIT]
    assert (r.answer, r.status) == ("blocked", 403)


def test_a_huge_body_to_an_allowed_host_arrives_whole(rec, env, tmp_path, origin):
    data = b"x" * (1024 * 1024 + 17)
    f = tmp_path / "big.txt"
    f.write_bytes(data)
    out = curl(env, "--data-binary", f"@{f}", f"{origin.url}/big")
    assert out.stdout == f"origin saw POST /big with {len(data)} bytes"
    (r,) = rec.requests()
    assert r.body is not None and (r.body.size, r.body.truncated) == (len(data), True)
    assert (r.answer, r.status) == ("passed", 200)


def test_binary_bodies_are_kept_byte_for_byte(rec, env):
    data = bytes(range(256)) * 4
    with requests.Session() as s:
        s.trust_env = False
        s.proxies = {"https": env["HTTPS_PROXY"], "http": env["HTTP_PROXY"]}
        resp = s.post("https://upload.invalid/bin", data=data, verify=env["REQUESTS_CA_BUNDLE"])
    assert resp.status_code == 403
    (r,) = rec.requests()
    assert r.body is not None and r.body.text is None
    assert base64.b64decode(r.body.base64 or "") == data == r.body_bytes()


def test_header_bytes_that_are_not_utf8_are_preserved(rec, env):
    raw = (
        b"GET http://headers.invalid/ HTTP/1.1\r\nHost: headers.invalid\r\nX-Name: caf\xe9\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as s:
        s.sendall(raw)
        assert b" 403 " in s.recv(65536).split(b"\r\n")[0] + b" "
    (r,) = rec.requests()
    (h,) = [h for h in r.headers if h.name.lower() == "x-name"]
    assert h.value == "caf\ufffd" and h.raw() == b"caf\xe9"
    assert base64.b64decode(h.raw_base64 or "").endswith(b": caf\xe9")


def test_a_chunked_body_is_recorded_whole(rec, env):
    out = curl(
        env,
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        "abc" * 100,
        "http://chunks.invalid/",
    )
    assert "Blocked" in out.stdout
    (r,) = rec.requests()
    assert r.body is not None and r.body.text == "abc" * 100


@pytest.mark.parametrize("declared", [1000, 5_000_000], ids=["buffered", "streamed"])
def test_a_client_that_drops_mid_body_is_recorded(rec, env, declared):
    head = (
        f"POST http://drop.invalid/up HTTP/1.1\r\nHost: drop.invalid\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as s:
        s.sendall(head + b"partial-secret-bytes")
        time.sleep(0.2)
    (r,) = rec.requests(settle=3.0)
    assert (r.method, r.url, r.state) == ("POST", "http://drop.invalid/up", "failed")
    assert r.error and "closed connection" in r.error.lower()
    if declared > LIMIT:  # streamed: what arrived is kept, and marked incomplete
        assert r.body is not None and r.body.complete is False
        assert r.body.data() == b"partial-secret-bytes"


def test_a_client_that_refuses_the_sandbox_ca_is_recorded(rec, env, tls_files):
    out = curl(env, "--cacert", str(tls_files[0]), "https://pinned.invalid/")  # another CA
    assert out.returncode != 0
    (r,) = rec.requests(settle=3.0)
    assert (r.method, r.host, r.port, r.state) == ("CONNECT", "pinned.invalid", 443, "failed")
    assert r.error and "TLS handshake" in r.error


def test_raw_tcp_through_connect_is_recorded_and_closed(rec, env):
    with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as s:
        s.sendall(b"CONNECT db.invalid:5432 HTTP/1.1\r\nHost: db.invalid:5432\r\n\r\n")
        assert b" 200 " in s.recv(4096)
        s.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # not TLS, not HTTP
        s.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(4096) == b""
    (r,) = rec.requests(settle=3.0)
    assert (r.method, r.host, r.port, r.answer) == ("TCP", "db.invalid", 5432, "blocked")
    assert r.error and "not allowed" in r.error


def test_reset_starts_a_fresh_log(rec, env):
    curl(env, "http://one.invalid/")
    assert [r.host for r in rec.requests()] == ["one.invalid"]
    rec.reset()
    curl(env, "http://two.invalid/")
    assert [r.host for r in rec.requests()] == ["two.invalid"]


def test_a_recorder_that_cannot_listen_says_why():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(RecorderError) as err, EgressRecorder(name="net", listen_port=port):
            pass
    finally:
        taken.close()
    assert "egress recorder 'net'" in str(err.value)
    assert str(port) in str(err.value) or "in use" in str(err.value).lower()


def test_a_recorder_that_does_not_come_up_in_time_is_stopped_and_named(monkeypatch):
    monkeypatch.setenv("ORACLE_EGRESS_POOL", "0")  # a warm process would answer in time
    rec = EgressRecorder(name="slow", start_timeout=0.01)
    with pytest.raises(RecorderError, match="egress recorder 'slow': did not listen within"):
        rec.start()
    assert rec.dir is None and rec._proc is None  # nothing left behind


def test_a_recorder_that_died_fails_the_snapshot():
    rec = EgressRecorder(name="net")
    rec.start()
    try:
        sink = EgressSink("net", rec)
        assert sink.snapshot().state.requests_made == ()
        assert rec._proc is not None
        os.kill(rec._proc.pid, signal.SIGKILL)
        rec._proc.wait(timeout=10)
        with pytest.raises(SnapshotError, match=r"sink 'net'.*exited"):
            sink.snapshot()
    finally:
        rec.stop()
    assert rec.dir is None


@pytest.mark.parametrize(
    ("pattern", "host", "port", "path", "expected"),
    [
        ("api.test", "API.test", 443, "/x", True),
        ("api.test", "evil.test", 443, "/x", False),
        ("api.test:8443", "api.test", 443, "/", False),
        ("*.corp.test", "wiki.corp.test", 80, "/", True),
        ("*.corp.test", "corp.test", 80, "/", False),
        ("wiki.test/runbooks/*", "wiki.test", 443, "/runbooks/a?q=1", True),
        ("wiki.test/runbooks/*", "wiki.test", 443, "/other", False),
        ("[::1]:8080", "::1", 8080, "/", True),
        ("*", "anything.test", 1, "/", True),
    ],
)
def test_rules(pattern, host, port, path, expected):
    assert Rule.parse(pattern).matches(host, port, path) is expected


@pytest.mark.parametrize("bad", ["", "https://x.test", "x.test:http", "x.test:70000", "[::1"])
def test_bad_rules_are_refused_with_the_pattern_named(bad):
    with pytest.raises(ValueError, match="rule"):
        Rule.parse(bad)


def test_canned_wins_over_allow_and_the_rest_is_blocked():
    policy = EgressPolicy(allow=["a.test"], canned={"a.test/fake": "x"})
    assert policy.decide("a.test", 443, "/fake").answer == "canned"
    assert policy.decide("a.test", 443, "/real").answer == "passed"
    assert policy.decide("b.test", 443, "/").answer == "blocked"


@pytest.mark.parametrize(
    "payload",
    [b"HELLO\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 64, b""],
    ids=["not-http", "no-host", "zeros", "nothing"],
)
def test_garbage_is_recorded_and_the_recorder_keeps_serving(rec, env, payload):
    with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as s:
        s.sendall(payload)
        s.settimeout(0.5)
        with contextlib.suppress(TimeoutError, ConnectionError):
            s.recv(1024)
    out = curl(env, "http://after.invalid/")
    assert "Blocked by the oracle sandbox" in out.stdout
    records = rec.requests(settle=3.0)
    garbage = [r for r in records if r.host != "after.invalid"]
    assert len(garbage) == 1 and garbage[0].state == "failed"
    assert garbage[0].error and "without a request the recorder could read" in garbage[0].error
    assert [r.host for r in records if r.host == "after.invalid"] == ["after.invalid"]
