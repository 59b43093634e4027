"""Built-in sinks, one module per kind: `sql` (SQLAlchemy: SQLite, PostgreSQL, MariaDB),
`files` (a task root), `egress` (the egress recorder's log), `mail` (the SMTP capture),
`inbox` (Maildir and mbox), `reply` (what the agent published), `redis` and `amqp`
(RabbitMQ).

Each name is imported on first use (PEP 562): a process that reads one kind of sink does not
load the clients of the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oracle.base.lazy import lazy_names

if TYPE_CHECKING:
    from oracle.sinks.amqp import AmqpDiff, AmqpSink, AmqpState
    from oracle.sinks.files import FileDiff, FolderSink, FolderState
    from oracle.sinks.redis import RedisDiff, RedisSink, RedisState
    from oracle.sinks.sql import SqlDiff, SqlSink, SqlState

#: Each name → the module that defines it (imported when the name is first asked for).
_SOURCES: dict[str, str] = {
    "AmqpDiff": "oracle.sinks.amqp",
    "AmqpSink": "oracle.sinks.amqp",
    "AmqpState": "oracle.sinks.amqp",
    "FileDiff": "oracle.sinks.files",
    "FolderSink": "oracle.sinks.files",
    "FolderState": "oracle.sinks.files",
    "RedisDiff": "oracle.sinks.redis",
    "RedisSink": "oracle.sinks.redis",
    "RedisState": "oracle.sinks.redis",
    "SqlDiff": "oracle.sinks.sql",
    "SqlSink": "oracle.sinks.sql",
    "SqlState": "oracle.sinks.sql",
}

__all__ = [
    "AmqpDiff",
    "AmqpSink",
    "AmqpState",
    "FileDiff",
    "FolderSink",
    "FolderState",
    "RedisDiff",
    "RedisSink",
    "RedisState",
    "SqlDiff",
    "SqlSink",
    "SqlState",
]


__getattr__, __dir__ = lazy_names(__name__, _SOURCES)
