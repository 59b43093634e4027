"""Warm recorder processes leased to one recorder at a time (`oracle.proxies.egress_pool`).

Each lease must be what a fresh process was: its own port, CA, policy and log; nothing a
connection of an earlier lease sends reaches anything or lands in a later lease's log.
Every destination is on loopback: nothing leaves the machine.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle.proxies import egress_pool
from oracle.proxies.egress import EgressRecorder
from oracle.proxies.egress_policy import EgressPolicy
from oracle.proxies.egress_pool import POOL, POOL_ENV
from tests.proxies.conftest import Origin, require_program


@pytest.fixture(autouse=True)
def _pooling_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(POOL_ENV, "1")
    yield


def _allow(origin: Origin) -> EgressPolicy:
    return EgressPolicy(allow=[f"127.0.0.1:{origin.port}"])


def _pid(rec: EgressRecorder) -> int:
    assert rec._proc is not None
    return rec._proc.pid


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie nobody reaped has exited too)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, limit: float = 30.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _get(sock: socket.socket, path: str, origin: Origin) -> bytes:
    """Send a keep-alive GET through the proxy on `sock`; return the whole answer, or what
    came before the connection closed."""
    try:
        sock.sendall(
            f"GET {origin.url}{path} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\n"
            "Connection: keep-alive\r\n\r\n".encode()
        )
    except OSError:
        return b""
    return _answer(sock)


def _answer(sock: socket.socket) -> bytes:
    """One HTTP answer read from `sock`, or what came before the connection closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except OSError:  # reset, or a TLS connection cut (SSLError is an OSError)
            return data
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_released_process_serves_the_next_recorder_with_a_new_port_and_ca(origin: Origin):
    first = EgressRecorder(_allow(origin), name="one")
    first.start()
    pid, port, ca = _pid(first), first.port, first.ca_cert.read_bytes()
    folder = first.dir
    first.stop()
    assert folder is not None and not folder.exists()  # log, spill and CA key removed
    assert not _gone(pid)  # waiting in the pool
    with EgressRecorder(EgressPolicy(), name="two") as second:
        assert _pid(second) == pid  # the same warm process
        assert second.port != port
        assert second.ca_cert.read_bytes() != ca
        assert second.dir != folder
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_keep_alive_connection_of_an_earlier_lease_reaches_nothing(origin: Origin):
    first = EgressRecorder(_allow(origin), name="one")
    first.start()
    pid = _pid(first)
    sock = socket.create_connection(("127.0.0.1", first.port), timeout=10)
    try:
        answer = _get(sock, "/lease-one", origin)
        assert answer.startswith(b"HTTP/1.1 200") and b"origin saw GET /lease-one" in answer
        assert [r.path for r in first.requests()] == ["/lease-one"]
        first.stop()
        with EgressRecorder(_allow(origin), name="two") as second:
            assert _pid(second) == pid
            late = _get(sock, "/lease-two-stray", origin)
            assert not late.startswith(b"HTTP/")  # closed, never answered
            assert second.requests() == []
            assert all(path != "/lease-two-stray" for _, path, _ in origin.received)
            # The new lease itself records as a fresh recorder would.
            fresh = socket.create_connection(("127.0.0.1", second.port), timeout=10)
            with fresh:
                assert _get(fresh, "/lease-two", origin).startswith(b"HTTP/1.1 200")
            got = second.requests()
            assert [(r.id, r.path, r.answer) for r in got] == [(1, "/lease-two", "passed")]
    finally:
        first.stop()
        sock.close()


def test_a_tls_tunnel_of_an_earlier_lease_reaches_nothing(origin: Origin, tmp_path: Path):
    first = EgressRecorder(name="one", policy=EgressPolicy(canned={"wiki.test": "page one"}))
    first.start()
    pid = _pid(first)
    ctx = ssl.create_default_context(cafile=str(first.ca_cert))
    raw = socket.create_connection(("127.0.0.1", first.port), timeout=10)
    raw.sendall(b"CONNECT wiki.test:443 HTTP/1.1\r\nHost: wiki.test:443\r\n\r\n")
    assert raw.recv(4096).startswith(b"HTTP/1.1 200")
    tunnel = ctx.wrap_socket(raw, server_hostname="wiki.test")
    try:
        request = b"GET /%s HTTP/1.1\r\nHost: wiki.test\r\n\r\n"
        tunnel.sendall(request % b"one")
        assert _answer(tunnel).endswith(b"\r\n\r\npage one")
        first.stop()
        with EgressRecorder(
            name="two", policy=EgressPolicy(canned={"wiki.test": "page two"})
        ) as second:
            assert _pid(second) == pid
            try:
                tunnel.sendall(request % b"stray")
                late = _answer(tunnel)
            except OSError:
                late = b""
            assert not late.startswith(b"HTTP/")  # closed, never answered
            assert second.requests() == []
    finally:
        first.stop()
        tunnel.close()


def test_a_new_lease_does_not_trust_the_ca_of_the_last_one(tmp_path: Path):
    require_program("curl")
    first = EgressRecorder(name="one", policy=EgressPolicy(canned={"wiki.test": "hello"}))
    first.start()
    old_env = first.client_env(tmp_path / "old")
    first.stop()
    with EgressRecorder(name="two", policy=EgressPolicy(canned={"wiki.test": "hello"})) as rec:
        # A client that kept the last lease's CA (and is pointed at the new port) is refused.
        stale = {**old_env, "HTTPS_PROXY": rec.proxy_url, "https_proxy": rec.proxy_url}
        out = subprocess.run(
            ["curl", "-sS", "--max-time", "20", "https://wiki.test/"],
            env={**os.environ, **stale},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert out.returncode != 0 and "hello" not in out.stdout
        fresh = rec.client_env(tmp_path / "new")
        ok = subprocess.run(
            ["curl", "-sS", "--max-time", "20", "https://wiki.test/"],
            env={**os.environ, **fresh},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert ok.stdout == "hello"
        failed = [r for r in rec.requests() if r.state == "failed"]
        assert len(failed) == 1 and "TLS handshake" in (failed[0].error or "")


def test_each_lease_answers_by_its_own_policy_and_upstream_trust(
    origin: Origin, tls_origin: Origin, tls_files: tuple[Path, Path]
):
    allow = EgressPolicy(allow=[f"127.0.0.1:{origin.port}", f"127.0.0.1:{tls_origin.port}"])
    with EgressRecorder(allow, name="one", upstream_ca=tls_files[0]) as first:
        pid = _pid(first)
        env = first.client_env(first._private() / "client")
        out = _curl(env, f"{tls_origin.url}/trusted")
        assert out.stdout == "origin saw GET /trusted with 0 bytes"
    with EgressRecorder(EgressPolicy(allow=[f"127.0.0.1:{tls_origin.port}"]), name="two") as rec:
        assert _pid(rec) == pid
        env = rec.client_env(rec._private() / "client")
        # No upstream CA in this lease: the origin's certificate is not trusted any more.
        assert "origin saw" not in _curl(env, f"{tls_origin.url}/untrusted").stdout
        # And the plain origin, allowed in the last lease, is blocked in this one.
        blocked = _curl(env, f"{origin.url}/blocked")
        assert blocked.stdout.startswith("Blocked by the oracle sandbox")
        answers = {r.path: r.answer for r in rec.requests()}
        assert answers["/blocked"] == "blocked"
        assert answers["/untrusted"] == "passed"
    assert all(path not in ("/blocked", "/untrusted") for _, path, _ in tls_origin.received)


def _curl(env: dict[str, str], url: str) -> subprocess.CompletedProcess[str]:
    require_program("curl")
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", url],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_recorder_on_a_fixed_port_has_a_process_of_its_own():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    idle = len(POOL)
    rec = EgressRecorder(name="fixed", listen_port=port)
    rec.start()
    pid = _pid(rec)
    assert rec.port == port
    rec.stop()
    assert _gone(pid)  # stopped and waited for
    assert len(POOL) == idle


def test_a_process_that_died_is_never_returned_to_the_pool():
    POOL.close()
    rec = EgressRecorder(name="doomed")
    rec.start()
    pid = _pid(rec)
    assert rec._proc is not None
    os.kill(pid, signal.SIGKILL)
    rec._proc.wait(timeout=10)
    rec.stop()
    assert len(POOL) == 0
    with EgressRecorder(name="next") as other:
        assert _pid(other) != pid


def test_pooling_off_gives_every_recorder_its_own_process(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(POOL_ENV, "0")
    POOL.close()
    first = EgressRecorder(name="one")
    first.start()
    pid = _pid(first)
    first.stop()
    assert _gone(pid)  # stopped and waited for
    assert len(POOL) == 0
    with EgressRecorder(name="two") as second:
        assert _pid(second) != pid


def test_the_pool_keeps_at_most_max_idle_processes():
    POOL.close()
    recs = [EgressRecorder(name=f"r{i}") for i in range(egress_pool.MAX_IDLE + 1)]
    for r in recs:
        r.start()
    pids = [_pid(r) for r in recs]
    for r in recs:
        r.stop()
    assert len(POOL) == egress_pool.MAX_IDLE
    # The one released when the pool was full was stopped (and waited for) at once.
    assert [_gone(p) for p in pids] == [False] * egress_pool.MAX_IDLE + [True]
    POOL.close()
    assert all(_gone(p) for p in pids)


PARENT = textwrap.dedent(
    """
    import sys, time
    from oracle.proxies.egress import EgressRecorder
    idle = EgressRecorder(name="idle")
    idle.start()
    idle_pid = idle._proc.pid
    idle.stop()                      # back in the pool, waiting
    busy = EgressRecorder(name="busy")
    busy.start()                     # leased (the idle one again) ...
    other = EgressRecorder(name="other")
    other.start()                    # ... and a second process, leased too
    print(busy._proc.pid, other._proc.pid, idle_pid, flush=True)
    time.sleep(600)
    """
)


def test_a_process_exits_when_its_parent_is_killed(tmp_path: Path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, POOL_ENV: "1", "PYTHONPATH": str(root)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, env=env, cwd=root
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline().decode()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 3 and pids[0] == pids[2] and pids[1] != pids[0]
        assert not any(_gone(p) for p in pids[:2])
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert all(_wait_gone(p) for p in pids[:2])
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)


def test_an_idle_process_exits_when_its_parent_is_killed(tmp_path: Path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            from oracle.proxies.egress import EgressRecorder
            rec = EgressRecorder(name="idle")
            rec.start()
            pid = rec._proc.pid
            rec.stop()
            print(pid, flush=True)
            time.sleep(600)
            """
        )
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, POOL_ENV: "1", "PYTHONPATH": str(root)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, env=env, cwd=root
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not _gone(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)


def test_idle_processes_stop_when_the_interpreter_exits(tmp_path: Path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            from oracle.proxies.egress import EgressRecorder
            rec = EgressRecorder(name="idle")
            rec.start()
            pid = rec._proc.pid
            rec.stop()
            print(pid, flush=True)
            """
        )
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, POOL_ENV: "1", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, env=env, cwd=root, timeout=120
    )
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout)
    # atexit stopped it (and waited for it) before the interpreter was gone.
    assert _gone(pid)


def test_every_lease_gets_a_ca_of_its_own_with_an_ecdsa_key(origin: Origin):
    """The CA of a fresh process and of each later lease: a CA certificate of an ECDSA
    P-256 key (made in a fraction of a millisecond), never the same twice."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    seen = []
    for name in ("one", "two", "three"):
        rec = EgressRecorder(_allow(origin), name=name)
        rec.start()
        try:
            cert = x509.load_pem_x509_certificate(rec.ca_cert.read_bytes())
        finally:
            rec.stop()
        key = cert.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        seen.append(cert.fingerprint(cert.signature_hash_algorithm))
    assert len(set(seen)) == 3
