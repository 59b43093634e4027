"""Routes: the recorder sends a host to a local server that answers in its place (a GitHub
world answers for api.github.com), records the request as ``routed`` under the name the
client asked for, and keeps that name in ``Host`` for the server."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from oracle.proxies.egress import EgressRecorder
from oracle.proxies.egress_policy import EgressPolicy
from tests.proxies.conftest import require_program


class _Server:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, int]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    while (size := int(self.rfile.readline().strip(), 16)) > 0:
                        body += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                seen.append((self.command, self.path, self.headers.get("host", ""), len(body)))
                out = f"local server answers for {self.headers.get('host')}".encode()
                self.send_response(200)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]


@pytest.fixture(scope="module")
def local() -> Iterator[_Server]:
    s = _Server()
    thread = threading.Thread(target=s.server.serve_forever, daemon=True)
    thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.fixture(scope="module")
def rec(local: _Server) -> Iterator[EgressRecorder]:
    policy = EgressPolicy(
        routes={
            "api.world.test": f"127.0.0.1:{local.port}",
            "*.world.test": f"127.0.0.1:{local.port}",
        },
        canned={"api.world.test/canned": "canned wins"},
    )
    with EgressRecorder(policy) as r:
        yield r


def curl(rec: EgressRecorder, folder: Path, *args: str) -> str:
    require_program("curl")
    env = {**os.environ, **rec.client_env(folder)}
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "20", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("version", ["--http1.1", "--http2"])
def test_a_routed_host_is_answered_by_the_local_server_under_its_own_name(
    rec, local, tmp_path, version
):
    rec.reset()
    local.seen.clear()
    said = curl(rec, tmp_path, version, "https://api.world.test/repos/a/b?x=1")
    assert said == "local server answers for api.world.test"
    assert local.seen == [("GET", "/repos/a/b?x=1", "api.world.test", 0)]
    (r,) = rec.requests()
    assert (r.host, r.port, r.path, r.answer, r.rule, r.status) == (
        "api.world.test",
        443,
        "/repos/a/b?x=1",
        "routed",
        "api.world.test",
        200,
    )


def test_a_large_body_streams_through_a_route_whole(rec, local, tmp_path):
    rec.reset()
    local.seen.clear()
    big = tmp_path / "big"
    big.write_bytes(b"x" * (3 << 20))
    curl(rec, tmp_path, "-X", "POST", "--data-binary", f"@{big}", "https://git.world.test/push")
    assert local.seen == [("POST", "/push", "git.world.test", 3 << 20)]
    (r,) = rec.requests()
    assert r.answer == "routed" and r.body is not None and r.body.size == 3 << 20


def test_canned_wins_over_a_route_and_a_route_over_the_allow_list():
    policy = EgressPolicy(
        allow=["api.world.test"],
        canned={"api.world.test/c": "x"},
        routes={"api.world.test": "127.0.0.1:9"},
    )
    assert policy.decide("api.world.test", 443, "/c").answer == "canned"
    routed = policy.decide("api.world.test", 443, "/other")
    assert (routed.answer, routed.upstream) == ("routed", ("127.0.0.1", 9))
    assert policy.decide("else.test", 443, "/").answer == "blocked"
    routes_only = EgressPolicy(routes={"api.world.test": "127.0.0.1:9"})
    assert not routes_only.may_tunnel("api.world.test", 443)  # a route never tunnels raw TCP
    assert EgressPolicy.from_json(policy.to_json()).to_json() == policy.to_json()


def test_a_route_to_no_server_address_is_refused_naming_it():
    with pytest.raises(
        ValueError, match=r"egress route 'api\.world\.test': give the local server as host:port"
    ):
        EgressPolicy(routes={"api.world.test": "localhost"})
