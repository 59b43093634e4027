"""Which program a command agent is: its file's sha256 and its own answer to ``--version``.

Recorded in the invocation record (`oracle.evidence.invocation.Program`), so that a reducer holding
parity can refuse cells of one harness made by different agent programs. The version is asked
the way nothing of the host can leak or change: the program file alone (never a shell), with
``--version`` as its only argument, under bubblewrap with no network and the oracle's folders
hidden, stdin closed, a minimal environment, at most 4 KiB of output kept, and one second to
answer before its whole process group is killed. A program that does not answer in time, exits
with an error, or cannot be run that way gets no version and a note saying why.

Both answers are kept for the life of the process, keyed by the file's identity (device,
inode, size, modification and change times): a changed file is digested and asked again.

Example::

    identify(Path("/usr/bin/python3"), hidden=[Path("/srv/runs")])
    # Program(path='/usr/bin/python3.12', sha256='…', version='Python 3.12.1', note='')
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from oracle.evidence.invocation import Program
from oracle.isolation.allowlist import program_files
from oracle.isolation.bwrap import (
    BwrapMissingError,
    BwrapPolicy,
    bwrap_argv,
    bwrap_path,
    make_hidden_folders,
)

#: How long the program has to answer ``--version``, in seconds.
VERSION_TIMEOUT = 1.0
#: How much of its output is kept.
VERSION_OUTPUT = 4096
#: How much of the answer's first line is recorded.
VERSION_CHARS = 200

_Identity = tuple[int, int, int, int, int]
_DIGESTS: dict[tuple[str, _Identity], str] = {}
_VERSIONS: dict[tuple[str, _Identity], tuple[str | None, str]] = {}


def identify(exe: Path, hidden: Sequence[Path] = (), readable: Sequence[Path] = ()) -> Program:
    """The program file `exe` (links resolved): its sha256 and its answer to ``--version``,
    asked with the folders `hidden` hidden from it and what it needs to run (`readable`: its
    interpreter, virtual environment… — `oracle.isolation.allowlist.program_files`) shown."""
    path = exe.resolve()
    try:
        st = path.stat()
    except OSError as exc:
        return Program(path=str(path), sha256=None, version=None, note=f"cannot be read: {exc}")
    key = (str(path), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    if key not in _DIGESTS:
        try:
            _DIGESTS[key] = _sha256(path)
        except OSError as exc:
            return Program(path=str(path), sha256=None, version=None, note=f"unreadable: {exc}")
    if key not in _VERSIONS:
        _VERSIONS[key] = ask_version(path, hidden)
    version, note = _VERSIONS[key]
    return Program(path=str(path), sha256=_DIGESTS[key], version=version, note=note)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def ask_version(exe: Path, hidden: Sequence[Path] = ()) -> tuple[str | None, str]:
    """``(version, note)``: the first line of what `exe` answers to ``--version`` (stdout,
    else stderr) when it exits 0 within `VERSION_TIMEOUT`, or None and why not."""
    try:
        bwrap_path()
    except BwrapMissingError:
        return None, "not asked: bubblewrap is missing, so it cannot be run without a network"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": "/tmp"}
    # The program file itself is bound back, wherever it lies (a private /tmp, a hidden
    # folder), and what it needs to run: its interpreter, virtual environment, import path.
    needs = program_files(exe, [str(exe), "--version"], env, hidden=tuple(hidden))
    policy = BwrapPolicy(
        readable=(exe, *needs.readable),
        hidden=tuple(hidden),
        workdir=Path("/"),
        extra=("--unshare-net",),
    )
    try:
        make_hidden_folders(policy)
    except OSError as exc:
        return None, f"not asked: a folder to hide cannot be made: {exc}"
    try:
        proc = subprocess.Popen(
            bwrap_argv(policy, [str(exe), "--version"]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
        )
    except OSError as exc:
        return None, f"--version could not be run: {exc}"
    out, err, finished = _capture(proc, VERSION_TIMEOUT)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    if not finished:
        return None, f"no answer to --version within {VERSION_TIMEOUT:g} s"
    if code != 0:
        return None, f"--version exited with status {code}"
    for stream in (out, err):
        lines = [x.strip() for x in stream.decode("utf-8", "replace").splitlines() if x.strip()]
        if lines:
            return lines[0][:VERSION_CHARS], ""
    return None, "--version printed nothing"


def _capture(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes, bool]:
    """Up to `VERSION_OUTPUT` bytes of each stream until both end or `timeout` passes;
    whether they ended in time."""
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    open_fds = set(kept)
    deadline = time.monotonic() + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(kept[proc.stdout.fileno()]), bytes(kept[proc.stderr.fileno()]), False
            ready, _, _ = select.select(list(open_fds), [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                room = VERSION_OUTPUT - len(kept[fd])
                if room > 0:
                    kept[fd] += chunk[:room]
        return bytes(kept[proc.stdout.fileno()]), bytes(kept[proc.stderr.fileno()]), True
    finally:
        proc.stdout.close()
        proc.stderr.close()
