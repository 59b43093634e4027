"""Processes that die with their parent: the fork server and workers of a matrix run.

`oracle matrix run --jobs N` starts a fork server (a child of the driver) and forks its workers
from it. Neither notices the driver's death by itself: every worker holds both ends of the
pool's queues and the fork server's liveness pipe, so a driver killed with SIGKILL (no chance
to shut its pool down) left the fork server and its workers running, a trial mid-way each.
On Linux, each asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``): the
driver's death ends the fork server, whose death ends the workers. A worker's isolated agent
and sealed scorer die with it in turn (bubblewrap's ``--die-with-parent``).

What the killed workers leave (databases, accounts, leases, folders) carries owner records of
processes that are gone and is swept by the next run (`oracle.fixtures.owner`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Have the kernel send this process SIGKILL when its parent dies; if the parent died
    already (before the request), exit now. False where the system offers no such request
    (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died between the two calls
        os._exit(1)
    return True


def tie_to_driver(driver: int) -> None:
    """In a pool's worker (forked from a fork server that dies with `driver`, the process
    that made the pool): die with the fork server, and exit now if `driver` is gone already.
    A worker that was still starting when the driver died may have been handed to another
    parent before it asked to die with its own; it must not wait for work for ever."""
    die_with_parent()
    try:
        os.kill(driver, 0)
    except ProcessLookupError:
        os._exit(1)
    except PermissionError:  # alive, as another user: not ours to signal, and not gone
        pass
