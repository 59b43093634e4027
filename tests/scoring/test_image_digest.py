"""The container scorer's image is named by digests of this environment (`Runtime`): every
process of one environment must reach the same ones, wherever it was started, or each builds
a base image of its own and prunes the others' (a 30-60 s build, every time the two alternate).

No engine is needed: these are the digests alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from oracle.scoring.image import Runtime
from tests.conftest import REPO

SHOW = (
    "import json; from oracle.scoring.image import Runtime; rt = Runtime.current(); "
    "b = rt.base_digest(); print(json.dumps([b, rt.digest(b), rt.metadata[:200]]))"
)


def digests_from(cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SHOW],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(done.stdout))


def test_every_process_of_the_environment_names_the_same_images(tmp_path: Path) -> None:
    """In the checkout (`python -c` puts its working folder first on the import path, where
    an editable install leaves a stale `oracle.egg-info`), elsewhere, and in this pytest
    process (whose rootdir is on the path): one base digest, one scorer digest."""
    here = Runtime.current()
    base = here.base_digest()
    mine = [base, here.digest(base), here.metadata[:200]]
    assert here.metadata.startswith("Metadata-Version:"), here.metadata[:80]
    assert digests_from(REPO) == mine
    assert digests_from(tmp_path) == mine


def test_a_stale_copy_of_the_metadata_on_the_path_is_not_the_environments(
    tmp_path: Path,
) -> None:
    """A folder first on the path holding another `oracle` distribution's metadata (a source
    checkout's egg-info, here of another version) changes neither digest."""
    egg = tmp_path / "oracle.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: oracle\nVersion: 0.0.1\nProvides-Extra: stale\n"
    )
    assert digests_from(tmp_path) == digests_from(REPO)
