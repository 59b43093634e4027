"""The container scorer: the sealed scorer's zygote in a container, where a Docker engine exists.

The container runs the scorer's image (`oracle.scoring.image`, by its ID) with no network, a
read-only root, every capability dropped, ``no-new-privileges``, a process and a memory limit,
no IPC namespace of the host's and a small private scratch folder (``TMPDIR``; not on ``/tmp``,
where the image may hold the runtime); as the oracle's own user, with the environment a
bubblewrap scorer gets. It sees the image (the Python runtime, the installed
distributions and the oracle package, at their host paths), the folders of the task files it
scores, read-only (with the run's hidden folders inside them covered), and one private folder
that holds the oracle's Unix socket: nothing else of the host — no archive, no key, no home.

A descriptor cannot be handed into a container, so the zygote (``oracle.scoring.worker
--connect``) and each scorer it forks connect back to that socket, each naming the one-time
token that started it (`oracle.scoring.protocol.Rendezvous`). Everything else — the protocol,
time limits, a hostile predicate's scorer killed through the zygote — is the sealed scorer's.

The zygote is the container's first process: when the oracle exits, or dies, its control
channel closes, the zygote ends, and with it the container, which the engine then removes.
Containers are labelled with the process that started them; a pool sweeps those whose process is
gone (`sweep`).

Example::

    with ContainerScorerPool() as pool:           # builds or finds the image
        scorer = SealedScorer(pool, hidden=[Path("runs")])
        scored = scorer.score(task, evidence, refusals(task))
        scored.record.image                          # 'sha256:…'
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from oracle.isolation.engine import ContainerEngineMissingError, docker_client
from oracle.scoring.image import Progress, ScorerImage, scorer_image
from oracle.scoring.pool import ScorerPool
from oracle.scoring.protocol import ChannelError, Rendezvous, receive, send
from oracle.scoring.sealed import START_LIMIT, ScorerError, Zygote, import_path, scorer_env

#: Where the private folder with the oracle's socket is mounted inside the container.
MEETING = "/run/oracle-scorer"
#: The container's one writable folder, small and private (its TMPDIR).
SCRATCH = "/run/oracle-scratch"
LABEL = "oracle.scorer"
OWNER_LABEL = "oracle.scorer.owner"
#: What to do where no engine answers.
REMEDY = "start one (as root, `make engine` installs and starts it), or score with --scorer sealed"


def engine(timeout: float | None = 120) -> Any:
    """A client of the local Docker engine, or `ContainerEngineMissingError` naming it."""
    return docker_client(remedy=REMEDY, timeout=timeout)


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner(pid: int | None = None) -> str:
    """The label naming the process that starts a container: host, pid and start time (a pid
    alone can be reused)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _gone(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's: it cannot be checked from here
    return _start_time(int(pid)) != started


def sweep(client: Any) -> list[str]:
    """Remove the scorer containers whose oracle process is gone; their IDs."""
    removed = []
    for c in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        label = (c.labels or {}).get(OWNER_LABEL, "")
        if label and _gone(label):
            with contextlib.suppress(Exception):
                c.remove(force=True)
                removed.append(c.id)
    return removed


def mounts(folders: Iterable[Path], hidden: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """The folders to bind read-only (none inside another), and the hidden folders inside
    them to cover with an empty read-only tmpfs."""
    shown: list[Path] = []
    for f in sorted({Path(os.path.abspath(p)) for p in folders}, key=lambda p: len(p.parts)):
        if not any(s == f or s in f.parents for s in shown):
            shown.append(f)
    covered = sorted(
        {
            Path(os.path.abspath(h))
            for h in hidden
            if any(s in Path(os.path.abspath(h)).parents for s in shown)
        }
    )
    return shown, covered


def scorer_config(
    image: str,
    command: Sequence[str],
    *,
    folders: Sequence[Path],
    covered: Sequence[Path],
    meeting: Path,
    memory: str = "8g",
    pids: int = 512,
    preloaded: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments for ``docker.containers.create`` that run the scorer's
    `command` (see the module docstring): the whole policy, as plain data."""
    from docker.types import Mount  # type: ignore[import-untyped]

    binds = [Mount(MEETING, str(meeting), type="bind", read_only=True)]
    binds += [Mount(str(f), str(f), type="bind", read_only=True) for f in folders]
    binds += [Mount(str(h), None, type="tmpfs", read_only=True) for h in covered]
    return {
        "image": image,
        "command": list(command),
        "user": f"{os.getuid()}:{os.getgid()}",
        "environment": {**scorer_env(preloaded), "TMPDIR": SCRATCH},
        "working_dir": "/",
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges=true"],
        "pids_limit": pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "ipc_mode": "none",
        "tmpfs": {SCRATCH: "rw,nosuid,nodev,noexec,size=64m"},
        "mounts": binds,
        "auto_remove": True,
        "stdin_open": False,
        "labels": {LABEL: "zygote", OWNER_LABEL: owner()},
    }


class ContainerZygote(Zygote):
    """The sealed scorer's zygote, in a container of the scorer's image."""

    def __init__(
        self,
        image: ScorerImage,
        folders: Sequence[Path],
        hidden: Sequence[Path],
        *,
        memory: str = "8g",
        pids: int = 512,
        preloaded: Sequence[str] | None = None,
    ) -> None:
        super().__init__(folders, hidden, bubblewrap=False, preloaded=preloaded)
        self.image: str | None = image.id
        self.memory = memory
        self.pids = pids
        self.container_id: str | None = None
        self._folder: Path | None = None
        self._meeting: Rendezvous | None = None
        self._exited = threading.Event()
        self._streaming: Any = None

    @property
    def isolation(self) -> str:
        return "container"

    def sees(self, path: Path) -> bool:
        """Whether a scorer of this zygote can read `path`: inside a mounted folder and not
        in a hidden one inside it, as written and where its links lead."""
        shown, covered = mounts(self.readable, self.hidden)
        for p in (Path(os.path.abspath(path)), path.resolve()):
            tops = [s for s in shown if s == p or s in p.parents]
            if not tops or any(c == p or c in p.parents for c in covered):
                return False
        return True

    def start(self) -> None:
        import docker  # type: ignore[import-untyped]

        self._folder = Path(tempfile.mkdtemp(prefix="oracle-scorer-"))
        self._meeting = Rendezvous(self._folder)
        token = self._meeting.expect()
        shown, covered = mounts(self.readable, self.hidden)
        for h in covered:  # a mount point must exist inside the read-only folder above it
            h.mkdir(mode=0o700, parents=True, exist_ok=True)
        command = [
            os.path.abspath(sys.executable),  # a virtual environment's link, as on the host
            "-I",
            "-B",
            "-m",
            "oracle.scoring.worker",
            "--connect",
            f"{MEETING}/{self._meeting.path.name}",
            token,
        ]
        config = scorer_config(
            str(self.image),
            command,
            folders=shown,
            covered=covered,
            meeting=self._folder,
            memory=self.memory,
            pids=self.pids,
            preloaded=self.preloaded,
        )
        try:
            client = engine()
            container = client.containers.create(**config)
            self.container_id = container.id
            # Attached before it starts, so that what it writes on failing is kept; the
            # stream ends when the container does. (Its client must live as long.)
            self._streaming = engine(timeout=None)
            output = self._streaming.api.attach(
                container.id, stdout=True, stderr=True, stream=True, logs=True
            )
            threading.Thread(
                target=self._follow, args=(output,), daemon=True, name="oracle-scorer-output"
            ).start()
            container.start()
        except (docker.errors.DockerException, ContainerEngineMissingError) as exc:
            self.close()
            raise ScorerError(f"the scorer's container could not be started: {exc}") from exc
        try:
            deadline = time.monotonic() + START_LIMIT
            self._control = self._meeting.wait(token, deadline, self._running)
            header, _ = receive(self._control, deadline)
        except ChannelError as exc:
            self._exited.wait(2)
            self.close()
            raise ScorerError(f"the scorer's container did not start: {exc}{self._tail()}") from exc
        if header.get("op") != "ready":
            self.close()
            raise ScorerError(f"the scorer's container answered {header!r} instead of starting")

    def _follow(self, output: Iterable[bytes]) -> None:
        try:
            for chunk in output:
                self._stderr.append(chunk[-500:])
        except Exception as exc:
            self._stderr.append(f"(its output stopped: {type(exc).__name__}: {exc})".encode())
        finally:
            self._exited.set()

    def _running(self) -> bool:
        return not self._exited.is_set()

    def fork(self, task_file: Path) -> tuple[int, socket.socket]:
        """A new scorer for `task_file`, connected back: ``(pid, channel)``."""
        if self._meeting is None:
            raise ScorerError("the scorer's container is not running")
        token = self._meeting.expect()
        answer = self._ask(
            {"op": "fork", "file": str(task_file), "path": import_path(), "token": token}
        )
        pid = answer.get("pid")
        if type(pid) is not int:
            raise ScorerError(f"the scorer's zygote answered {answer!r} to a fork")
        try:
            chan = self._meeting.wait(token, time.monotonic() + START_LIMIT, self._running)
        except ChannelError as exc:
            how = self.end(pid)
            raise ScorerError(
                f"the scorer forked for {task_file} did not connect (it {how}): {exc}"
            ) from exc
        return pid, chan

    @property
    def alive(self) -> bool:
        return self._control is not None and self._running()

    def close(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(ChannelError, OSError):
                send(control, {"op": "exit"})
            control.close()
        if self.container_id is not None:
            with contextlib.suppress(Exception):
                client = engine()
                if not self._exited.wait(5):
                    client.containers.get(self.container_id).remove(force=True)
                # The engine removes it once it has stopped: gone when this returns.
                client.api.wait(self.container_id, timeout=10, condition="removed")
        meeting, self._meeting = self._meeting, None
        if meeting is not None:
            meeting.close()
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        streaming, self._streaming = self._streaming, None
        if streaming is not None:
            streaming.close()


class ContainerScorerPool(ScorerPool):
    """Warm scorers in containers of the scorer's image. Raises `ContainerEngineMissingError`
    where no engine answers, `oracle.scoring.image.ImageBuildError` where the image cannot be
    built. `progress` hears how the image's build goes."""

    mode = "container"

    def __init__(
        self, *, progress: Progress | None = None, memory: str = "8g", pids: int = 512
    ) -> None:
        super().__init__(bubblewrap=False)
        self.note = ""
        client = engine(timeout=900)  # an import can take minutes on a slow disk
        try:
            sweep(client)
            self.image = scorer_image(client, progress)
        finally:
            client.close()
        self.memory = memory
        self.pids = pids
        self._folders: set[Path] = set()

    def _readable(self, task_file: Path, hidden: tuple[Path, ...]) -> list[Path]:
        self._folders.add(task_file.parent)
        self._folders.add(task_file.resolve().parent)
        return sorted(self._folders)

    def _start(
        self, readable: Sequence[Path], hidden: tuple[Path, ...], preloaded: Sequence[str]
    ) -> Zygote:
        zygote = ContainerZygote(
            self.image, readable, hidden, memory=self.memory, pids=self.pids, preloaded=preloaded
        )
        zygote.start()
        return zygote

    def warm(self, task_files: Iterable[Path], hidden: Iterable[Path] = ()) -> threading.Thread:
        files = [Path(f).absolute() for f in task_files]
        with self._lock:
            self._folders.update(f.parent for f in files)
            self._folders.update(f.resolve().parent for f in files)
        return super().warm(files, hidden)


_SHARED: ContainerScorerPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_container_pool(progress: Progress | None = None) -> ContainerScorerPool:
    """The container pool of this process: started on first use, ended at exit."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ContainerScorerPool(progress=progress)
            atexit.register(_SHARED.close)
        return _SHARED
