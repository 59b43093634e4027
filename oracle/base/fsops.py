"""File-system operations the sandbox and the fixtures share."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import queue
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """One holder at a time on this host (an exclusive lock on a file named `name` in the
    temporary folder): two runs that build the same image together build it once."""
    with open(Path(tempfile.gettempdir()) / name, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def user_cache_dir() -> Path:
    """The user's cache folder for oracle: ``$XDG_CACHE_HOME/oracle`` (``~/.cache/oracle``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oracle"


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` by `data` in one rename (a reader never sees half a file); its folder is
    made if need be, and nothing is left behind where it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_tree(path: Path) -> None:
    """Remove `path` whatever its permission bits say (an agent may have chmod-ed things);
    a link is removed itself, never followed."""

    def retry(func: Any, p: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        parent = os.path.dirname(p)
        os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, stat.S_IRWXU)
        func(p)

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onexc=retry)


class _Discarder:
    """One background thread that removes the trees `discard_tree` moved aside, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.todo: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.names = itertools.count(1)

    def put(self, path: Path) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="oracle-discard", daemon=True)
                self.thread.start()
        self.todo.put(path)

    def _run(self) -> None:
        while (path := self.todo.get()) is not None:
            with contextlib.suppress(OSError):
                remove_tree(path)

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until every tree moved aside so far is gone (at exit)."""
        thread = self.thread
        if thread is not None and thread.is_alive():
            self.todo.put(None)
            thread.join(timeout)


_DISCARDER = _Discarder()


@atexit.register
def _drain() -> None:
    _DISCARDER.drain()


# A forked child has none of its parent's threads: it starts a discarder of its own if it
# needs one, and leaves what its parent moved aside to the parent.
os.register_at_fork(after_in_child=lambda: globals().update(_DISCARDER=_Discarder()))


def discard_tree(path: Path) -> None:
    """Remove `path` as `remove_tree` does, but off the caller's time: it is renamed aside at
    once (``.<name>.discarded-<pid>-<n>`` beside it, so its name is free again and nothing
    reaches it by its path), then removed by a background thread; the process waits for the
    rest at exit. Where it cannot be renamed it is removed here and now."""
    if not path.exists() and not path.is_symlink():
        return
    aside = path.with_name(f".{path.name}.discarded-{os.getpid()}-{next(_DISCARDER.names)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    except OSError:
        remove_tree(path)
        return
    _DISCARDER.put(aside)
