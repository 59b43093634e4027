"""Built-in sinks, one module per kind: `sql` (SQLAlchemy: SQLite, PostgreSQL, MariaDB),
`files` (a task root), `egress` (the egress recorder's log), `mail` (the SMTP capture),
`inbox` (Maildir and mbox), `reply` (what the agent published), `redis` and `amqp`
(RabbitMQ)."""

from oracle.sinks.amqp import AmqpDiff, AmqpSink, AmqpState
from oracle.sinks.files import FileDiff, FolderSink, FolderState
from oracle.sinks.redis import RedisDiff, RedisSink, RedisState
from oracle.sinks.sql import SqlDiff, SqlSink, SqlState

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
