"""Filesystem and process isolation with bubblewrap, without a container engine.

The agent's filesystem is an allow-list, never the host's root made read-only (a read-only
mount does not stop a ``connect()`` on a unix socket file): its root is an empty folder it
cannot write, into which go, read-only, the system's folders (`system_folders`: ``/usr``,
``/etc``, ``/opt``, ``/sys`` and the ``/bin``, ``/sbin``, ``/lib*`` links of a merged ``/usr``)
and the files and folders of `BwrapPolicy.readable` (what the agent program needs to run,
`oracle.isolation.allowlist`, the prompt, the recorder's CA certificate); writable, only the
sandbox's agent folder (task roots, SQLite files); fresh ``/dev`` and ``/proc``; private, empty
``/tmp``, ``/var/tmp`` and ``/run``. Everything the oracle keeps — the sandbox's own files,
templates, archives, the recorder's confdir and log — is covered by an empty, read-only folder
(a watched decoy, `oracle.proxies.decoy`, or a tmpfs), also where it lies inside a folder bound
back. It runs in its own PID, IPC and UTS namespaces with every capability dropped, in a new
session, and dies with its parent; when its first process exits, the kernel ends every process
left in its PID namespace.

The network is not this module's business: `oracle.proxies.jail` runs bubblewrap inside a
prepared network namespace.

>>> policy = BwrapPolicy(writable=(Path("/tmp/s/agent"),), system=(Path("/usr"),))
>>> bwrap_argv(policy, ["sh", "-c", "true"])[:7]
['bwrap', '--dev', '/dev', '--proc', '/proc', '--ro-bind', '/usr']
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

#: Folders every sandbox replaces with an empty, private tmpfs. ``/run`` holds the host's
#: service sockets (PostgreSQL, MariaDB, D-Bus, a Docker engine).
ALWAYS_PRIVATE = (Path("/tmp"), Path("/var/tmp"), Path("/run"))

#: The system's program and library folders, shown read-only where the host has them.
SYSTEM_FOLDERS = (
    Path("/usr"),
    Path("/bin"),
    Path("/sbin"),
    Path("/lib"),
    Path("/lib32"),
    Path("/lib64"),
    Path("/libx32"),
    Path("/etc"),
    Path("/opt"),
    Path("/sys"),
)

#: Made fresh by bubblewrap in every sandbox.
FRESH = (Path("/dev"), Path("/proc"))


def system_folders() -> tuple[Path, ...]:
    """The folders of `SYSTEM_FOLDERS` this host has (a link such as ``/bin -> usr/bin`` is
    kept as the link it is)."""
    return tuple(p for p in SYSTEM_FOLDERS if os.path.lexists(p))


class BwrapMissingError(RuntimeError):
    """bubblewrap is not installed."""


@dataclass(frozen=True)
class BwrapPolicy:
    """What the agent may see and touch.

    - ``system``: the system's folders, shown read-only (`system_folders`);
    - ``writable``: folders bound read-write (the sandbox's agent folder);
    - ``readable``: files or folders bound read-only: what the agent program needs (its
      folder, interpreter, virtual environment, `oracle.isolation.allowlist`), the prompt file,
      the CA certificate — also inside a hidden folder, where the deeper rule wins;
    - ``hidden``: folders covered by an empty, read-only folder (the oracle's own files): the
      one `decoys` names for it (`oracle.proxies.decoy`), else a tmpfs. They must exist when
      the sandbox starts (`make_hidden_folders`). ``/tmp``, ``/var/tmp`` and ``/run`` are
      always private.
    - ``workdir``: where the command starts;
    - ``private_size``: the size of each private tmpfs (``/tmp``, ``/var/tmp``, ``/run``) in
      bytes (None: as large as the host lets a tmpfs be).

    Each folder bound is shown where it is written and where its links lead.
    """

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    workdir: Path | None = None
    extra: tuple[str, ...] = field(default=())
    decoys: Mapping[Path, Path] = field(default_factory=dict)
    system: tuple[Path, ...] = field(default_factory=system_folders)
    private_size: int | None = None


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise BwrapMissingError(
            "bubblewrap (`bwrap`) is not installed: `make` installs it on Debian "
            "(apt-get install bubblewrap), or run the agent with isolation='none'"
        )
    return path


def within(path: Path, folders: Sequence[Path]) -> bool:
    """`path` is one of `folders` or inside one, by name (pathlib's ``parents`` is slow, and
    this runs for every rule of every sandbox)."""
    text = str(path)
    return any(text == str(f) or text.startswith(str(f).rstrip("/") + "/") for f in folders)


def _places(path: Path) -> list[Path]:
    """Where a bound path shows inside the sandbox: as written and where its links lead."""
    written, real = Path(os.path.abspath(path)), path.resolve()
    return [written] if written == real else [written, real]


@lru_cache(maxsize=8)
def _system_places(system: tuple[Path, ...]) -> tuple[Path, ...]:
    """The system's folders as written and where their links lead, with /dev and /proc."""
    return (*system, *FRESH, *(p.resolve() for p in system))


def _binds(policy: BwrapPolicy) -> list[Path]:
    """Every folder or file the sandbox shows: the system's, bound back, writable."""
    shown = _system_places(policy.system)
    return [*shown, *(q for b in (*policy.readable, *policy.writable) for q in _places(b))]


def _rule(path: Path, binds: Sequence[Path], covers: Sequence[Path]) -> tuple[bool, Path] | None:
    """The deepest rule that holds `path` — ``(True, cover)`` for a folder that hides it,
    ``(False, bind)`` for one that shows it — or None where nothing holds it. Mounts are made
    shallowest first, so the deepest decides (at one depth the cover, mounted after the
    bind)."""
    rules = [(len(f.parts), True, f) for f in covers if within(path, [f])]
    rules += [(len(b.parts), False, b) for b in binds if within(path, [b])]
    if not rules:
        return None
    _, is_cover, folder = max(rules, key=lambda r: (r[0], r[1]))
    return is_cover, folder


def _deepest(path: Path, binds: Sequence[Path], covers: Sequence[Path]) -> Path | None:
    """The cover that hides `path`, or None where a bind (or nothing) holds it."""
    rule = _rule(path, binds, covers)
    return rule[1] if rule is not None and rule[0] else None


def sealed_folders(policy: BwrapPolicy) -> list[Path]:
    """The hidden folders that get a cover of their own, outermost first: those not already
    inside ``/tmp``, ``/var/tmp``, ``/run`` or another hidden folder, or inside one but under
    a folder bound back (a checkout under ``/tmp`` bound back read-only, with its run folder
    hidden again). A folder outside every bind gets one too: the agent finds an empty decoy
    there, and the decoy tells that it looked."""
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
    where it is not hidden: bound back (readable, writable) and not hidden again beneath, or
    outside every rule (then it is simply not there: see `unseen`). Both the path as written
    and where its links lead are checked."""
    binds = _binds(policy)
    covers = [*ALWAYS_PRIVATE, *sealed_folders(policy)]
    for p in (Path(os.path.abspath(path)), path.resolve()):
        cover = _deepest(p, binds, covers)
        if cover is not None:
            return cover
    return None


@dataclass(frozen=True)
class Unseen:
    """Why a path is not visible inside the sandbox: ``path`` (as written, or where its links
    lead) is inside ``folder``, one of the oracle's (``hidden``) or always private
    (``private``), or in no folder the sandbox shows (``outside``, `folder` is None)."""

    path: Path
    kind: str
    folder: Path | None = None

    def __str__(self) -> str:
        if self.kind == "hidden":
            return f"{self.path} is inside {self.folder}, a folder of the oracle's it hides"
        if self.kind == "private":
            return f"{self.path} is inside {self.folder}, which is private and empty there"
        return f"{self.path} is in no folder it shows"


def unseen(policy: BwrapPolicy, path: Path) -> Unseen | None:
    """Why `path` is not visible inside the sandbox, or None where it is (as written, and
    where its links lead)."""
    binds = _binds(policy)
    hidden = sorted({p.resolve() for p in policy.hidden})
    covers = [*ALWAYS_PRIVATE, *hidden]
    for p in (Path(os.path.abspath(path)), path.resolve()):
        rule = _rule(p, binds, covers)
        if rule is None:
            return Unseen(p, "outside")
        is_cover, folder = rule
        if is_cover:
            return Unseen(p, "hidden" if folder in hidden else "private", folder)
    return None


def bwrap_argv(
    policy: BwrapPolicy, command: Sequence[str], *, status_fd: int | None = None
) -> list[str]:
    """The bubblewrap command line that runs `command` under `policy`.

    The root is an empty folder, read-only once everything is in place. Mounts are made
    shallowest first, so the most specific rule wins: a file bound back inside a hidden folder
    is seen; a hidden folder inside one bound back is not.

    With `status_fd`, bubblewrap writes JSON documents to it: ``{"child-pid": …}`` once the
    sandbox's first process exists, and ``{"exit-code": …}`` only if `command` was executed
    (not when setting the sandbox up, or executing the program, failed)."""
    argv = ["bwrap", "--dev", "/dev", "--proc", "/proc"]
    sealed = sealed_folders(policy)
    decoys = {k.resolve(): v for k, v in policy.decoys.items()}
    # (depth, order at one depth, arguments): a bind before a cover of the same folder.
    mounts: list[tuple[int, int, list[str]]] = []
    system = [p for p in policy.system if p not in FRESH]
    for path in system:
        if path.is_symlink():  # /bin -> usr/bin on a merged /usr: the same link
            mounts.append((len(path.parts), 0, ["--symlink", os.readlink(path), str(path)]))
        elif path.is_dir():
            mounts.append((len(path.parts), 0, ["--ro-bind", str(path), str(path)]))
    size = ["--size", str(policy.private_size)] if policy.private_size is not None else []
    mounts += [(len(p.parts), 2, [*size, "--tmpfs", str(p)]) for p in ALWAYS_PRIVATE]
    for path in sealed:
        how = ["--bind", str(decoys[path])] if path in decoys else ["--tmpfs"]
        mounts.append((len(path.parts), 2, [*how, str(path)]))
    shown = set(system)
    for order, option, paths in ((0, "--ro-bind", policy.readable), (1, "--bind", policy.writable)):
        for path in paths:
            source = path.resolve()
            if not source.exists():
                continue
            for place in _places(path):
                if place not in shown:
                    shown.add(place)
                    mounts.append((len(place.parts), order, [option, str(source), str(place)]))
    for _, _, args in sorted(mounts, key=lambda m: (m[0], m[1])):
        argv += args
    # Empty and read-only once the binds beneath them are in place: neither the oracle's
    # files nor a place to pretend to write them; and nowhere to write in the root.
    for path in sealed:
        argv += ["--remount-ro", str(path)]
    argv += ["--remount-ro", "/"]
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
