"""The container scorer's image is named by digests of this environment (`Runtime`): every
process of one environment must reach the same ones, wherever it was started and whatever it
put on its import path, or each builds a base image of its own and prunes the others' (a
10-60 s build, every time two of them alternate).

No engine is needed: these are the digests alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

SHOW = """
import json, os
from oracle.scoring.image import Runtime
rt = Runtime.current()
base = rt.base_digest()
print(json.dumps({
    "base": base,
    "scorer": rt.digest(base),
    "executable": os.path.realpath(rt.executable),
    "prefix": str(rt.prefix),
    "site": [str(s) for s in rt.site],
    "kept": [list(k) for k in rt.kept],
    "metadata": rt.metadata,
}))
"""


def identity_here() -> dict[str, Any]:
    scope: dict[str, Any] = {}
    out: list[str] = []
    exec(SHOW.replace("print(", "out.append("), {"out": out}, scope)
    return dict(json.loads(out[0]))


def identity_from(cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", SHOW], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_every_process_of_the_environment_names_the_same_images(tmp_path: Path) -> None:
    """In the checkout (`python -c` puts its working folder first on the import path, where
    an editable install leaves a stale `oracle.egg-info`), elsewhere, and in this pytest
    worker (whose rootdir is on the path, and which has run other tests): one identity."""
    here = identity_here()
    assert here["metadata"].startswith("Metadata-Version:"), here["metadata"][:80]
    assert identity_from(REPO) == here
    assert identity_from(tmp_path) == here


def test_distributions_outside_the_environment_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder first on the path holding a stale `oracle` metadata (a source checkout's
    egg-info, of another version) and a distribution the environment does not have: neither
    digest changes, in a new process started there or in this one once it is on the path."""
    egg = tmp_path / "oracle.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: oracle\nVersion: 0.0.1\nProvides-Extra: stale\n"
    )
    other = tmp_path / "not_in_the_environment-1.0.dist-info"
    other.mkdir()
    (other / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: not-in-the-environment\nVersion: 1.0\n"
    )
    want = identity_from(REPO)
    assert identity_from(tmp_path) == want
    monkeypatch.syspath_prepend(str(tmp_path))
    assert identity_here() == want
