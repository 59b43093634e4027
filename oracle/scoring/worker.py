"""The sealed scorer's processes: a zygote, and one scorer per task file forked from it.

``python -I -m oracle.scoring.worker FD`` starts the zygote; `oracle.scoring.sealed.Zygote`
does so under bubblewrap (no network, the filesystem read-only, the oracle's folders and every
temporary folder hidden, no capabilities, its own PID namespace). It is a fresh interpreter that
never held an agent's output: it imports oracle once, says it is ready, then serves requests on
the control socket FD:

- ``fork``, with a socket passed alongside: fork a scorer for one task file; answer its pid;
- ``kill``: end a scorer and everything it started; answer how it ended;
- ``exit``.

In a container no descriptor can be handed over: ``… oracle.scoring.worker --connect PATH
TOKEN`` starts a zygote that connects to the oracle's Unix socket PATH and names TOKEN
(`oracle.scoring.protocol.Rendezvous`); a ``fork`` request then carries a token instead of a
socket, and the new scorer connects back naming it. There the zygote is the container's first
process, and also reaps what a killed scorer's processes leave behind.

A scorer closes the control socket, loads its task file, then serves on its own socket, one
trial after another: ``evidence`` (a bundle, `oracle.scoring.bundle`) and ``run`` (one step of
`oracle.scoring.judge`). Its standard streams are /dev/null: what a predicate prints reaches
no one. Ctrl-C in the user's terminal is for the oracle, which then ends its scorers; these
processes ignore it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oracle.scoring import preload
from oracle.scoring.protocol import (
    ChannelClosed,
    connect_back,
    receive,
    receive_with_fd,
    send,
)

if TYPE_CHECKING:
    from oracle.authoring.task import Task
    from oracle.evidence.evidence import Evidence


def describe_status(status: int) -> str:
    """How a process ended, from its wait status."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}"


def _end(pid: int, reaped: dict[int, int]) -> str:
    """Kill scorer `pid` and its process group; reap it; say how it ended (`reaped` holds
    the wait status of scorers that ended by themselves and were reaped already)."""
    if pid in reaped:  # it is gone: what is left of its process group is killed
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return describe_status(reaped.pop(pid))
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "had already been reaped"
    return describe_status(status)


def _reap_orphans(children: set[int], reaped: dict[int, int]) -> None:
    """As a PID namespace's first process, wait for every process that ended in it: the
    orphans a killed scorer's processes leave would otherwise stay zombies, each holding a
    pid of the container's limit. A scorer's status is kept for `_end`."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            reaped[pid] = status


def _quiet() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _serve(chan: socket.socket, task_file: str, path: list[str]) -> None:
    """One scorer: load `task_file`, then judge trials on `chan` until it closes."""
    os.setpgid(0, 0)
    _quiet()
    for entry in reversed(path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    from oracle.authoring.loader import load_file
    from oracle.authoring.versions import task_digest
    from oracle.scoring.bundle import EvidenceBundle, open_evidence
    from oracle.scoring.judge import Step, run_step

    tasks, errors = load_file(Path(task_file))
    by_name = {t.name: t for t in tasks}
    send(chan, {"op": "ready", "tasks": sorted(by_name), "errors": [str(e) for e in errors]})
    digests: dict[str, str] = {}
    current: tuple[Task, Evidence] | None = None
    while True:
        try:
            header, blobs = receive(chan)
        except ChannelClosed:
            return
        op = header.get("op")
        if op == "evidence":
            current = None
            name = str(header.get("task"))
            task = by_name.get(name)
            if task is None:
                loaded = ", ".join(sorted(by_name)) or "none"
                send(chan, {"error": f"{task_file} defines no task {name!r} (loaded: {loaded})"})
                continue
            digest = digests.get(name)
            if digest is None:
                digest = digests[name] = task_digest(task)
            if digest != header.get("digest"):
                send(chan, {"error": "digest", "digest": digest})
                continue
            try:
                names = header["names"]
                bundle = EvidenceBundle(dict(zip(names, blobs, strict=True)))
                current = (task, open_evidence(bundle, task))
            except Exception as exc:
                send(chan, {"error": f"the evidence cannot be read: {type(exc).__name__}: {exc}"})
                continue
            send(chan, {"ok": True})
        elif op == "run":
            if current is None:
                send(chan, {"results": [], "outcome": None, "contained": "no evidence loaded"})
                continue
            step = Step(
                str(header["metric"]),
                header["index"],
                str(header["name"]),
                float(header["timeout"]),
            )
            result = run_step(current[0], current[1], step, contain_interrupt=True)
            send(chan, result.to_json())
        else:
            send(chan, {"error": f"unknown request {op!r}"})


def _fork_scorer(
    control: socket.socket, header: dict[str, Any], fd: int | None, rendezvous: str | None
) -> int:
    """Fork a scorer whose channel is `fd`, or (without one) a connection to `rendezvous`
    that names the request's token."""
    pid = os.fork()
    if pid == 0:  # the scorer: never returns into the zygote's loop
        code = 0
        try:
            control.close()
            if fd is not None:
                chan = socket.socket(fileno=fd)
            else:
                assert rendezvous is not None
                chan = connect_back(rendezvous, str(header["token"]))
            _serve(chan, str(header["file"]), [str(p) for p in header.get("path", [])])
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    if fd is not None:
        os.close(fd)
    return pid


def _control(argv: list[str]) -> tuple[socket.socket, str | None]:
    """The control channel `argv` names, and the rendezvous scorers connect back to (None
    where they are handed their socket)."""
    if argv[:1] == ["--connect"] and len(argv) == 3:
        return connect_back(argv[1], argv[2]), argv[1]
    if len(argv) == 1 and argv[0].isdigit():
        return socket.socket(fileno=int(argv[0])), None
    raise SystemExit("usage: python -m oracle.scoring.worker FD | --connect PATH TOKEN")


def _warm_imports() -> None:
    """Import, once and before any fork, what every scorer imports: the modules named in
    ``ORACLE_SCORER_PRELOAD`` (the package root, and the modules of the authoring layers the
    harness had loaded for its tasks; `oracle.scoring.preload`), the loader and the scoring
    steps. Each scorer then pays only for its task file (its first trial waited 0.6-0.9 s for
    these imports). What fails to import here is left for the scorer to meet and report."""
    import importlib

    for name in filter(None, os.environ.get(preload.ENV, "").split(",")):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        import oracle.authoring.loader
        import oracle.authoring.versions
        import oracle.scoring.bundle
        import oracle.scoring.judge  # noqa: F401


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control, rendezvous = _control(argv)
    first = os.getpid() == 1
    _warm_imports()
    send(control, {"op": "ready", "pid": os.getpid()})
    children: set[int] = set()
    reaped: dict[int, int] = {}
    while True:
        try:
            header, fd = receive_with_fd(control)
        except ChannelClosed:
            break
        if first:
            _reap_orphans(children, reaped)
        op = header.get("op")
        if op == "fork" and (
            fd is not None or (rendezvous and isinstance(header.get("token"), str))
        ):
            pid = _fork_scorer(control, header, fd, rendezvous)
            children.add(pid)
            send(control, {"pid": pid})
        elif op == "kill":
            pid = int(header["pid"])
            status = _end(pid, reaped) if pid in children else "is not a scorer of this zygote"
            children.discard(pid)
            send(control, {"status": status})
        elif op == "exit":
            break
        else:
            if fd is not None:
                os.close(fd)
            send(control, {"error": f"unknown request {op!r}"})
    for pid in children:
        _end(pid, reaped)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
