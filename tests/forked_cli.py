"""The `oracle` command for tests, forked from an interpreter that has imported it already.

Each `oracle` a test starts as a real program pays about 0.4 s of CPU to import oracle and its
libraries before it does anything, and the suite starts over three hundred of them. Each test
process therefore starts one *CLI server* (`start`, from ``tests/conftest.py``): a fresh
interpreter, started from the same environment as the test process, that imports the CLI and
the modules a trial needs, then waits. `ORACLE` is the path of a small launcher, written for
this test process, that tests run in place of the console script, with the same arguments,
standard streams, working folder and environment. The launcher hands those to the server,
which forks a child that takes them over and runs `oracle.cli.app.main` as the console
script does, then exits as a Python process does (atexit handlers, threads joined, streams
flushed); the launcher relays the signals it gets to that child and exits as the child did,
by the same status or signal. Where the server cannot run the command as the console script
would (it is not running, the environment names other ``PYTHON…`` settings than the
server's, a thread runs in it), the launcher executes the console script instead.

What differs from the console script, and how the tests that depend on it are kept apart:

- the modules are imported already: a test of what a command imports, or of start-up, runs
  `REAL_ORACLE`;
- the command's pid is not the launcher's (the pid a test holds), its parent is the server,
  and it leads a process group of its own: a test that looks the command up by that pid (its
  descendants, the containers labelled with it), signals its process group, or kills it
  with SIGKILL and counts what it left runs `REAL_ORACLE`. (A launcher killed with SIGKILL,
  as at a `subprocess.run` timeout, has its command's process group killed by the server.)

``ORACLE_TEST_CLI=exec`` makes `ORACLE` the console script itself, for a run of the whole
suite without the server.
"""

from __future__ import annotations

import array
import contextlib
import gc
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

#: The console script the package installs (what a user runs).
REAL_ORACLE = str(Path(sys.executable).parent / "oracle")

#: Set to ``exec`` to run the console script itself wherever a test runs `ORACLE`.
MODE_ENV = "ORACLE_TEST_CLI"

#: The modules the server imports before its first fork: the CLI, what `oracle trial` of a
#: SQLite or folder task imports, and what loading the demo tasks (which most commands of the
#: tests name) and running them on the local servers import; the GitHub world's servers and
#: the rest each child imports as the console script does.
PRELOAD = (
    "oracle.cli.app",
    "oracle.cli.output",
    "oracle.cli.loading",
    "oracle.cli.running",
    "oracle.cli.render",
    "oracle.agents.spec",
    "oracle.authoring.loader",
    "oracle.sandbox.sandbox",
    "oracle.sinks.sql",
    "oracle.trial.loop",
    "oracle.evidence.archive",
    "oracle.scoring.pool",
    "oracle.fixtures.folder",
    "oracle.fixtures.mail",
    "oracle.fixtures.postgres",
    "oracle.fixtures.redis",
    "oracle.fixtures.egress",
    "oracle.fixtures.github",
    "oracle.sinks.sql_postgres",
    "oracle.sinks.redis",
    "oracle.sinks.mail",
    "oracle.proxies.egress_pool",
    "sqlalchemy",
    "psycopg",
    "redis",
)

_FOLDER = Path(tempfile.gettempdir()) / f"oracle-test-cli-{os.getpid()}"
_SOCKET = _FOLDER / "server.sock"

# The launcher: standard library only, no site (it starts in ~15 ms, not ~400).
_LAUNCHER = r"""#!{python} -IS
# Runs `oracle` in a child of the test process's CLI server (tests/forked_cli.py), or, where
# that cannot be, executes the console script.
import os, signal, socket, struct, sys
SERVER, REAL = {server!r}, {real!r}
def execute():
    os.execv(REAL, [REAL, *sys.argv[1:]])
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SERVER)
except OSError:
    execute()
items = [os.getcwdb(), str(len(sys.argv) - 1).encode(), *map(os.fsencode, sys.argv[1:])]
for k, v in os.environb.items():
    items += [k, v]
body = b"".join(struct.pack("!I", len(x)) + x for x in items)
socket.send_fds(s, [struct.pack("!I", len(body)) + body], [0, 1, 2])
def read(n):
    data = b""
    while len(data) < n:
        part = s.recv(n - len(data))
        if not part:
            return None
        data += part
    return data
head = read(8)
if head is None:
    sys.exit("oracle: the test CLI server closed the connection")
kind, pid = struct.unpack("!iI", head)
if kind == 1:  # the server asks for the console script
    s.close()
    execute()
group = os.getpgrp() == os.getpid()  # a session or group of its own: relay to the child's
def relay(sig, _):
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except ProcessLookupError:
        pass
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2, signal.SIGALRM, signal.SIGCONT, signal.SIGWINCH):
    signal.signal(sig, relay)
tail = read(4)
if tail is None:
    sys.exit("oracle: the test CLI server ended before the command")
status = struct.unpack("!i", tail)[0]
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
    os.kill(os.getpid(), -code)
os._exit(code)
"""

#: What a test runs as `oracle`.
ORACLE = REAL_ORACLE if os.environ.get(MODE_ENV) == "exec" else str(_FOLDER / "oracle")

_server: subprocess.Popen[bytes] | None = None


def start() -> None:
    """Start this test process's CLI server and write its launcher (at `ORACLE`)."""
    global _server
    if ORACLE == REAL_ORACLE or _server is not None:
        return
    _FOLDER.mkdir(mode=0o700, exist_ok=True)
    launcher = _FOLDER / "oracle"
    launcher.write_text(
        _LAUNCHER.format(python=sys.executable, server=str(_SOCKET), real=REAL_ORACLE)
    )
    launcher.chmod(0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        _SOCKET.unlink()
    listener.bind(str(_SOCKET))
    listener.listen(64)
    # Its standard input is a pipe from this process: at its end (this process gone), the
    # server kills what it still runs and exits.
    entry = f"from tests.forked_cli import serve, command\nif serve({listener.fileno()}): command()"
    _server = subprocess.Popen(
        [sys.executable, "-c", entry],
        pass_fds=[listener.fileno()],
        stdin=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    listener.close()


def stop() -> None:
    """End the server (and whatever it still runs) and remove the launcher."""
    global _server
    if _server is not None:
        assert _server.stdin is not None
        _server.stdin.close()
        # A child this process forked (not executed) holds the pipe's other end too, and the
        # server would see its end only once that child is gone: SIGTERM says it now.
        with contextlib.suppress(ProcessLookupError):
            _server.terminate()
        try:
            _server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _server.kill()
            _server.wait()
        _server = None
    for path in (_SOCKET, _FOLDER / "oracle"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    with contextlib.suppress(OSError):
        _FOLDER.rmdir()


def _python_settings(env: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {k: v for k, v in env.items() if k.startswith(b"PYTHON")}


def serve(fd: int) -> bool:
    """The server's loop (in its own interpreter, listening on `fd`): fork a child per
    launcher's request. True in a child, which then runs the command (`command`); False in
    the server once the test process is gone."""
    import importlib
    import threading

    for name in PRELOAD:
        importlib.import_module(name)
    # What is imported stays out of the children's collections: a collection touches every
    # object it tracks, which would copy each page of the server's memory into each child.
    gc.freeze()
    # Ctrl-C at a terminal reaches the test process, whose end ends this server (below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM (`stop`) ends it as the end of its standard input does: the signal's number is
    # written to a pipe the loop watches.
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.set_wakeup_fd(wake)
    listener = socket.socket(fileno=fd)
    own = _python_settings(dict(os.environb))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("accept", 0))
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, ("parent", 0))
    selector.register(woken, selectors.EVENT_READ, ("parent", 0))
    running: dict[int, tuple[socket.socket, int]] = {}  # pid → (connection, pidfd)

    def end(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    while True:
        for key, _ in selector.select():
            what, pid = key.data
            if what == "parent":  # the test process is gone or stops it: so is all it started
                for child in running:
                    end(child)
                for child in running:
                    os.waitpid(child, 0)
                return False
            if what == "accept":
                conn, _ = listener.accept()
                request = _receive(conn)
                if request is None:
                    conn.close()
                    continue
                cwd, argv, env, fds = request
                if _python_settings(env) != own or threading.active_count() != 1:
                    for f in fds:
                        os.close(f)
                    conn.sendall(struct.pack("!iI", 1, 0))
                    conn.close()
                    continue
                # Until the child has put SIGTERM back, one would wake this loop.
                signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
                child = os.fork()
                if child == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
                    os.close(woken)
                    os.close(wake)
                    selector.close()
                    listener.close()
                    conn.close()
                    for f in running.values():
                        f[0].close()
                        os.close(f[1])
                    _become(cwd, argv, env, fds)
                    return True
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
                for f in fds:
                    os.close(f)
                conn.sendall(struct.pack("!iI", 0, child))
                pidfd = os.pidfd_open(child)
                running[child] = (conn, pidfd)
                selector.register(pidfd, selectors.EVENT_READ, ("exited", child))
                selector.register(conn, selectors.EVENT_READ, ("launcher", child))
            elif what == "exited":
                conn, pidfd = running.pop(pid)
                _, status = os.waitpid(pid, 0)
                selector.unregister(pidfd)
                os.close(pidfd)
                if conn.fileno() != -1:
                    selector.unregister(conn)
                    with contextlib.suppress(OSError):
                        conn.sendall(struct.pack("!i", status))
                    conn.close()
            elif what == "launcher":  # it wrote nothing: it is gone, killed (a timeout)
                conn, _ = running[pid]
                selector.unregister(conn)
                conn.close()
                end(pid)


def command() -> None:
    """In a forked child: what the console script runs."""
    from oracle.cli.app import main

    sys.exit(main())


def _receive(
    conn: socket.socket,
) -> tuple[bytes, list[bytes], dict[bytes, bytes], list[int]] | None:
    """A launcher's request: working folder, arguments, environment, and its standard
    streams (three descriptors)."""
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(data) < 4 or len(fds) != 3:
        for f in fds:
            os.close(f)
        return None
    size = struct.unpack("!I", data[:4])[0]
    while len(data) < 4 + size:
        part = conn.recv(4 + size - len(data))
        if not part:
            for f in fds:
                os.close(f)
            return None
        data += part
    items, at = [], 4
    while at < len(data):
        (n,) = struct.unpack_from("!I", data, at)
        items.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    cwd, count, rest = items[0], int(items[1]), items[2:]
    argv, env = rest[:count], rest[count:]
    return cwd, argv, dict(zip(env[::2], env[1::2], strict=True)), list(fds)


def _become(cwd: bytes, argv: list[bytes], env: dict[bytes, bytes], fds: list[int]) -> None:
    """In the forked child: take over the launcher's streams (the interpreter's own
    `sys.stdin`, `sys.stdout` and `sys.stderr` then read and write them), folder, environment
    and arguments, and look like the console script started fresh."""
    import types

    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, f in enumerate(fds):
        os.dup2(f, target)
        os.close(f)
    os.chdir(cwd)
    os.environb.clear()
    os.environb.update(env)
    tempfile.tempdir = None  # computed again from TMPDIR
    sys.argv = [REAL_ORACLE, *(os.fsdecode(a) for a in argv)]
    sys.path[0] = os.path.dirname(REAL_ORACLE)
    main = types.ModuleType("__main__")
    main.__file__ = REAL_ORACLE
    sys.modules["__main__"] = main
