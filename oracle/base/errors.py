"""Errors that more than one layer raises or catches.

`UsageError` is raised where something the user named cannot be used as named (an unknown
agent, an option out of range); the CLI prints it and exits 2, and the matrix reports it
against the file and line that named the thing.
"""

from __future__ import annotations


class UsageError(Exception):
    """Something the user named cannot be used as named. The message says what was given
    and what to give instead, e.g. ``unknown agent 'x': use one of careful, obedient, …``."""
