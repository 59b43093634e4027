"""The egress recorder's child process: mitmproxy with `EgressAddon`, driven on stdin.

Run by `EgressRecorder` (``python -m oracle.proxies.egress_child CONFIG``). The child prints one
JSON line when it listens (``{"port": …}``) and exits when its standard input closes (the
harness is gone) or on SIGTERM.

A child serves one sandbox at a time, and may serve many in turn (`egress_pool`). Commands are
JSON lines on its standard input, answered in order on its standard output:

- ``{"op": "release"}`` ends the current lease: nothing more is served or written to its log,
  the listener is closed, and so is every client connection (with the server connections it
  opened). Answer: ``{"released": true}``.
- ``{"op": "lease", "config": {…}}`` starts the next lease with a new configuration — policy,
  log, spill folder, body limit, upstream trust, and a new configuration folder, so a new CA —
  on a port no earlier lease of the process used. Answer: ``{"port": …}``, or ``{"error": …}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mitmproxy import certs, exceptions, master, options
from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig
from mitmproxy.net import tls as net_tls

from oracle.proxies.egress_addon import EgressAddon


class _StartupErrors(logging.Handler):
    """Keeps the errors mitmproxy logs while starting, to say why it did not."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class _SpareCA:
    """A CA made ahead of the lease that will use it (`write_ca`, then loaded as mitmproxy
    loads a confdir's, which checks the key): its files, held in memory only, and the
    cert store mitmproxy loaded from them."""

    files: list[tuple[str, bytes, int]]
    store: certs.CertStore


def write_ca(confdir: Path) -> None:
    """Write a new CA into `confdir` in the layout mitmproxy loads (``mitmproxy-ca.pem`` with the
    key, ``mitmproxy-ca-cert.pem`` for clients): an ECDSA P-256 key, made in well under a
    millisecond where mitmproxy's own RSA key takes 0.1-0.4 s to make and tens of
    milliseconds to load. Every client the tests drive (curl, git over GnuTLS, gh, Python,
    Node) accepts it, and its certificates for the hosts it answers are signed with it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "oracle egress recorder"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "oracle"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        x509.CertificateBuilder()
        .serial_number(x509.random_serial_number())
        .subject_name(name)
        .issuer_name(name)
        .not_valid_before(now - datetime.timedelta(days=2))
        .not_valid_after(now + datetime.timedelta(days=365))
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    base = options.CONF_BASENAME
    for file, data, mode in (
        (f"{base}-ca.pem", pem_key + pem_cert, 0o600),
        (f"{base}-ca-cert.pem", pem_cert, 0o644),
    ):
        fd = os.open(confdir / file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def _make_ca(key_size: int) -> _SpareCA:
    """A new CA (`write_ca`), loaded as the TLS addon loads a confdir's."""
    folder = Path(tempfile.mkdtemp(prefix="oracle-egress-ca-"))
    try:
        write_ca(folder)
        store = certs.CertStore.from_store(folder, options.CONF_BASENAME, key_size)
        files = [
            (f.name, f.read_bytes(), stat.S_IMODE(f.stat().st_mode))
            for f in sorted(folder.iterdir())
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _SpareCA(files, store)


def _install_ca(spare: _SpareCA, confdir: Path) -> None:
    confdir.mkdir(mode=0o700, exist_ok=True)
    for name, data, mode in spare.files:
        fd = os.open(confdir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def _upstream_options(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "ssl_verify_upstream_trusted_ca": config.get("upstream_ca") or None,
        "ssl_insecure": bool(config.get("ssl_insecure")),
    }


async def serve(config: Mapping[str, Any]) -> int:
    errors = _StartupErrors()
    logging.getLogger("mitmproxy").addHandler(errors)
    confdir = Path(config["confdir"])
    if not (confdir / f"{options.CONF_BASENAME}-ca.pem").exists():
        write_ca(confdir)  # else mitmproxy makes an RSA CA there, much slower
    opts = options.Options(
        listen_host=config.get("listen_host", "127.0.0.1"),
        listen_port=int(config.get("listen_port", 0)),
        confdir=config["confdir"],
    )
    m: Any = master.Master(opts)
    addon = EgressAddon(config)
    m.addons.add(
        core.Core(),
        proxyserver.Proxyserver(),  # type: ignore[no-untyped-call]
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        addon,
    )
    # Only settable once the master (and the proxyserver addon that defines it) exists.
    updates: dict[str, Any] = {"connection_strategy": "lazy", **_upstream_options(config)}
    settable: Any = opts
    settable.update(**updates)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, m.shutdown)
    control = _Control(m, addon, errors)
    with contextlib.suppress(NotImplementedError, ValueError, OSError):
        loop.add_reader(sys.stdin.fileno(), control.readable)
    worker = asyncio.ensure_future(control.run())
    try:
        await m.run()
    finally:
        worker.cancel()
        addon.end()
    if not addon.used_ports:
        why = "; ".join(errors.messages) or "the proxy server did not listen"
        print(json.dumps({"error": why}), flush=True)
        return 3
    return 0


class _Control:
    """The commands the harness sends on standard input, one JSON line each, run in order;
    the end of input (the harness is gone) stops the process."""

    def __init__(self, m: Any, addon: EgressAddon, errors: _StartupErrors) -> None:
        self.master = m
        self.addon = addon
        self.errors = errors
        self.buffer = b""
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()
        #: The CA of the next lease, made while the process waits for it: never while a lease
        #: runs (making a key holds the interpreter for tens of milliseconds at a time, and the
        #: recorder must answer as promptly as a fresh one).
        self.spare: asyncio.Future[_SpareCA] | None = None

    def prepare(self) -> None:
        """Start making the next lease's CA."""
        if self.spare is None:
            key_size = int(self.master.options.key_size)
            self.spare = asyncio.ensure_future(asyncio.to_thread(_make_ca, key_size))

    async def _take_spare(self) -> _SpareCA | None:
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            made = await spare
        except Exception:  # made the usual way instead
            return None
        usable = made.store.default_chain_file is None and not self.master.options.certs
        return made if usable else None

    def readable(self) -> None:
        try:
            data = os.read(sys.stdin.fileno(), 1 << 16)
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
            self.master.shutdown()
            return
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.strip():
                self.lines.put_nowait(line)

    async def run(self) -> None:
        while True:
            line = await self.lines.get()
            try:
                command = json.loads(line)
                op = command.get("op")
                if op == "release":
                    await self.release()
                    answer: dict[str, Any] = {"released": True}
                elif op == "lease":
                    answer = {"port": await self.lease(command["config"])}
                else:
                    answer = {"error": f"unknown command {op!r}"}
            except Exception as exc:  # every failure is answered, never lost
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
            if answer.get("released"):
                self.prepare()  # idle now: the next lease's CA

    @property
    def proxyserver(self) -> Any:
        return self.master.addons.get("proxyserver")

    async def release(self) -> None:
        """End the lease (nothing more is served or logged), stop listening, close every
        client connection (and with it the server connections it opened)."""
        self.addon.end()
        ps = self.proxyserver
        await ps.servers.update([])
        for handler in list(ps.connections.values()):
            with contextlib.suppress(Exception):
                handler.close_connection(handler.client)
        deadline = time.monotonic() + 2.0
        while ps.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def lease(self, config: Mapping[str, Any]) -> int:
        """Start a lease with `config` on a port no earlier lease used; return the port."""
        ps = self.proxyserver
        if self.addon.port is not None or len(ps.servers):
            await self.release()
        self.addon.begin(config)
        # No trust decision of the last lease is reused: mitmproxy caches upstream TLS
        # contexts by file name, and a file of that name may now hold other certificates.
        net_tls.create_proxy_server_context.cache_clear()
        net_tls.create_client_proxy_context.cache_clear()
        opts: Any = self.master.options
        confdir = Path(config["confdir"])
        spare = await self._take_spare()
        updates = _upstream_options(config)
        if spare is None or any(confdir.glob(f"{options.CONF_BASENAME}-ca*")):
            # A new confdir makes the TLS addon build a new cert store there: a new CA.
            updates["confdir"] = str(confdir)
        else:
            # The same, made ahead: the CA's files are written to the new confdir and the
            # store loaded from them replaces the last lease's. (The `confdir` option keeps
            # its old value; of the addons loaded here only the TLS addon reads it, when it
            # changes.)
            _install_ca(spare, confdir)
            tls_addon: Any = self.master.addons.get("tlsconfig")
            tls_addon.certstore = spare.store
        try:
            opts.update(**updates)
        except exceptions.OptionsError as exc:
            raise RuntimeError(f"invalid configuration: {exc}") from None
        for _ in range(8):
            self.errors.messages.clear()
            if not await ps.setup_servers():
                raise RuntimeError("; ".join(self.errors.messages) or "it did not listen")
            addrs = ps.listen_addrs()
            if not addrs:
                raise RuntimeError("; ".join(self.errors.messages) or "it did not listen")
            port = int(addrs[0][1])
            if port not in self.addon.used_ports:
                self.addon.listen(port)
                return port
            await ps.servers.update([])
        raise RuntimeError("it found no port that no earlier lease had used")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m oracle.proxies.egress_child CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    return asyncio.run(serve(config))


if __name__ == "__main__":
    raise SystemExit(main())
