"""What stands between the agent and the world: the egress recorder, the SMTP capture, and
network and process isolation (`jail`, `bwrap`, `container`).

Nothing here starts on import. Each server is a context manager::

    with EgressRecorder(EgressPolicy(allow=["api.partner.test"])) as rec:
        ...                      # rec.env(folder) → HTTP_PROXY, SSL_CERT_FILE, …
    with SmtpCapture() as smtp:
        ...                      # smtp.host, smtp.port

Each name is imported on first use (PEP 562): isolating an agent does not load the SMTP
server, nor recording mail the egress recorder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oracle.base.lazy import lazy_names

if TYPE_CHECKING:
    from oracle.proxies.egress import Canned, EgressPolicy, EgressRecorder, RecorderError
    from oracle.proxies.smtp import SmtpCapture, SmtpError

#: Each name → the module that defines it (imported when the name is first asked for).
_SOURCES: dict[str, str] = {
    "Canned": "oracle.proxies.egress",
    "EgressPolicy": "oracle.proxies.egress",
    "EgressRecorder": "oracle.proxies.egress",
    "RecorderError": "oracle.proxies.egress",
    "SmtpCapture": "oracle.proxies.smtp",
    "SmtpError": "oracle.proxies.smtp",
}

__all__ = [
    "Canned",
    "EgressPolicy",
    "EgressRecorder",
    "RecorderError",
    "SmtpCapture",
    "SmtpError",
]


__getattr__, __dir__ = lazy_names(__name__, _SOURCES)
