"""Shared test helpers.

Services: a test that needs a real server on loopback calls ``require_service(name, port)``.
When the server is down the test is skipped with a message naming it, except under
``ORACLE_REQUIRE_SERVICES=1`` (set by CI), where it fails.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from oracle.agent import CallableAgent
from oracle.sandbox import SandboxView

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "tasks" / "demo"


def require_service(name: str, port: int, host: str = "127.0.0.1") -> None:
    """Skip (or, under ORACLE_REQUIRE_SERVICES=1, fail) when `name` is not listening."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return
    except OSError as exc:
        message = f"{name} is not reachable on {host}:{port} ({exc})"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


def require_tools(*tools: str, root: bool = False) -> None:
    """Skip (or, under ORACLE_REQUIRE_SERVICES=1, fail) when a program or root is missing."""
    import shutil

    missing = [t for t in tools if shutil.which(t) is None]
    if root and os.geteuid() != 0:
        missing.append("root")
    if missing:
        message = f"needs {', '.join(missing)} (`make system-deps` installs the programs)"
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


def agent(fn: Callable[[SandboxView], object], name: str | None = None) -> CallableAgent:
    return CallableAgent(fn, name=name or getattr(fn, "__name__", "agent"))


@pytest.fixture
def write_task(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a task file (dedented source) into a fresh folder and return its path."""

    def write(source: str, name: str = "task_sample.py") -> Path:
        path = tmp_path / "tasks" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write


def make_db(path: Path, sql: str) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path
