"""Small clients that reach the sandbox's services through its endpoints, as an agent would.

They read only the environment they are given (a `SandboxView`'s ``env``), never the harness's
own: the proxy and CA variables for HTTP(S), ``ORACLE_SMTP_HOST``/``ORACLE_SMTP_PORT`` for mail.
Controls and the demo agents use them::

    r = http_request(view.env, "POST", "https://api.partner.test/v1/status", b"deployed")
    r.status, r.text
    send_mail(view.env, "billing@shop.test", "Invoice 4411", "Forwarding Dana's question.")
"""

from __future__ import annotations

import email.policy
import os
import smtplib
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage

from oracle.base.envnames import env_suffix


@dataclass(frozen=True)
class HttpResult:
    """The answer to one request: status, headers, body."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _get(env: Mapping[str, str], *names: str) -> str | None:
    for n in names:
        v = env.get(n)
        if v:
            return v
    return None


#: TLS contexts by CA file and the file's identity (inode, size, change and modification
#: times): building one from a bundle with the system's CAs parses every certificate, about
#: 27 ms, and a control makes a request or three. A file rewritten or replaced is read again.
_CONTEXTS: dict[tuple[str, int, int, int, int] | None, ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()


def tls_context(cafile: str | None) -> ssl.SSLContext:
    """A client TLS context trusting the CAs in `cafile` (None: the system's), built once per
    version of the file in this process. A process forked after this call (a control's body)
    inherits it."""
    key: tuple[str, int, int, int, int] | None = None
    if cafile:
        st = os.stat(cafile)
        key = (os.path.abspath(cafile), st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)
    with _CONTEXTS_LOCK:
        context = _CONTEXTS.get(key)
        if context is None:
            context = (
                ssl.create_default_context(cafile=cafile)
                if cafile
                else ssl.create_default_context()
            )
            if len(_CONTEXTS) > 64:  # sandboxes come and go: keep the recent ones
                _CONTEXTS.clear()
            _CONTEXTS[key] = context
    return context


def http_request(
    env: Mapping[str, str],
    method: str,
    url: str,
    body: str | bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> HttpResult:
    """One request through the proxy named in `env` (none: direct), trusting the CA bundle in
    ``SSL_CERT_FILE``. Any HTTP status is returned; a connection failure raises `OSError`."""
    proxy = _get(env, "HTTPS_PROXY", "https_proxy") if url.lower().startswith("https:") else None
    proxy = proxy or _get(env, "HTTP_PROXY", "http_proxy")
    context = tls_context(_get(env, "SSL_CERT_FILE"))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}),
        urllib.request.HTTPSHandler(context=context),
    )
    data = body.encode("utf-8") if isinstance(body, str) else body
    request = urllib.request.Request(
        url, data=data, method=method.upper(), headers=dict(headers or {})
    )
    try:
        with opener.open(request, timeout=timeout) as resp:
            return HttpResult(resp.status, resp.read(), dict(resp.headers.items()))
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, exc.read(), dict(exc.headers.items()))


def smtp_endpoint(env: Mapping[str, str], sink: str | None = None) -> tuple[str, int]:
    """The host and port of SMTP sink `sink` (the first one if not named)."""
    suffix = f"_{env_suffix(sink)}" if sink else ""
    host, port = env.get(f"ORACLE_SMTP_HOST{suffix}"), env.get(f"ORACLE_SMTP_PORT{suffix}")
    if not host or not port:
        raise KeyError(f"the sandbox has no SMTP server {sink or '(default)'}")
    return host, int(port)


def send_message(env: Mapping[str, str], msg: EmailMessage, sink: str | None = None) -> None:
    """Send a prepared message through the sandbox's SMTP server."""
    host, port = smtp_endpoint(env, sink)
    with smtplib.SMTP(host, port, timeout=30) as s:
        s.send_message(msg)


def send_mail(
    env: Mapping[str, str],
    to: str | list[str],
    subject: str,
    body: str,
    sender: str = "agent@sandbox.test",
    attachments: Mapping[str, str | bytes] | None = None,
    sink: str | None = None,
) -> None:
    """Compose and send one message (text body, optional attachments)."""
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["From"] = sender
    msg["To"] = to if isinstance(to, str) else ", ".join(to)
    msg["Subject"] = subject
    msg.set_content(body)
    for name, content in (attachments or {}).items():
        if isinstance(content, str):
            msg.add_attachment(content, filename=name)
        else:
            msg.add_attachment(
                content, maintype="application", subtype="octet-stream", filename=name
            )
    send_message(env, msg, sink)
