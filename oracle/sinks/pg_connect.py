"""PostgreSQL connections with time limits (`oracle.sinks.server_limits`): the fixtures' and the
sinks' own, never the agent's.

psycopg waits on its socket for as long as a server takes to answer: a server that stops
answering while the TCP connection stays open would hold a reset, a snapshot or a teardown
forever. A `BoundedConnection` gives every round trip (a statement and its whole answer, a
commit, a rollback) `limit` seconds; past it, the connection is ended and the call raises
`PgStalledError`. Opening one is bounded by ``connect_timeout`` (the connect limit).

Example::

    conn = connect(limits, "PostgreSQL 127.0.0.1:5432", host="127.0.0.1", dbname="postgres")
    conn.limit = limits.teardown        # the round trips of a teardown get the teardown limit
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors

from oracle.sinks.server_limits import STATEMENT_ENV, TEARDOWN_ENV, ServerLimits, stalled


class PgStalledError(psycopg.OperationalError):
    """The server did not answer a round trip within the connection's limit."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every round trip has a time limit (`limit`, seconds)."""

    limit: float = ServerLimits.statement
    #: What the errors call the server, ``PostgreSQL host:port``.
    server: str = "PostgreSQL"
    #: What the errors call a round trip, and the setting of its limit.
    what: str = "a statement"
    setting: str = STATEMENT_ENV

    def for_teardown(self, limits: ServerLimits) -> BoundedConnection:
        """From now on, round trips get the teardown limit."""
        self.limit, self.what, self.setting = limits.teardown, "a teardown statement", TEARDOWN_ENV
        return self

    def for_statements(self, limits: ServerLimits) -> BoundedConnection:
        """From now on, round trips get the statement limit (the default)."""
        self.limit, self.what, self.setting = limits.statement, "a statement", STATEMENT_ENV
        return self

    def wait(self, gen: Any, interval: float | None = None, timeout: float | None = None) -> Any:
        kw: dict[str, Any] = {"timeout": self.limit if timeout is None else timeout}
        if interval is not None:
            kw["interval"] = interval
        try:
            return super().wait(gen, **kw)
        except errors._WaitTimeout:  # psycopg's own: the generator did not finish in time
            # The answer may still come: the protocol state is unknown, so the connection ends.
            self.pgconn.finish()
            error = stalled(self.server, kw["timeout"], self.what, self.setting)
            raise PgStalledError(str(error)) from None


def connect(
    limits: ServerLimits, server: str, *args: Any, teardown: bool = False, **params: Any
) -> BoundedConnection:
    """A `BoundedConnection` with `args` and `params` (psycopg's: a conninfo string, keywords),
    opened within the connect limit, its round trips bounded by the statement limit (the
    teardown limit with `teardown`); `server` names it in errors."""
    params.setdefault("connect_timeout", max(1, round(limits.connect)))
    conn = BoundedConnection.connect(*args, **params)
    conn.limit = limits.statement
    conn.server = server
    return conn.for_teardown(limits) if teardown else conn
