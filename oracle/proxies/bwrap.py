"""Filesystem and process isolation with bubblewrap, without a container engine.

The agent sees the host's root filesystem read-only, a private ``/tmp``, and, writable, only
the sandbox's agent folder (task roots, SQLite files). Everything the oracle keeps — the
sandbox's own files, templates, archives, the recorder's confdir and log — is covered by an
empty, read-only folder (a watched decoy, `oracle.proxies.decoy`, or a tmpfs), so the agent
can neither read nor write it; single files it must read (the prompt, the recorder's CA
certificate) are bound back read-only. It runs in its own PID, IPC
and UTS namespaces with every capability dropped, in a new session, and dies with its parent;
when its first process exits, the kernel ends every process left in its PID namespace.

The network is not this module's business: `oracle.proxies.jail` runs bubblewrap inside a
prepared network namespace.

>>> policy = BwrapPolicy(writable=(Path("/tmp/s/agent"),), hidden=(Path("/srv/runs"),))
>>> bwrap_argv(policy, ["sh", "-c", "true"])[:3]
['bwrap', '--ro-bind', '/']
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
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
    - ``hidden``: folders covered by an empty, read-only folder (the oracle's own files): the
      one `decoys` names for it (`oracle.proxies.decoy`), else a tmpfs. They must exist when
      the sandbox starts (`make_hidden_folders`). ``/tmp``, ``/var/tmp`` and ``/run`` (the
      host's service sockets) are always private.
    - ``workdir``: where the command starts.
    """

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    workdir: Path | None = None
    extra: tuple[str, ...] = field(default=())
    decoys: Mapping[Path, Path] = field(default_factory=dict)


#: Folders every sandbox replaces with an empty, private tmpfs.
ALWAYS_PRIVATE = (Path("/tmp"), Path("/var/tmp"), Path("/run"))


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


def _binds(policy: BwrapPolicy) -> list[Path]:
    return [b.resolve() for b in (*policy.readable, *policy.writable)]


def _deepest(path: Path, binds: Sequence[Path], covers: Sequence[Path]) -> Path | None:
    """The cover that hides `path`, or None where a bind (or nothing) shows it: mounts are
    made shallowest first, so the deepest folder holding `path` decides (at one depth the
    cover, mounted after the bind)."""
    rules = [(len(f.parts), 1, f) for f in covers if _under(path, [f])]
    rules += [(len(b.parts), 0, b) for b in binds if _under(path, [b])]
    if not rules:
        return None
    _, is_cover, folder = max(rules, key=lambda r: (r[0], r[1]))
    return folder if is_cover else None


def sealed_folders(policy: BwrapPolicy) -> list[Path]:
    """The hidden folders that get a tmpfs of their own, outermost first: those the agent
    would otherwise see — not already inside ``/tmp``, ``/var/tmp``, ``/run`` or another
    hidden folder, or inside one but under a folder bound back (a checkout under ``/tmp``
    bound back read-only, with its run folder hidden again)."""
    binds = _binds(policy)
    covers = list(ALWAYS_PRIVATE)
    sealed: list[Path] = []
    for path in sorted({p.resolve() for p in policy.hidden}, key=lambda p: (len(p.parts), p)):
        if _deepest(path, binds, covers) is None:
            covers.append(path)
            sealed.append(path)
    return sealed


def make_hidden_folders(policy: BwrapPolicy) -> None:
    """Create the hidden folders that do not exist yet (mode 0700), so that each is covered
    from the start: a folder the oracle creates while the agent runs (the archive folder of
    a first trial) would otherwise appear in the agent's view, readable. Raises `OSError`."""
    for path in sealed_folders(policy):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)


def hidden_by(policy: BwrapPolicy, path: Path) -> Path | None:
    """The folder that hides `path` inside the sandbox (``/tmp``, a hidden folder), or None
    where the agent can see it: outside them, or bound back (readable, writable) and not
    hidden again beneath. Both the path as written and where its links lead must be
    visible."""
    binds = _binds(policy)
    covers = [*ALWAYS_PRIVATE, *sealed_folders(policy)]
    for p in (Path(os.path.abspath(path)), path.resolve()):
        cover = _deepest(p, binds, covers)
        if cover is not None:
            return cover
    return None


def bwrap_argv(
    policy: BwrapPolicy, command: Sequence[str], *, status_fd: int | None = None
) -> list[str]:
    """The bubblewrap command line that runs `command` under `policy`.

    Mounts are made shallowest first, so the most specific rule wins: a file bound back
    inside a hidden folder is seen; a hidden folder inside one bound back is not.

    With `status_fd`, bubblewrap writes JSON documents to it: ``{"child-pid": …}`` once the
    sandbox's first process exists, and ``{"exit-code": …}`` only if `command` was executed
    (not when setting the sandbox up, or executing the program, failed)."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    sealed = sealed_folders(policy)
    decoys = {k.resolve(): v for k, v in policy.decoys.items()}
    # (depth, order at one depth, arguments): a bind before a cover of the same folder.
    # /run holds the host's service sockets (PostgreSQL, MariaDB, D-Bus, a Docker engine): a
    # read-only mount does not stop connect() on a socket file, so it is replaced, not kept.
    mounts: list[tuple[int, int, list[str]]] = [
        (len(p.parts), 2, ["--tmpfs", str(p)]) for p in ALWAYS_PRIVATE
    ]
    for path in sealed:
        how = ["--bind", str(decoys[path])] if path in decoys else ["--tmpfs"]
        mounts.append((len(path.parts), 2, [*how, str(path)]))
    for path in policy.readable:
        p = path.resolve()
        if p.exists():
            mounts.append((len(p.parts), 0, ["--ro-bind", str(p), str(p)]))
    for path in policy.writable:
        p = path.resolve()
        mounts.append((len(p.parts), 1, ["--bind", str(p), str(p)]))
    for _, _, args in sorted(mounts, key=lambda m: (m[0], m[1])):
        argv += args
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
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    if policy.workdir is not None:
        argv += ["--chdir", str(policy.workdir.resolve())]
    argv += list(policy.extra)
    argv += ["--", *command]
    return argv
