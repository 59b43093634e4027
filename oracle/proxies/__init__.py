"""What stands between the agent and the world: the egress recorder, the SMTP capture, and
network and process isolation (`jail`, `bwrap`, `container`).

Nothing here starts on import. Each server is a context manager::

    with EgressRecorder(EgressPolicy(allow=["api.partner.test"])) as rec:
        ...                      # rec.env(folder) → HTTP_PROXY, SSL_CERT_FILE, …
    with SmtpCapture() as smtp:
        ...                      # smtp.host, smtp.port
"""

from oracle.proxies.egress import Canned, EgressPolicy, EgressRecorder, RecorderError
from oracle.proxies.smtp import SmtpCapture, SmtpError

__all__ = [
    "Canned",
    "EgressPolicy",
    "EgressRecorder",
    "RecorderError",
    "SmtpCapture",
    "SmtpError",
]
