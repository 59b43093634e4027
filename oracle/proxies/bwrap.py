"""Filesystem and process isolation with bubblewrap, without a container engine.

The agent sees the host's root filesystem read-only, a private ``/tmp``, and, writable, only
the sandbox's agent folder (task roots, SQLite files). Everything the oracle keeps — the
sandbox's own files, templates, archives, the recorder's confdir and log — is covered by an
empty tmpfs, so the agent can neither read nor write it; single files it must read (the
prompt, the recorder's CA certificate) are bound back read-only. It runs in its own PID, IPC
and UTS namespaces with every capability dropped, in a new session, and dies with its parent;
when its first process exits, the kernel ends every process left in its PID namespace.

The network is not this module's business: `oracle.proxies.jail` runs bubblewrap inside a
prepared network namespace.

>>> policy = BwrapPolicy(writable=(Path("/tmp/s/agent"),), hidden=(Path("/srv/runs"),))
>>> bwrap_argv(policy, ["sh", "-c", "true"])[:3]
['bwrap', '--ro-bind', '/']
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class BwrapMissingError(RuntimeError):
    """bubblewrap is not installed."""


@dataclass(frozen=True)
class BwrapPolicy:
    """What the agent may see and touch.

    - ``writable``: folders bound read-write (the sandbox's agent folder);
    - ``readable``: files or folders bound read-only on top of hidden ones (the prompt file,
      the CA certificate);
    - ``hidden``: folders covered by an empty tmpfs (the oracle's own files). ``/tmp``,
      ``/var/tmp`` and ``/run`` (the host's service sockets) are always private.
    - ``workdir``: where the command starts.
    """

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    workdir: Path | None = None
    extra: tuple[str, ...] = field(default=())


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise BwrapMissingError(
            "bubblewrap (`bwrap`) is not installed: `make` installs it on Debian "
            "(apt-get install bubblewrap), or run the agent with isolation='none'"
        )
    return path


def _under(path: Path, folders: Sequence[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def bwrap_argv(policy: BwrapPolicy, command: Sequence[str]) -> list[str]:
    """The bubblewrap command line that runs `command` under `policy`."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # /run holds the host's service sockets (PostgreSQL, MariaDB, D-Bus, a Docker engine): a
    # read-only mount does not stop connect() on a socket file, so it is replaced, not kept.
    private = [Path("/tmp"), Path("/var/tmp"), Path("/run")]
    for path in private:
        argv += ["--tmpfs", str(path)]
    sealed: list[Path] = []
    for path in sorted({p.resolve() for p in policy.hidden}, key=lambda p: len(p.parts)):
        if _under(path, private) or not path.exists():
            continue
        argv += ["--tmpfs", str(path)]
        private.append(path)
        sealed.append(path)
    for path in policy.readable:
        p = path.resolve()
        if p.exists():
            argv += ["--ro-bind", str(p), str(p)]
    for path in policy.writable:
        p = path.resolve()
        argv += ["--bind", str(p), str(p)]
    # Empty and read-only once the binds beneath them are in place: neither the oracle's
    # files nor a place to pretend to write them.
    for path in sealed:
        argv += ["--remount-ro", str(path)]
    argv += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    if policy.workdir is not None:
        argv += ["--chdir", str(policy.workdir.resolve())]
    argv += list(policy.extra)
    argv += ["--", *command]
    return argv
