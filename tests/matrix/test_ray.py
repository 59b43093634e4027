"""`--executor ray` against a local Ray cluster that the test starts (and stops) itself."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle.base.signing import new_key, write_key_pair
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.spec import load_matrix
from tests.conftest import REPO
from tests.lazy import installed
from tests.matrix.test_matrix_run import probe_matrix

# Ray runs in the processes the test starts; this one never imports it (0.5 s at collection).
if not installed("ray"):
    pytest.skip("the ray extra is not installed (make test installs it)", allow_module_level=True)
pytestmark = pytest.mark.e2e
RAY = str(Path(sys.executable).parent / "ray")
#: The cluster's token, handed to it and to the command that connects to it. Without it both
#: sides fall back on ~/.ray/auth_token, which a `ray.init()` anywhere on the machine writes
#: (Ray 2.60): the head and the command then disagreed and the run failed on
#: "InvalidAuthToken".
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def ray_cluster() -> Iterator[str]:
    """A one-node Ray cluster on this machine, in a process group of its own."""
    port = _free_port()
    # Ray's unix sockets need a short path; pytest's tmp_path can be too long for them.
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **AUTH}
    proc = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
            "--block",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"ray start exited with {proc.returncode}")
                time.sleep(0.2)
        else:
            pytest.fail("the Ray head did not come up in 60 s")
        yield f"127.0.0.1:{port}"
    finally:
        # Only the processes this fixture started: its own process group.
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 10.0)):
            if not _group_alive(proc.pid):
                break
            os.killpg(proc.pid, sig)
            end = time.time() + wait
            while time.time() < end:
                proc.poll()  # reap our own child, or its zombie keeps the group "alive"
                if not _group_alive(proc.pid):
                    break
                time.sleep(0.2)
        proc.wait(timeout=10)
        subprocess.run(["rm", "-rf", temp], check=False)


def test_cells_run_on_a_ray_cluster_and_reduce(ray_cluster: str, tmp_path: Path):
    matrix = probe_matrix(tmp_path, repetitions=3, nap=0)  # 6 cells that report their pid
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "oracle"),
            "matrix",
            "run",
            str(matrix),
            "--out",
            str(tmp_path / "run"),
            "--key",
            str(tmp_path / "k.key"),
            "--executor",
            "ray",
            "--address",
            ray_cluster,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200", "RAY_USAGE_STATS_ENABLED": "0", **AUTH},
    )
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "6 cells: 6 run now" in output
    m = load_matrix(matrix)
    v = verify_run(tmp_path / "run", expected_from(m), key.public_key())  # parity held
    assert len(v.cells) == 6
    assert all(c.record.utility_achieved is True for c in v.cells)
    pids = set()
    for c in v.cells:
        (added,) = c.record.diff["root"]["changes"]
        pids.add(int(added["entry"]["text"].split("marker=")[1].split("-")[0]))
    assert proc.pid not in pids  # the cells ran in Ray's workers, not in the driver
