"""Servers that a task's sinks need, and whether they can be reached.

A sink spec that talks to a server (PostgreSQL, MariaDB, Redis, RabbitMQ) says so with a
``services()`` method returning `Service` objects. The CLI skips a task whose servers are down
with a message naming them and a row in its tables, instead of failing it; under
``ORACLE_REQUIRE_SERVICES=1`` (CI) a missing server is a failure instead::

    missing = unreachable(task)       # ["PostgreSQL at 127.0.0.1:5432 (connection refused)"]
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

REQUIRE_ENV = "ORACLE_REQUIRE_SERVICES"


@dataclass(frozen=True)
class Service:
    """A server a sink needs: ``Service("PostgreSQL", "127.0.0.1", 5432)``."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name} at {self.host}:{self.port}"

    def problem(self, timeout: float = 1.0) -> str | None:
        """None when a TCP connection opens, else why it did not."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout):
                return None
        except OSError as exc:
            return f"{self} is not reachable ({exc.strerror or exc})"


def services_of(specs: Iterable[Any]) -> list[Service]:
    """Every service the sink specs declare, without repeats, in order."""
    out: list[Service] = []
    for spec in specs:
        fn = getattr(spec, "services", None)
        for s in fn() if callable(fn) else ():
            if s not in out:
                out.append(s)
    return out


def unreachable(task: Any, timeout: float = 1.0) -> list[str]:
    """Why each server the task's sinks need cannot be reached (empty when all are up)."""
    problems = []
    for s in services_of(getattr(task, "sinks", ())):
        p = s.problem(timeout)
        if p is not None:
            problems.append(p)
    return problems


def required() -> bool:
    """Whether a missing server is a failure rather than a reason to skip (CI sets it)."""
    return os.environ.get(REQUIRE_ENV) == "1"
