"""Local servers for the proxy tests: plain and TLS HTTP servers on loopback (never the
internet), a certificate made for 127.0.0.1, and a helper for real client programs."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def require_program(name: str) -> str:
    """The path of `name`; skip without it (fail under ORACLE_REQUIRE_SERVICES=1: `make test`
    installs it through the Makefile's system-deps target)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (make system-deps installs it)"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)
    return path


@dataclass
class Origin:
    """A local HTTP(S) server that remembers what it received."""

    url: str
    port: int
    received: list[tuple[str, str, bytes]] = field(default_factory=list)


def _handler(origin: Origin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            origin.received.append((self.command, self.path, body))
            out = f"origin saw {self.command} {self.path} with {len(body)} bytes".encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def _serve(origin: Origin, server: ThreadingHTTPServer) -> Iterator[Origin]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield origin
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (the origin's, not the sandbox's)."""
    folder = tmp_path_factory.mktemp("origin-tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "oracle test origin")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "origin.pem", folder / "origin.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    """A plain HTTP server on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    o = Origin(f"http://127.0.0.1:{port}", int(port))
    server.RequestHandlerClass = _handler(o)
    yield from _serve(o, server)


@pytest.fixture(scope="module")
def tls_origin(tls_files: tuple[Path, Path]) -> Iterator[Origin]:
    """An HTTPS server on 127.0.0.1 with the test certificate."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    o = Origin(f"https://127.0.0.1:{port}", int(port))
    server.RequestHandlerClass = _handler(o)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*tls_files)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    yield from _serve(o, server)
