"""How the oracle's own clients of a MariaDB (or MySQL) server connect: TLS where the server is
not on this machine's loopback.

PyMySQL (1.2 and later) asks for TLS whenever no TLS option is given ("preferred": it falls
back to plain text where the server offers none), and for that builds an SSL context with the
system's CAs on every connection: 30–40 ms each, and a trial opens a dozen (the reset, the
snapshots, the account checks). A loopback connection never leaves this host, and an agent in
its jail has a network namespace of its own, so it cannot see that traffic: TLS protects nothing
there. `connect_args` turns it off for loopback hosts only; any other host keeps PyMySQL's
preferred TLS. The agent's URL is not changed: its clients choose their own TLS.
"""

from __future__ import annotations

import ipaddress
from typing import Any

#: Host names that resolve to this machine's loopback.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str | None) -> bool:
    """Whether `host` (a name or an address; None is PyMySQL's default, ``localhost``) is this
    machine's loopback."""
    if host is None or host == "":
        return True
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def connect_args(host: str | None) -> dict[str, Any]:
    """The keyword arguments PyMySQL's ``connect`` gets besides the address and account:
    ``ssl_disabled`` for a loopback `host`, nothing otherwise."""
    return {"ssl_disabled": True} if is_loopback(host) else {}


def engine_connect_args(url: Any) -> dict[str, Any]:
    """`connect_args` for a SQLAlchemy engine of `url` (a string or ``sqlalchemy.URL``): the
    above for a MariaDB/MySQL URL, nothing for another backend."""
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    if parsed.get_backend_name() not in ("mysql", "mariadb"):
        return {}
    return connect_args(parsed.host)
