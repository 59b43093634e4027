"""bubblewrap policies, run for real: what a sandboxed program sees of folders bound back and
folders hidden, whichever lies inside the other."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from oracle.isolation.bwrap import BwrapPolicy, bwrap_argv, hidden_by, make_hidden_folders, unseen

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


def test_the_root_holds_the_system_folders_and_what_is_bound_and_cannot_be_written() -> None:
    """The sandbox's root is an allow-list: the system's folders, fresh /dev and /proc, the
    private folders, and the way to what is bound back — nothing else of the host's root."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        shown = Path(d) / "shown"
        shown.mkdir()
        policy = BwrapPolicy(readable=(shown,))
        make_hidden_folders(policy)
        script = "ls -A /; ls -A /tmp; touch /forged 2>/dev/null || echo root is read-only"
        out = subprocess.run(
            bwrap_argv(policy, ["/bin/sh", "-c", script]),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        expected = {p.name for p in policy.system} | {"dev", "proc", "tmp", "run", "var"}
        lines = out.stdout.splitlines()
        assert lines[-1] == "root is read-only"
        assert set(lines[: len(expected)]) == expected
        assert lines[len(expected) :] == [Path(d).name, "root is read-only"]
        assert unseen(policy, shown) is None
        assert str(unseen(policy, Path(d) / "other")) == (
            f"{Path(d) / 'other'} is inside /tmp, which is private and empty there"
        )
        assert str(unseen(policy, Path("/srv/x"))) == "/srv/x is in no folder it shows"
