"""Built-in sinks, one module per kind: `sql` (SQLAlchemy), `files` (a task root), `egress`
(the egress recorder's log), `mail` (the SMTP capture), `inbox` (Maildir and mbox) and
`reply` (what the agent published)."""

from oracle.sinks.files import FileDiff, FolderSink, FolderState
from oracle.sinks.sql import SqlDiff, SqlSink, SqlState

__all__ = ["FileDiff", "FolderSink", "FolderState", "SqlDiff", "SqlSink", "SqlState"]
