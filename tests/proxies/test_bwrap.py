"""bubblewrap policies, run for real: what a sandboxed program sees of folders bound back and
folders hidden, whichever lies inside the other."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from oracle.proxies.bwrap import BwrapPolicy, bwrap_argv, hidden_by, make_hidden_folders

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _cat(policy: BwrapPolicy, path: Path) -> subprocess.CompletedProcess[str]:
    make_hidden_folders(policy)
    return subprocess.run(
        bwrap_argv(policy, ["/bin/cat", str(path)]), capture_output=True, text=True, timeout=30
    )


def test_a_folder_under_tmp_bound_back_is_seen_and_a_hidden_one_inside_it_is_not() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        project = Path(d) / "project"
        (project / "runs" / "cell").mkdir(parents=True)
        (project / "task.py").write_text("visible\n")
        (project / "runs" / "cell" / "record.json").write_text("the transcript\n")
        policy = BwrapPolicy(readable=(project,), hidden=(project / "runs",))
        seen = _cat(policy, project / "task.py")
        assert seen.returncode == 0, seen.stderr
        assert seen.stdout == "visible\n"
        hidden = _cat(policy, project / "runs" / "cell" / "record.json")
        assert hidden.returncode != 0
        assert "the transcript" not in hidden.stdout
        assert hidden_by(policy, project / "task.py") is None
        assert hidden_by(policy, project / "runs" / "cell" / "record.json") == project / "runs"


def test_a_file_bound_back_inside_a_hidden_folder_is_seen_and_its_siblings_are_not() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        sandbox = Path(d) / "sandbox"
        sandbox.mkdir()
        (sandbox / "prompt.txt").write_text("the prompt\n")
        (sandbox / "key").write_text("secret\n")
        policy = BwrapPolicy(readable=(sandbox / "prompt.txt",), hidden=(sandbox,))
        assert _cat(policy, sandbox / "prompt.txt").stdout == "the prompt\n"
        assert _cat(policy, sandbox / "key").returncode != 0
        assert hidden_by(policy, sandbox / "key") is not None
