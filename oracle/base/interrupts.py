"""Ctrl-C, once: what a command and the worker processes of its pools do with SIGINT.

A terminal's Ctrl-C reaches every process of the command's process group at once, and a user
who sees nothing happen presses it again. Python's own answer, a `KeyboardInterrupt` at every
SIGINT, lets the second one abort the clean-up the first one started: a control's forked body
left running (its worker then waited for it at exit), a command killed by the signal before it
had told its workers to stop (they then waited for work for ever). So:

- a process stops on its first SIGINT and ignores the ones that follow while it ends what it
  started (`StopOnce`): the command for the whole run, a pool's worker for the task it runs
  (an idle worker remembers the request and starts nothing more);
- a clean-up that must run whole is `shielded`: a SIGINT during it is delivered after it;
- the command ends its pool with `stop_pool`: nothing waiting starts, each worker is
  interrupted (a SIGINT to the command alone reaches none of them), and one that has not
  ended within a grace period is killed.

Example::

    StopOnce.install()          # in a command's main thread, before it starts work
    with shielded():
        kill_what_i_started()   # runs whole even if Ctrl-C is pressed again meanwhile
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from types import FrameType
from typing import ClassVar

#: How long `stop_pool` waits for interrupted workers to close their sandboxes.
STOP_GRACE_S = 30.0


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class StopOnce:
    """This process's SIGINT handler: the first SIGINT raises `KeyboardInterrupt` while the
    process is busy (always, for a command); later ones, and one that comes while a worker is
    idle, are only remembered (`requested`)."""

    requested: ClassVar[bool] = False
    busy: ClassVar[bool] = True
    _raised: ClassVar[bool] = False
    _note: ClassVar[bytes] = b""

    @classmethod
    def install(cls, *, busy: bool = True, note: str = "") -> None:
        """Make this the SIGINT handler (main thread only; elsewhere nothing changes).
        `note` is written to stderr at each SIGINT after the one that raised."""
        if not _in_main_thread() or signal.getsignal(signal.SIGINT) == cls._handle:
            return  # installed already (a SIGINT it remembers stays remembered)
        cls.requested, cls.busy, cls._raised = False, busy, False
        cls._note = note.encode() + b"\n" if note else b""
        signal.signal(signal.SIGINT, cls._handle)

    @classmethod
    def _handle(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True
        if cls.busy and not cls._raised:
            cls._raised = True
            raise KeyboardInterrupt
        if cls._raised and cls._note:
            with contextlib.suppress(OSError):
                os.write(2, cls._note)

    @classmethod
    def ignore_from_now(cls) -> None:
        """After a stop on Ctrl-C, as the process exits: ignore SIGINT outright. The
        interpreter puts the default handler back as it finalizes (except where SIGINT is
        ignored), and a late Ctrl-C would then kill it with its exit code still to come."""
        if cls.requested and _in_main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    @classmethod
    @contextlib.contextmanager
    def task(cls) -> Iterator[None]:
        """A worker's task: a SIGINT during it interrupts it; one that came before it (while
        the worker waited for work) interrupts it as it starts."""
        if cls.requested:
            cls._raised = True
            raise KeyboardInterrupt("the run was interrupted before this task started")
        cls.busy = True
        try:
            yield
        finally:
            cls.busy = False


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Run the block whole: a SIGINT that arrives during it is handed to the process's
    handler after it. Only the main thread gets `KeyboardInterrupt`, so elsewhere (and where
    the handler was not set from Python) this changes nothing."""
    previous = signal.getsignal(signal.SIGINT) if _in_main_thread() else None
    if previous is None:
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def stop_pool(pool: ProcessPoolExecutor, grace: float = STOP_GRACE_S) -> None:
    """Stop `pool` after Ctrl-C: cancel the tasks not started, interrupt every worker (so that
    each closes the sandbox it has open and kills what it runs), wait up to `grace` seconds
    for them to end, and kill those that have not."""
    from multiprocessing.connection import wait

    # The executor keeps its worker processes here (no public accessor before Python 3.14);
    # shutting down forgets them, so they are taken first.
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        with contextlib.suppress(ProcessLookupError, TypeError, ValueError):
            os.kill(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    with shielded():
        # Each worker's sentinel becomes readable when it ends (read nothing from it: the
        # executor's own thread reads the exit status there).
        waiting = {proc.sentinel: proc for proc in workers}
        while waiting and (left := deadline - time.monotonic()) > 0:
            for ended in wait(list(waiting), timeout=left):
                waiting.pop(ended)
        for proc in waiting.values():
            with contextlib.suppress(ProcessLookupError, ValueError):
                proc.kill()
