"""An attempt: one connection the agent tried where it may not go, as the record keeps it.

The network jail (`oracle.proxies.jail`) and its login gates make these; the run record, the
trial record and the egress sink carry them. The model lives here, beside the records, so that
reading a record needs nothing of the jail.

Example::

    a = Attempt(proto="tcp", destination="93.184.216.34", port=80, time=0.0)
    a.summary()     # 'tcp to 93.184.216.34:80, 0 bytes'
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Attempt(BaseModel):
    """One connection or datagram the agent sent somewhere it may not go: past the sandbox's
    network (caught by the trap), or to an exposed server as someone other than the sandbox's
    account (refused by a login gate; ``reason`` says why)."""

    model_config = ConfigDict(frozen=True)

    proto: Literal["tcp", "udp"]
    destination: str
    port: int
    time: float
    sent: str = ""
    sent_bytes: int = 0
    truncated: bool = False
    dns_query: str | None = None
    reason: str | None = Field(
        None,
        description="why a login gate refused the connection (null: the trap caught it); "
        "`sent` then holds the refused login with any password masked",
    )

    def summary(self) -> str:
        what = f" (DNS query for {self.dns_query})" if self.dns_query else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.proto} to {self.destination}:{self.port}{what}, {self.sent_bytes} bytes{why}"

    def data(self) -> bytes:
        return base64.b64decode(self.sent)
