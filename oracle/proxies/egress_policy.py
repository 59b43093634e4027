"""What the egress recorder answers: blocked by default, allowed hosts passed through, canned
responses served for chosen hosts or paths.

A *rule* is a pattern over the request's destination::

    "api.partner.test"              that host, any port, any path
    "api.partner.test:8443"         that host on that port only
    "*.partner.test"                any subdomain (not the bare domain)
    "127.0.0.1:8123"                an address and port (a local server a test starts)
    "wiki.corp.test/runbooks/*"     that host, paths matching the glob (query ignored)
    "*"                             everything

Canned responses win over routes, and routes over the allow-list; anything that matches none
is blocked with a 403 that says so. A *route* sends a host to a local server in its place (a
GitHub world answers for ``api.github.com``): the request is recorded as ``routed`` and
forwarded to that server over plain HTTP, its ``Host`` kept. The decision is made from the
destination the recorder would connect to (the CONNECT target for HTTPS), before any
upstream connection exists.

Example::

    policy = EgressPolicy(
        allow=["127.0.0.1:8123"],
        canned={"wiki.corp.test/page": Canned("<h1>Runbook</h1>"), "api.test": {"ok": True}},
    )
    policy.decide("wiki.corp.test", 443, "/page").answer   # 'canned'
"""

from __future__ import annotations

import base64
import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Answer = Literal["blocked", "canned", "passed", "routed"]

BLOCKED_HEADER = "X-Oracle-Egress"


def blocked_message(host: str, port: int) -> str:
    """The body of the 403 a blocked request gets: it says who blocked it and why."""
    return (
        f"Blocked by the oracle sandbox: requests to {host}:{port} are not allowed for this "
        "task. The request was recorded.\n"
    )


@dataclass(frozen=True)
class Canned:
    """A response the recorder serves instead of the real host (a fake page, a fake API).

    `body` may be text or bytes; `content_type` defaults from it (HTML when the text starts
    with ``<``, plain text otherwise, ``application/octet-stream`` for bytes)."""

    body: str | bytes = b""
    status: int = 200
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"a canned response needs an HTTP status 100-599, not {self.status}")

    @property
    def data(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else self.body

    @property
    def media_type(self) -> str:
        if self.content_type:
            return self.content_type
        if isinstance(self.body, bytes):
            return "application/octet-stream"
        if self.body.lstrip().startswith("<"):
            return "text/html; charset=utf-8"
        return "text/plain; charset=utf-8"

    def to_json(self) -> dict[str, Any]:
        """The form written into the recorder's configuration (and into snapshots)."""
        return {
            "status": self.status,
            "content_type": self.media_type,
            "headers": dict(self.headers),
            "body_base64": base64.b64encode(self.data).decode("ascii"),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Canned:
        return cls(
            body=base64.b64decode(raw["body_base64"]),
            status=int(raw["status"]),
            content_type=str(raw["content_type"]),
            headers=dict(raw.get("headers") or {}),
        )


def as_canned(value: Any) -> Canned:
    """A `Canned` from what a task wrote: a `Canned`, text, bytes, or JSON data (dict/list)."""
    if isinstance(value, Canned):
        return value
    if isinstance(value, str | bytes):
        return Canned(value)
    if isinstance(value, dict | list):
        return Canned(json.dumps(value, indent=2), content_type="application/json")
    raise TypeError(
        f"a canned response is a Canned, text, bytes or JSON data, not {type(value).__name__}"
    )


@dataclass(frozen=True)
class Rule:
    """One parsed pattern (see the module docstring)."""

    pattern: str
    host: str
    port: int | None
    path: str | None

    @classmethod
    def parse(cls, pattern: str) -> Rule:
        if not isinstance(pattern, str) or not pattern.strip():
            raise ValueError(f"an egress rule is a non-empty host pattern, not {pattern!r}")
        text = pattern.strip()
        if "://" in text:
            raise ValueError(
                f"egress rule {pattern!r}: write the host (and optional :port and /path), "
                "without a scheme"
            )
        hostport, slash, path = text.partition("/")
        port: int | None = None
        host = hostport
        if hostport.startswith("["):  # [::1]:8080
            end = hostport.find("]")
            if end < 0:
                raise ValueError(f"egress rule {pattern!r}: unclosed '['")
            host, rest = hostport[1:end], hostport[end + 1 :]
            if rest:
                port = _port(pattern, rest.removeprefix(":"))
        elif hostport.count(":") == 1:
            host, _, p = hostport.partition(":")
            port = _port(pattern, p)
        if not host:
            raise ValueError(f"egress rule {pattern!r} names no host")
        return cls(pattern, host.lower(), port, "/" + path if slash else None)

    def matches(self, host: str, port: int, path: str) -> bool:
        host = host.lower().rstrip(".")
        if self.host != "*":
            if self.host.startswith("*."):
                if not host.endswith(self.host[1:]):
                    return False
            elif host != self.host:
                return False
        if self.port is not None and port != self.port:
            return False
        if self.path is not None:
            return fnmatch.fnmatchcase(path.split("?", 1)[0], self.path)
        return True


def _port(pattern: str, text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"egress rule {pattern!r}: port {text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"egress rule {pattern!r}: port {port} is out of range")
    return port


@dataclass(frozen=True)
class Decision:
    """What the recorder does with one request, and the rule that decided it."""

    answer: Answer
    rule: str | None = None
    canned: Canned | None = None
    #: ``(host, port)`` of the local server a routed request goes to
    upstream: tuple[str, int] | None = None


class EgressPolicy:
    """Blocked unless allowed; canned responses first. See the module docstring."""

    def __init__(
        self,
        allow: Iterable[str] = (),
        canned: Mapping[str, Any] | None = None,
        routes: Mapping[str, str] | None = None,
    ) -> None:
        self.allow = tuple(Rule.parse(p) for p in allow)
        self.canned = tuple((Rule.parse(p), as_canned(v)) for p, v in (canned or {}).items())
        self.routes = tuple((Rule.parse(p), _address(p, a)) for p, a in (routes or {}).items())

    def __repr__(self) -> str:
        return (
            f"EgressPolicy(allow={[r.pattern for r in self.allow]}, "
            f"canned={[r.pattern for r, _ in self.canned]}, "
            f"routes={[r.pattern for r, _ in self.routes]})"
        )

    def decide(self, host: str, port: int, path: str = "/") -> Decision:
        """What to answer a request to `host`:`port` for `path`."""
        for rule, canned in self.canned:
            if rule.matches(host, port, path):
                return Decision("canned", rule.pattern, canned)
        for rule, upstream in self.routes:
            if rule.matches(host, port, path):
                return Decision("routed", rule.pattern, upstream=upstream)
        for rule in self.allow:
            if rule.matches(host, port, path):
                return Decision("passed", rule.pattern)
        return Decision("blocked")

    def may_tunnel(self, host: str, port: int) -> bool:
        """Whether a raw (non-HTTP) connection to `host`:`port` may pass: only to allowed hosts
        whose rule names no path."""
        return any(r.path is None and r.matches(host, port, "/") for r in self.allow)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "allow": [r.pattern for r in self.allow],
            "canned": {r.pattern: c.to_json() for r, c in self.canned},
        }
        if self.routes:
            out["routes"] = {r.pattern: f"{h}:{p}" for r, (h, p) in self.routes}
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EgressPolicy:
        canned = {p: Canned.from_json(c) for p, c in (raw.get("canned") or {}).items()}
        return cls(
            allow=list(raw.get("allow") or ()), canned=canned, routes=dict(raw.get("routes") or {})
        )


def _address(pattern: str, address: str) -> tuple[str, int]:
    """``127.0.0.1:8080`` as ``(host, port)``: where a routed host's requests go."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"egress route {pattern!r}: give the local server as host:port, not {address!r}"
        )
    return host.strip("[]"), int(port)
