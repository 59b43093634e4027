"""Fixtures for the matrix, archive, reducer and report tests: one real demo run, made once."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oracle.base.signing import new_key
from oracle.matrix.reduce import Expected, expected_from
from oracle.matrix.run import run_matrix
from oracle.matrix.spec import Matrix, load_matrix
from tests.matrix_helpers import write_matrix


@dataclass
class DemoRun:
    """A finished run of the demo suite: 4 tasks × careful/obedient × 1 repetition."""

    run: Path
    matrix: Matrix
    key: Ed25519PrivateKey
    expected: Expected

    def copy(self, dst: Path) -> Path:
        shutil.copytree(self.run, dst)
        return dst


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.mktemp("demo-run")
    matrix = load_matrix(write_matrix(base))
    key = new_key()
    run_matrix(matrix, base / "run", key)
    return DemoRun(base / "run", matrix, key, expected_from(matrix))
