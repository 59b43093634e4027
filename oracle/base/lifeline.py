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


def die_with_parent(parent: int | None = None) -> bool:
    """Have the kernel send this process SIGKILL when its parent dies; if the parent died
    already (before the request, or before this process got this far: it is not `parent`,
    the pid its parent had), exit now. False where the system offers no such request (not
    Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    if parent is None:
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
