"""The egress recorder: a mitmproxy process per sandbox that records every HTTP(S) request.

`EgressRecorder` is a context manager. Starting it runs the addon in `egress_addon` in a child
process (`egress_child`) bound to 127.0.0.1 on an ephemeral port, with its own configuration
folder (so its own CA: a key that never leaves the recorder's private folder). It serves many
trials; `reset` starts a fresh log for the next one. `requests()` reads the log as
`EgressRequest` records.

On an ephemeral port the child is leased from `egress_pool`: a warm process that served an
earlier recorder, given a new configuration, CA and port, and returned there by `stop`
(``ORACLE_EGRESS_POOL=0``: a process of its own, stopped by `stop`).

Example::

    policy = EgressPolicy(allow=["127.0.0.1:8123"], canned={"wiki.test": "<h1>hi</h1>"})
    with EgressRecorder(policy) as rec:
        env = rec.client_env(folder)     # HTTP_PROXY, HTTPS_PROXY, SSL_CERT_FILE, …
        subprocess.run(["curl", "-s", "https://wiki.test/"], env={**os.environ, **env})
        rec.requests()[0].answer         # 'canned'

The recorder's folder (log, spill files, CA key) is created with mode 0700 outside every
sandbox; only the CA *certificate* is copied where the agent can read it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from oracle.evidence.attempt import Attempt
from oracle.proxies.egress_log import (
    EgressRequest,
    ResponseBody,
    fold,
    open_tunnels,
    read_events,
    response_bodies,
)
from oracle.proxies.egress_policy import Canned, EgressPolicy
from oracle.proxies.egress_pool import POOL, ProcessError, RecorderProcess, pooling_enabled

__all__ = ["Canned", "EgressPolicy", "EgressRecorder", "EgressRequest", "RecorderError"]

DEFAULT_BODY_LIMIT = 1 << 20
#: How long a read of the log waits for requests still in flight (answers the child has sent
#: but not logged yet, tunnels mid-handshake) before returning them as ``pending``. It returns
#: as soon as nothing is in flight; under a heavy load the child logs a streamed answer's end
#: well after its client has it (half a second was seen to be too short).
SETTLE = 2.0
CA_FILE = "mitmproxy-ca-cert.pem"


class RecorderError(RuntimeError):
    """The egress recorder could not start, or stopped. Names the recorder and the cause."""

    def __init__(self, name: str, message: str) -> None:
        self.recorder = name
        super().__init__(f"egress recorder {name!r}: {message}")


def _system_ca_bundle() -> Path | None:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return Path(candidate)
    return None


class EgressRecorder:
    """A mitmproxy child process that records and answers requests by `policy`.

    - `body_limit`: request bytes kept per request (the rest is counted, hashed and dropped;
      the record says ``truncated``), and response bytes kept per passed request
      (`exchanges`).
    - `upstream_ca`: a PEM file of CAs to trust when passing requests through to allowed
      hosts (a test's own HTTPS server); `ssl_insecure` skips upstream verification.
    - `listen_port`: 0 for an ephemeral port (and a warm process from `egress_pool`).
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        name: str = "egress",
        body_limit: int = DEFAULT_BODY_LIMIT,
        upstream_ca: str | os.PathLike[str] | None = None,
        ssl_insecure: bool = False,
        listen_port: int = 0,
        start_timeout: float = 30.0,
    ) -> None:
        if body_limit < 1:
            raise ValueError(f"egress recorder {name!r}: body_limit must be positive")
        self.name = name
        self.policy = policy or EgressPolicy()
        self.body_limit = body_limit
        self.upstream_ca = str(upstream_ca) if upstream_ca else None
        self.ssl_insecure = ssl_insecure
        self.listen_port = listen_port
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self._child: RecorderProcess | None = None
        #: Whether the child goes back to the pool at `stop` (set once a lease succeeded).
        self._pooled = False
        self._port: int | None = None
        self._offset = 0
        self._events: list[dict[str, Any]] = []
        #: Connections the agent tried past the sandbox's network (from `NetworkJail`), since
        #: the last reset: the same egress state, seen by another route.
        self.attempts: list[Attempt] = []

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self._port}" if self._port else "stopped"
        return f"EgressRecorder({self.name!r}, {where}, {self.policy!r})"

    def __enter__(self) -> EgressRecorder:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- life ---------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self._private() / "log.jsonl"

    @property
    def spill_dir(self) -> Path:
        return self._private() / "spill"

    @property
    def private_dirs(self) -> tuple[Path, ...]:
        """The folders of the oracle's that an agent must neither read nor write: the private
        folder (log, spill files, CA key) and the child's own (its error output)."""
        dirs = (self.dir,) + ((self._child.folder,) if self._child is not None else ())
        return tuple(d for d in dirs if d is not None)

    def _private(self) -> Path:
        if self.dir is None:
            raise RecorderError(self.name, "it is not running")
        return self.dir

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        """The child process serving this recorder, while it runs."""
        return self._child.popen if self._child is not None else None

    def start(self) -> None:
        """Start (or lease) the child and wait until it listens; raise `RecorderError` saying
        why not."""
        if self._child is not None:
            return
        self.dir = Path(tempfile.mkdtemp(prefix=f"oracle-egress-{self.name}-"))
        try:
            self._spawn()
        except ProcessError as exc:
            self.stop()
            raise RecorderError(self.name, str(exc)) from None
        except BaseException:
            self.stop()
            raise

    def _config(self) -> dict[str, Any]:
        private = self._private()
        (private / "conf").mkdir()
        self.spill_dir.mkdir()
        self.log_path.touch()
        return {
            "policy": self.policy.to_json(),
            "log": str(self.log_path),
            "spill_dir": str(self.spill_dir),
            "confdir": str(private / "conf"),
            "body_limit": self.body_limit,
            "listen_port": self.listen_port,
            "upstream_ca": self.upstream_ca,
            "ssl_insecure": self.ssl_insecure,
        }

    def _spawn(self) -> None:
        private = self._private()
        poolable = self.listen_port == 0 and pooling_enabled()
        config = self._config()
        warm = POOL.take() if poolable else None
        if warm is not None:
            self._child = warm
            port = warm.lease(config, self.start_timeout)
        else:
            (private / "config.json").write_text(json.dumps(config), encoding="utf-8")
            self._child, port = RecorderProcess.spawn(private / "config.json", self.start_timeout)
        self._port = port
        if not (private / "conf" / CA_FILE).is_file():
            raise RecorderError(self.name, "started without writing its CA certificate")
        self._pooled = poolable

    def _tail(self) -> str:
        return self._child.tail() if self._child is not None else ""

    def stop(self) -> None:
        """Stop the child, or return it to the pool once it has ended this recorder's lease
        (closed every connection, stopped listening); remove the private folder."""
        child, self._child = self._child, None
        pooled, self._pooled = self._pooled, False
        if child is not None:
            if pooled and child.release():
                POOL.give_back(child)
            else:
                child.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self._port = None

    def check(self) -> None:
        """Raise `RecorderError` unless the child is running."""
        if self._child is None:
            raise RecorderError(self.name, "it is not running")
        code = self._child.popen.poll()
        if code is not None:
            raise RecorderError(self.name, f"exited with code {code}: {self._tail()}")

    # -- what agents get ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RecorderError(self.name, "it is not running")
        return self._port

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA certificate (public part) in the private folder."""
        return self._private() / "conf" / CA_FILE

    def client_env(self, folder: Path) -> dict[str, str]:
        """Copy the CA certificate (alone, and as a bundle with the system's CAs) into
        `folder`, where the agent can read it, and return the variables clients read."""
        folder.mkdir(parents=True, exist_ok=True)
        ca = folder / f"{self.name}-ca.pem"
        bundle = folder / f"{self.name}-ca-bundle.pem"
        pem = self.ca_cert.read_bytes()
        ca.write_bytes(pem)
        system = _system_ca_bundle()
        bundle.write_bytes(pem + b"\n" + (system.read_bytes() if system else b""))
        url = self.proxy_url
        return {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            # Empty on purpose: loopback too goes through the recorder (an inherited
            # NO_PROXY=localhost would let requests to local services pass unseen).
            "NO_PROXY": "",
            "no_proxy": "",
            "SSL_CERT_FILE": str(bundle),
            "REQUESTS_CA_BUNDLE": str(bundle),
            "CURL_CA_BUNDLE": str(bundle),
            # git over HTTPS reads its own variable (Debian's git uses GnuTLS, which reads
            # neither of the above).
            "GIT_SSL_CAINFO": str(bundle),
            "NODE_EXTRA_CA_CERTS": str(ca),
        }

    # -- the log -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Start a fresh log: requests before this call are not part of the next trial."""
        self.check()
        self._offset = self.log_path.stat().st_size
        self._events = []
        self.attempts = []
        for f in self.spill_dir.iterdir():
            with contextlib.suppress(OSError):
                f.unlink()

    def requests(self, settle: float = SETTLE) -> list[EgressRequest]:
        """The requests since the last reset, in the order they started.

        A request still in progress (or a tunnel whose handshake has not finished) is waited
        for up to `settle` seconds, then returned as ``pending``. Raises `RecorderError` if
        the recorder is not running."""
        deadline = time.monotonic() + settle
        while True:
            self.check()
            events, self._offset = read_events(self.log_path, self._offset)
            self._events.extend(events)
            records = fold(self._events, self.spill_dir)
            settled = all(r.state != "pending" for r in records)
            if (settled and not open_tunnels(self._events)) or time.monotonic() >= deadline:
                return records
            time.sleep(0.01)

    def exchanges(self, settle: float = SETTLE) -> list[tuple[EgressRequest, ResponseBody | None]]:
        """`requests` with the response body kept for each (passed requests only: see
        `egress_log.response_bodies`), or None where none was kept."""
        records = self.requests(settle)
        bodies = response_bodies(self._events, self.spill_dir)
        return [(r, bodies.get(r.id)) for r in records]
