"""Removing trees: at once (`remove_tree`) or off the caller's time (`discard_tree`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from oracle.base import fsops
from oracle.base.fsops import discard_tree


def _tree(root: Path) -> None:
    """Files in folders, one of them made unreadable and unwritable (as an agent may)."""
    for d in range(5):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(20):
            (sub / f"f{f}").write_text("x" * 100)
    locked = root / "d0"
    os.chmod(locked, 0)


def _left_beside(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_a_discarded_tree_frees_its_name_at_once_and_is_gone_once_drained(tmp_path):
    root = tmp_path / "sandbox"
    _tree(root)
    discard_tree(root)
    assert not root.exists()
    root.mkdir()  # the name is free for the next sandbox at once
    fsops._DISCARDER.drain()
    fsops._DISCARDER = fsops._Discarder()  # drain stopped the thread; later tests get a new one
    assert _left_beside(tmp_path) == ["sandbox"]  # what was moved aside is gone, locked part too


def test_discarding_what_is_not_there_does_nothing(tmp_path):
    discard_tree(tmp_path / "never")
    assert _left_beside(tmp_path) == []


def test_a_link_is_discarded_itself_never_followed(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    discard_tree(link)
    fsops._DISCARDER.drain()
    fsops._DISCARDER = fsops._Discarder()
    assert (target / "keep.txt").read_text() == "kept"
    assert _left_beside(tmp_path) == ["target"]


def test_a_process_that_exits_first_removes_what_it_moved_aside(tmp_path):
    root = tmp_path / "big"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from oracle.base.fsops import discard_tree
        root = Path({str(root)!r})
        for d in range(40):
            (root / str(d)).mkdir(parents=True)
            for f in range(50):
                (root / str(d) / str(f)).write_bytes(b"y" * 64)
        discard_tree(root)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert _left_beside(tmp_path) == []
