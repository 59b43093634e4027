"""A full disk during `oracle matrix run` is one line naming the path, a non-zero exit, and a
run that resumes once there is room again.

The run folder is a small size-limited tmpfs (the test mounts it: it needs root), filled to
the last page before the run and given back a little, then all, between attempts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle.base.signing import new_key, write_key_pair
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.spec import load_matrix
from tests.conftest import REPO, require_tools
from tests.forked_cli import ORACLE
from tests.matrix_helpers import write_matrix

PAGE = 4096


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test, unmounted after."""
    require_tools("mount", "umount", root=True)
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * PAGE) == PAGE:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def attempt(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
    )


def assert_one_line_naming(done: subprocess.CompletedProcess[str], disk: Path) -> None:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith(f"error: cannot write {disk / 'run'}/"), line  # the file
    assert ": no space left on device; " in line
    assert "run the same command again" in line


def test_a_full_run_folder_stops_the_run_in_one_line_and_the_run_resumes(
    small_disk: Path, tmp_path: Path
):
    matrix = write_matrix(tmp_path)  # the demo's embedded tasks, careful and obedient
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    args = [ORACLE, "matrix", "run", str(matrix), "--out", str(small_disk / "run"), "--key",
            str(tmp_path / "k.key")]  # fmt: skip
    filler = fill(small_disk)

    # Full from the start: the first file of the run does not fit.
    assert_one_line_naming(attempt(args), small_disk)

    # A few pages free: the run gets further, then stops at another file, with workers.
    os.truncate(filler, filler.stat().st_size - 6 * PAGE)
    assert_one_line_naming(attempt([*args, "--jobs", "2"]), small_disk)

    # Room again: the same command finishes the run, and it verifies whole.
    filler.unlink()
    done = attempt(args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 cells:" in done.stdout
    m = load_matrix(matrix)
    verified = verify_run(small_disk / "run", expected_from(m), key.public_key())
    assert len(verified.cells) == 8
