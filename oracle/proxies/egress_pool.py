"""Warm egress recorder processes, kept per oracle process.

Starting mitmproxy costs most of a second, and a sandbox that declares an egress sink starts a
recorder. So a recorder process, once started, is *leased* to one `EgressRecorder` at a time
and, when that recorder stops, returned here instead of stopped. The next recorder sends it
a whole new configuration (policy, log, spill folder, body limit, upstream trust and a new
configuration folder, hence a new CA) and gets a port no earlier lease of that process used;
connections opened under an earlier lease are closed and anything they send is recorded
nowhere (see `egress_child`).

Rules that keep leases apart:

- only recorders on an ephemeral port are pooled (a fixed port is a fresh process, stopped
  at the end as before);
- a process that died, did not answer, or failed a lease is stopped, never returned;
- at most `MAX_IDLE` processes wait here; idle ones are stopped when the interpreter exits,
  and a process whose parent died sees its standard input close and exits by itself;
- a forked child of the oracle forgets the pool it inherited (the processes are its parent's).

``ORACLE_EGRESS_POOL=0`` turns pooling off: every recorder starts and stops its own process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["MAX_IDLE", "POOL", "POOL_ENV", "RecorderPool", "RecorderProcess", "pooling_enabled"]

POOL_ENV = "ORACLE_EGRESS_POOL"
#: Idle recorder processes kept at most; more are stopped when released.
MAX_IDLE = 2
#: The folder that holds the oracle package (this file is oracle/proxies/egress_pool.py), put
#: on the recorder's PYTHONPATH so that its child finds the addon.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent


def pooling_enabled() -> bool:
    """Whether recorders reuse warm processes (unless ``ORACLE_EGRESS_POOL=0``)."""
    return os.environ.get(POOL_ENV, "1").strip() != "0"


class ProcessError(RuntimeError):
    """A recorder process failed or did not answer; `EgressRecorder` names the sink."""


class RecorderProcess:
    """One mitmproxy child (`egress_child`) and the JSON lines it answers on its stdout.

    Its standard error goes to a private folder of its own that lives as long as the process
    (a lease's folder is removed at every release)."""

    def __init__(self, popen: subprocess.Popen[bytes], folder: Path, stderr: IO[bytes]) -> None:
        self.popen = popen
        self.folder = folder
        self._stderr = stderr
        self._buffer = b""
        self.owner = os.getpid()

    @classmethod
    def spawn(cls, config_file: Path, timeout: float) -> tuple[RecorderProcess, int]:
        """Start a child on `config_file` and wait until it listens; return it and its port."""
        folder = Path(tempfile.mkdtemp(prefix="oracle-egress-proc-"))
        stderr = open(folder / "stderr.log", "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        root = str(PACKAGE_PARENT)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "oracle.proxies.egress_child", str(config_file)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            stderr.close()
            shutil.rmtree(folder, ignore_errors=True)
            raise ProcessError(f"could not run {sys.executable}: {exc}") from exc
        proc = cls(popen, folder, stderr)
        try:
            return proc, proc._port(proc.answer(timeout), "could not start")
        except BaseException:
            proc.stop()
            raise

    # -- talking to it ----------------------------------------------------------------------

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.popen.stdin
        if stdin is None:
            raise ProcessError("its standard input is closed")
        try:
            stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            stdin.flush()
        except (OSError, ValueError) as exc:
            raise ProcessError(f"cannot be sent a command: {exc}") from exc

    def answer(self, timeout: float) -> dict[str, Any]:
        """The next JSON line the child prints, within `timeout` seconds."""
        stdout = self.popen.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProcessError(f"did not listen within {timeout:.0f} s")
                if not sel.select(left):
                    continue
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    code = self.popen.wait(timeout=5)
                    raise ProcessError(f"exited with code {code} before listening: {self.tail()}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        text = line.decode("utf-8", "replace")
        try:
            message = json.loads(text)
        except ValueError:
            raise ProcessError(f"said something unexpected: {text!r}") from None
        if not isinstance(message, dict):
            raise ProcessError(f"said something unexpected: {text!r}")
        return message

    @staticmethod
    def _port(message: dict[str, Any], what: str) -> int:
        if "port" not in message:
            raise ProcessError(f"{what}: {message.get('error', message)}")
        return int(message["port"])

    def lease(self, config: dict[str, Any], timeout: float) -> int:
        """Serve a new lease with `config`; return its port (a new one)."""
        self.send({"op": "lease", "config": config})
        return self._port(self.answer(timeout), "could not take a new configuration")

    def release(self, timeout: float = 5.0) -> bool:
        """End the current lease; whether the child confirmed it and is still running."""
        try:
            self.send({"op": "release"})
            ok = self.answer(timeout).get("released") is True
        except ProcessError:
            return False
        return ok and self.alive()

    def tail(self, limit: int = 2000) -> str:
        try:
            text = (self.folder / "stderr.log").read_text("utf-8", "replace").strip()
        except OSError:
            return "(no error output)"
        return text[-limit:] or "(no error output)"

    def stop(self) -> None:
        """Stop the child (end of input, SIGTERM, then SIGKILL) and remove its folder."""
        proc = self.popen
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        self._stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def forget(self) -> None:
        """In a forked child: close this process's copies of the pipes, touch nothing else
        (the recorder belongs to the parent, which still talks to it)."""
        for pipe in (self.popen.stdin, self.popen.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()


class RecorderPool:
    """Idle recorder processes of this oracle process (see the module docstring)."""

    def __init__(self, max_idle: int = MAX_IDLE) -> None:
        self.max_idle = max_idle
        self._idle: list[RecorderProcess] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._idle)

    def take(self) -> RecorderProcess | None:
        """An idle, running process of this oracle process, or None."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                proc = self._idle.pop()
            if proc.owner == os.getpid() and proc.alive():
                return proc
            proc.stop()

    def give_back(self, proc: RecorderProcess) -> None:
        """Keep a released process for the next lease, or stop it (dead, foreign or extra)."""
        if proc.owner == os.getpid() and proc.alive():
            with self._lock:
                if len(self._idle) < self.max_idle:
                    self._idle.append(proc)
                    return
        proc.stop()

    def close(self) -> None:
        """Stop every idle process."""
        with self._lock:
            idle, self._idle = self._idle, []
        for proc in idle:
            if proc.owner == os.getpid():
                proc.stop()

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        idle, self._idle = self._idle, []
        for proc in idle:
            proc.forget()


#: The pool of this oracle process.
POOL = RecorderPool()
atexit.register(POOL.close)
os.register_at_fork(after_in_child=POOL._after_fork)
