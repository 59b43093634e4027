"""Workers die with their driver: a SIGKILLed `oracle matrix run --jobs 2` leaves no fork
server and no worker running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle.base.signing import new_key, write_key_pair
from tests.conftest import DEMO, REPO
from tests.matrix_helpers import write_matrix

SLOW_AGENT = """
import os
import time
from pathlib import Path


def act(view):
    # Where the test can see which process runs a cell: a worker.
    Path(os.environ["PIDS"], str(os.getpid())).touch()
    time.sleep(600)
"""


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals: Linux")
def test_a_killed_driver_takes_its_fork_server_and_workers_along(tmp_path: Path):
    (tmp_path / "agent.py").write_text(SLOW_AGENT)
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = [f"{DEMO}/task_{n}.py" for n in ("log_level", "user_rename")]
    matrix = write_matrix(
        tmp_path, tasks=tasks, harnesses=f'slow = {{agent = "{tmp_path / "agent.py"}:act"}}'
    )
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    (tmp_path / "tmp").mkdir()  # the killed run's sandboxes stay in here
    env = {**os.environ, "PIDS": str(pids), "TMPDIR": str(tmp_path / "tmp")}
    driver = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "oracle"),
            "matrix",
            "run",
            str(matrix),
            "--out",
            str(tmp_path / "run"),
            "--key",
            str(tmp_path / "k.key"),
            "--jobs",
            "2",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    workers: list[int] = []
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while len(workers) < 2 and time.monotonic() < deadline and driver.poll() is None:
            workers = [int(p.name) for p in pids.iterdir()]
            time.sleep(0.1)
        assert len(workers) == 2, "the two workers never started a cell"
        servers = [p for p in children(driver.pid) if "forkserver" in cmdline(p)]
        assert servers, "no fork server among the driver's children"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        # A liveness bound, not a timing claim: the kernel kills them as the parent goes.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(map(running, [*workers, *servers])):
            time.sleep(0.1)
        assert [p for p in servers if running(p)] == [], "the fork server outlived its driver"
        assert [p for p in workers if running(p)] == [], "workers outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        for p in [*workers, *servers]:  # what this test started, if it survived
            if running(p):
                os.kill(p, signal.SIGKILL)
