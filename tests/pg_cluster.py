"""A private PostgreSQL cluster for tests that plant what would trouble anyone else's runs.

Some tests leave a server in a state no other run should meet (a stale database left invalid
by an interrupted drop, stale objects for sweeps to race over). The shared server on 5432 is
used by other people's tests at the same time, so those tests get a cluster of their own:
``initdb`` into a temporary folder (as the ``postgres`` user: PostgreSQL refuses to run as
root), started on a free loopback port with ``trust`` authentication, stopped and removed
afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_tools


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _missing(what: str) -> None:
    message = f"needs {what}"
    if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_cluster() -> Iterator[int]:
    """A running cluster of its own; yields its port (user ``postgres``, no password)."""
    bindir = _bindir()
    if bindir is None:
        require_tools("initdb")  # skips (or fails under ORACLE_REQUIRE_SERVICES=1), naming it
    require_tools("runuser", root=True)
    assert bindir is not None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        _missing("a 'postgres' user to run a private PostgreSQL cluster as")
        raise
    top = Path(tempfile.mkdtemp(prefix="oracle-test-pg-"))
    os.chmod(top, 0o755)
    data, run = top / "data", top / "run"
    for d in (data, run):
        d.mkdir()
        os.chown(d, user.pw_uid, user.pw_gid)

    def as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def check(done: subprocess.CompletedProcess[str]) -> None:
        assert done.returncode == 0, f"{done.args[3]} failed: {done.stdout}{done.stderr}"

    def start() -> int:
        # A free port can be taken by another process (a test in another worker) before the
        # server binds it: then the server does not start, and another port is tried.
        for _ in range(5):
            port = _free_port()
            log = run / "log"
            log.unlink(missing_ok=True)
            options = f"-p {port} -k {run} -c listen_addresses=127.0.0.1 -c fsync=off"
            done = as_postgres(
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-w",
                "-l",
                str(log),
                "start",
            )
            if done.returncode == 0:
                return port
            said = log.read_text(errors="replace") if log.exists() else ""
            if "could not bind" not in said and "already in use" not in said:
                break
        raise AssertionError(f"pg_ctl start failed: {done.stdout}{done.stderr}{said}")

    try:
        check(
            as_postgres(
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            )
        )
        port = start()
        try:
            yield port
        finally:
            check(
                as_postgres(
                    str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"
                )
            )
    finally:
        shutil.rmtree(top, ignore_errors=True)
