"""Built-in sinks, one module per kind: `sql` (SQLAlchemy) and `files` (a task root)."""

from oracle.sinks.files import FileDiff, FolderSink, FolderState
from oracle.sinks.sql import SqlDiff, SqlSink, SqlState

__all__ = ["FileDiff", "FolderSink", "FolderState", "SqlDiff", "SqlSink", "SqlState"]
