"""Workers die with their driver: a SIGKILLed `oracle matrix run --jobs 2` leaves no fork
server and no worker running; Ctrl-C, pressed once or again and again, stops the run (exit 130)
and leaves none either."""

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


def _start_slow_matrix(tmp_path: Path) -> subprocess.Popen[bytes]:
    """`oracle matrix run --jobs 2` of two cells whose agent sleeps, in a process group of its
    own (as a terminal's Ctrl-C reaches it)."""
    (tmp_path / "agent.py").write_text(SLOW_AGENT)
    (tmp_path / "pids").mkdir()
    tasks = [f"{DEMO}/task_{n}.py" for n in ("log_level", "user_rename")]
    matrix = write_matrix(
        tmp_path, tasks=tasks, harnesses=f'slow = {{agent = "{tmp_path / "agent.py"}:act"}}'
    )
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    (tmp_path / "tmp").mkdir()  # the killed run's sandboxes stay in here
    env = {**os.environ, "PIDS": str(tmp_path / "pids"), "TMPDIR": str(tmp_path / "tmp")}
    return subprocess.Popen(
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
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _wait_for_two_cells(driver: subprocess.Popen[bytes], pids: Path) -> tuple[list[int], list[int]]:
    """The pids of the processes running the two cells, and of the driver's fork server."""
    workers: list[int] = []
    deadline = time.monotonic() + 180
    while len(workers) < 2 and time.monotonic() < deadline and driver.poll() is None:
        workers = [int(p.name) for p in pids.iterdir()]
        time.sleep(0.1)
    assert len(workers) == 2, "the two workers never started a cell"
    servers = [p for p in children(driver.pid) if "forkserver" in cmdline(p)]
    assert servers, "no fork server among the driver's children"
    return workers, servers


def _none_left(pids: list[int]) -> list[int]:
    # A liveness bound, not a timing claim.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(map(running, pids)):
        time.sleep(0.1)
    return [p for p in pids if running(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals: Linux")
def test_a_killed_driver_takes_its_fork_server_and_workers_along(tmp_path: Path):
    driver = _start_slow_matrix(tmp_path)
    workers: list[int] = []
    servers: list[int] = []
    try:
        workers, servers = _wait_for_two_cells(driver, tmp_path / "pids")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        # The kernel kills them as the parent goes.
        assert _none_left(servers) == [], "the fork server outlived its driver"
        assert _none_left(workers) == [], "workers outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        for p in [*workers, *servers]:  # what this test started, if it survived
            if running(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("presses", [1, 4])
def test_ctrl_c_stops_the_run_and_leaves_no_process(tmp_path: Path, presses: int):
    driver = _start_slow_matrix(tmp_path)
    workers: list[int] = []
    servers: list[int] = []
    try:
        workers, servers = _wait_for_two_cells(driver, tmp_path / "pids")
        for gap in [0.002, 0.03, 0.002, 0.03][:presses]:
            os.killpg(driver.pid, signal.SIGINT)
            time.sleep(gap)
        output, _ = driver.communicate(timeout=90)
        assert driver.returncode == 130, output.decode()[-3000:]
        assert b"finished cells are kept" in output
        assert _none_left([*workers, *servers]) == [], "processes of the run are left"
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        for p in [*workers, *servers]:
            if running(p):
                os.kill(p, signal.SIGKILL)
