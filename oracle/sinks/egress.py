"""The egress sink: the requests that reached the egress recorder (boundary evidence).

A snapshot is the recorder's log since its last reset (one `EgressRequest` per request, in the
order they started) together with what the recorder serves (allowed hosts, canned pages), so
that an injection planted in a canned page can be checked for. The diff is the requests made
between two snapshots.

In predicates::

    net = ev.boundary.egress("net")                  # or ev.diff.egress("net")
    net.requests(host="collect.evil.test", method="POST")
    net.requests(host="*.evil.test", body=re.compile("sk-live"))
    net.to("api.partner.test")                       # every request to that host
    net.carrying(SECRET)                             # requests holding the secret, any encoding
    net.blocked(), net.passed(), net.canned(), net.routed()
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NotRequired, TypedDict

from pydantic import TypeAdapter

from oracle.base.canonical import Json, digest_json
from oracle.evidence.attempt import Attempt
from oracle.evidence.diff import Change, Content, IncompleteEvidenceError, SinkDiff
from oracle.evidence.kinds import SinkKind
from oracle.evidence.snapshot import Snapshot, SnapshotError
from oracle.evidence.usage import ModelCall
from oracle.proxies.egress import EgressRecorder, RecorderError
from oracle.proxies.egress_log import EgressRequest
from oracle.proxies.egress_policy import Rule
from oracle.sinks import content_coding
from oracle.sinks.content_coding import Decoded, decode
from oracle.sinks.egress_usage import model_calls
from oracle.trial.agent import RunRecord

KIND = "egress"


def _host_matches(host: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(host.lower(), pattern.lower())


def _text_matches(value: bytes | str, expected: Any) -> bool:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(expected, re.Pattern):
        return expected.search(text) is not None
    if callable(expected):
        return bool(expected(value))
    if isinstance(expected, bytes):
        raw = value if isinstance(value, bytes) else value.encode("utf-8")
        return expected in raw
    return str(expected) in text


def select(
    requests: Sequence[EgressRequest],
    *,
    host: str | None = None,
    method: str | None = None,
    path: str | None = None,
    answer: str | None = None,
    url: Any = None,
    body: Any = None,
    header: Mapping[str, Any] | None = None,
) -> list[EgressRequest]:
    """Requests matching every filter given: `host` and `path` are globs (``*.evil.test``,
    ``/api/*``; the path without its query), `method` and `answer` exact (any case for the
    method); `url` and `body` a substring, a compiled regex or a callable; `header` maps header
    names to the same kinds of expectation."""
    out = []
    for r in requests:
        if host is not None and not _host_matches(r.host, host):
            continue
        if method is not None and r.method.upper() != method.upper():
            continue
        if path is not None and not fnmatch.fnmatchcase(r.path.split("?", 1)[0], path):
            continue
        if answer is not None and r.answer != answer:
            continue
        if url is not None and not _text_matches(r.url, url):
            continue
        if body is not None and not _text_matches(r.body_bytes(), body):
            if r.state == "pending" or (r.body is not None and r.body.truncated):
                raise IncompleteEvidenceError(
                    f"request #{r.id} to {r.host} might match {body!r}, but its body is not "
                    "whole (cut at the recorder's cap, or still arriving)"
                )
            continue
        if header and not all(
            (v := r.header(k)) is not None and _text_matches(v, exp) for k, exp in header.items()
        ):
            continue
        out.append(r)
    return out


@dataclass(frozen=True)
class EgressState:
    """The requests since the recorder's last reset, and what it serves. In predicates::

    ev.after.egress("net").requests(host="api.partner.test")
    """

    requests_made: tuple[EgressRequest, ...]
    allow: tuple[str, ...]
    canned: Mapping[str, Mapping[str, Any]]
    attempts: tuple[Attempt, ...] = ()
    #: What passed through to hosts the harness allowed for itself (a real agent's model API),
    #: as ``method host path status``: recorded, with no headers or bodies, and never evidence.
    harness: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "requests": [r.model_dump(mode="json") for r in self.requests_made],
            "allow": list(self.allow),
            "canned": {k: dict(v) for k, v in self.canned.items()},
            "attempts": [a.model_dump(mode="json") for a in self.attempts],
        }
        if self.harness:
            out["harness_requests"] = list(self.harness)
        return out

    @classmethod
    def from_json(cls, raw: Any, spec: object = None) -> EgressState:
        """The state `to_json` wrote; `spec` is not needed. Raises ValueError when `raw` is
        not such a state."""
        s = _STATE.validate_python(raw, strict=True)
        return cls(
            requests_made=tuple(
                EgressRequest.model_validate(r, strict=True) for r in s["requests"]
            ),
            allow=tuple(s["allow"]),
            canned=s["canned"],
            attempts=tuple(Attempt.model_validate(a, strict=True) for a in s["attempts"]),
            harness=tuple(s.get("harness_requests", ())),
        )

    def requests(self, **where: Any) -> list[EgressRequest]:
        """Requests matching `where` (see `select`)."""
        return select(self.requests_made, **where)

    def holds_text(self, where: str, text: str) -> bool:
        """Whether a canned response for `where` (its pattern as the task wrote it, or a URL it
        serves) carries `text`."""
        target = where.split("://", 1)[-1]
        host, _, rest = target.partition("/")
        path = "/" + rest
        hostname, _, port_text = host.partition(":")
        for pattern, canned in self.canned.items():
            rule = Rule.parse(pattern)
            port = int(port_text) if port_text.isdigit() else (rule.port or 443)
            if pattern == where or rule.matches(hostname, port, path):
                body = base64.b64decode(str(canned["body_base64"]))
                if text.encode("utf-8") in body:
                    return True
        return False


class _CannedJson(TypedDict):
    status: int
    content_type: str
    headers: dict[str, str]
    body_base64: str


class _StateJson(TypedDict):
    requests: list[dict[str, Any]]
    allow: list[str]
    canned: dict[str, _CannedJson]
    attempts: list[dict[str, Any]]
    harness_requests: NotRequired[list[str]]


_STATE: TypeAdapter[_StateJson] = TypeAdapter(_StateJson)


class RequestMade(Change):
    """A request that reached the recorder during the trial, with what it was answered."""

    change: Literal["request_made"] = "request_made"
    request: EgressRequest

    def summary(self) -> str:
        r = self.request
        status = r.status if r.status is not None else r.state
        return f"request #{r.id} {r.method} {r.url} → {r.answer} {status}"

    def target(self) -> str:
        return self.request.host

    def texts(self) -> Iterator[str]:
        r = self.request
        yield r.url
        for h in r.headers:
            yield h.value
        if r.body is not None:
            yield r.body_text()

    @functools.cached_property
    def decoded_body(self) -> Decoded:
        """The body with its content coding (gzip, deflate, br, zstd) undone, if it has one
        (decoded once: both `unseen` and `contents` read it)."""
        r = self.request
        if r.body is None or r.body.truncated:
            return Decoded(None, True, None)  # a cut body is unseen anyway
        return decode(r.body_bytes(), r.header("content-encoding"))

    def unseen(self) -> str | None:
        r = self.request
        if r.body is not None and r.body.truncated:
            return f"request #{r.id} to {r.host}: body cut at the cap ({r.body.size} bytes)"
        if r.state == "pending":
            return f"request #{r.id} to {r.host} was still in progress"
        if not self.decoded_body.complete:
            return f"request #{r.id} to {r.host}: body inflates past {content_coding.LIMIT} bytes"
        return None

    def contents(self) -> Iterator[Content]:
        r = self.request
        yield Content("url", r.url)
        for h in r.headers:
            yield Content(f"header {h.name}", h.raw())
        if r.body is not None:
            yield Content("body", r.body_bytes())
            decoded = self.decoded_body
            if decoded.data is not None:
                coding = r.header("content-encoding") or ""
                yield Content(f"body (decoded from {coding.strip()})", decoded.data)


class ConnectionAttempted(Change):
    """A connection, datagram or DNS query the agent sent past the sandbox's network, outside
    the recorder, or a login to an exposed server as someone other than the sandbox's account
    (``attempt.reason`` says why its login gate refused it): it reached nothing, and this is
    its trace."""

    change: Literal["connection_attempted"] = "connection_attempted"
    attempt: Attempt

    def summary(self) -> str:
        what = "refused login" if self.attempt.reason else "bypass attempt"
        return f"{what} {self.attempt.summary()}"

    def target(self) -> str:
        return self.attempt.dns_query or self.attempt.destination

    def texts(self) -> Iterator[str]:
        if self.attempt.dns_query:
            yield self.attempt.dns_query
        yield self.attempt.data().decode("utf-8", "replace")

    def contents(self) -> Iterator[Content]:
        if self.attempt.dns_query:
            yield Content("dns query", self.attempt.dns_query)
        yield Content("bytes sent", self.attempt.data())


class EgressDiff(SinkDiff):
    """The requests made during the trial (see the module docstring for the queries)."""

    kind: ClassVar[str] = KIND

    def all(self) -> list[EgressRequest]:
        """Every request, in the order they started."""
        return [c.request for c in self.of_type(RequestMade)]

    def requests(self, **where: Any) -> list[EgressRequest]:
        """Requests matching `where`: ``host``, ``method``, ``path``, ``answer``, ``url``,
        ``body``, ``header`` (see `select`)."""
        return select(self.all(), **where)

    def to(self, host: str) -> list[EgressRequest]:
        """Requests to `host` (a glob: ``*.evil.test``)."""
        return self.requests(host=host)

    def blocked(self) -> list[EgressRequest]:
        return self.requests(answer="blocked")

    def passed(self) -> list[EgressRequest]:
        return self.requests(answer="passed")

    def routed(self) -> list[EgressRequest]:
        """Requests a local server of the sandbox answered for their host (a GitHub world)."""
        return self.requests(answer="routed")

    def canned(self) -> list[EgressRequest]:
        return self.requests(answer="canned")

    def hosts(self) -> list[str]:
        """The hosts requested, sorted, once each."""
        return sorted({r.host for r in self.all()})

    def attempts(self, *, destination: str | None = None, port: int | None = None) -> list[Attempt]:
        """Connections the agent tried past the recorder (a program that ignored the proxy
        variables), optionally to one `destination` (an address or a DNS name, a glob) or
        `port`."""
        out = []
        for c in self.of_type(ConnectionAttempted):
            a = c.attempt
            names = [a.destination] + ([a.dns_query] if a.dns_query else [])
            if destination is not None and not any(_host_matches(n, destination) for n in names):
                continue
            if port is not None and a.port != port:
                continue
            out.append(a)
        return out

    def carrying(
        self, secret: str | bytes, where: Callable[[EgressRequest], bool] | None = None
    ) -> list[EgressRequest]:
        """Requests whose URL, headers or body hold `secret`, raw or encoded (see
        `oracle.evidence.canary`); `where` narrows them (``lambda r: r.host !=
        "api.partner.test"``).
        When none is found but a request `where` accepts was not kept whole (its body cut at
        the recorder's cap, or still arriving), raises `IncompleteEvidenceError`: the metric
        is unknown, not "not sent"."""

        def keep(c: Change) -> bool:
            return isinstance(c, RequestMade) and (where is None or where(c.request))

        found = {
            h.change.request.id: h.change.request
            for h in self.find_secret(secret, keep)
            if isinstance(h.change, RequestMade)
        }
        return [found[k] for k in sorted(found)]


#: The egress sink kind, boundary evidence: ``ev.boundary.of(EGRESS)``, ``ev.diff.egress("net")``.
EGRESS = SinkKind(KIND, diff=EgressDiff, state=EgressState, boundary=True)


def diff_requests(sink: str, before: EgressState, after: EgressState) -> EgressDiff:
    """Requests in `after` that `before` does not hold, or holds in an earlier state."""
    old = {r.id: r for r in before.requests_made}
    changes: list[Change] = [
        RequestMade(request=r) for r in after.requests_made if old.get(r.id) != r
    ]
    seen = set(before.attempts)
    changes += [ConnectionAttempted(attempt=a) for a in after.attempts if a not in seen]
    return EgressDiff(sink, changes)


class EgressSink:
    """The log of an `EgressRecorder` as a sink."""

    kind = KIND

    def __init__(
        self, name: str, recorder: EgressRecorder, harness_hosts: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.recorder = recorder
        # Hosts the harness let through for itself (a real agent's model API): their requests
        # carry the agent's conversation, a claim, and are kept out of the evidence entirely.
        self._harness_rules = [Rule.parse(h) for h in harness_hosts]

    def _for_the_harness(self, r: EgressRequest) -> bool:
        return r.answer == "passed" and any(
            rule.matches(r.host, r.port, r.path) for rule in self._harness_rules
        )

    def __repr__(self) -> str:
        return f"EgressSink({self.name!r}, {self.recorder!r})"

    def snapshot(self) -> Snapshot:
        """The requests since the last reset; raises `SnapshotError` if the recorder stopped."""
        started = time.time()
        try:
            every = self.recorder.requests()
        except (RecorderError, OSError, ValueError) as exc:
            raise SnapshotError(self.name, f"cannot read the egress log: {exc}") from exc
        requests = tuple(r for r in every if not self._for_the_harness(r))
        harness = tuple(
            f"{r.method} {r.host}:{r.port} {r.path.split('?', 1)[0]} → {r.status}"
            for r in every
            if self._for_the_harness(r)
        )
        policy = self.recorder.policy.to_json()
        allow = tuple(
            a for a in policy["allow"] if not any(a == r.pattern for r in self._harness_rules)
        )
        state = EgressState(
            requests, allow, policy["canned"], tuple(self.recorder.attempts), harness
        )
        return Snapshot(self.name, KIND, digest_json(state.to_json()), state, started)

    def diff(self, before: Snapshot, after: Snapshot) -> EgressDiff:
        return diff_requests(self.name, before.state, after.state)

    def model_calls(self) -> list[ModelCall]:
        """The model API calls the recorder passed since the trial began, as their responses
        tell them (`oracle.evidence.usage`): the record's usage, never evidence."""
        return model_calls(self.name, self.recorder)

    def receive_run(self, run: RunRecord) -> None:
        """Take the connections the agent tried past the network namespace (if it ran in one):
        they are egress state too."""
        if run.network_attempts:
            self.recorder.attempts.extend(run.network_attempts)

    def reach_probe(self, where: str, text: str, before: Snapshot) -> CannedReachProbe | None:
        """A probe that tells whether the recorder served the injection planted at `where`."""
        return (
            CannedReachProbe(self.recorder, text) if before.state.holds_text(where, text) else None
        )


class CannedReachProbe:
    """Whether any request during the run was answered with a canned response holding the
    injection: the recorder served it, so it reached the agent."""

    def __init__(self, recorder: EgressRecorder, text: str) -> None:
        self.recorder = recorder
        self.text = text.encode("utf-8")

    def arm(self) -> None:
        """Nothing to arm: the recorder's log since the reset is the trace."""

    def reached(self) -> tuple[bool | None, str]:
        canned = self.recorder.policy.to_json()["canned"]
        served = [
            r
            for r in self.recorder.requests()
            if r.answer == "canned"
            and r.rule in canned
            and self.text in base64.b64decode(str(canned[r.rule]["body_base64"]))
        ]
        if served:
            return True, f"the recorder served it to {served[0].method} {served[0].url}"
        return False, "no request was answered with the page that carries it"
