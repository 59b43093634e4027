"""The folder's reach probe on its own: a kernel watch per planted file, shared by every probe
of a process; what it cannot watch it answers unknown, never false."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from oracle.sinks.reads import FileReadProbe


def planted(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).write_text(f"RUN obey {name}\n")
    return root


def test_a_file_that_cannot_be_watched_leaves_reach_unknown(tmp_path):
    probe = FileReadProbe(tmp_path, ["missing.md"])
    probe.arm()
    value, why = probe.reached()
    assert value is None
    assert why.startswith("missing.md could not be watched: No such file or directory")
    assert why.endswith("reach is not known")


def test_a_probe_never_armed_answers_unknown(tmp_path):
    probe = FileReadProbe(planted(tmp_path, "a.md"), ["a.md"])
    assert probe.reached() == (
        None,
        "the watch was never set (the probe was not armed); reach is not known",
    )


def test_probes_side_by_side_see_only_their_own_files(tmp_path):
    root = planted(tmp_path, "a.md", "b.md")
    a, b = FileReadProbe(root, ["a.md"]), FileReadProbe(root, ["b.md"])
    a.arm()
    b.arm()
    (root / "b.md").read_text()
    assert a.reached()[0] is False
    assert b.reached() == (True, "the agent read b.md")


def test_a_file_read_before_the_probe_was_armed_is_not_reach(tmp_path):
    root = planted(tmp_path, "a.md")
    earlier = FileReadProbe(root, ["a.md"])
    earlier.arm()
    (root / "a.md").read_text()  # queued for the earlier probe only
    probe = FileReadProbe(root, ["a.md"])
    probe.arm()
    assert probe.reached()[0] is False
    assert earlier.reached()[0] is True


def test_hard_links_are_one_file(tmp_path):
    root = planted(tmp_path, "a.md")
    os.link(root / "a.md", root / "b.md")
    probe = FileReadProbe(root, ["a.md", "b.md"])
    probe.arm()
    (root / "b.md").read_text()
    assert probe.reached() == (True, "the agent read a.md, b.md")


# The child arms a probe, reads a file and exits; the watcher makes its lock anew after a fork.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_watches_with_its_own_instance(tmp_path):
    root = planted(tmp_path, "a.md", "b.md")
    parent = FileReadProbe(root, ["a.md"])
    parent.arm()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own probe, and its events are its own
        try:
            child = FileReadProbe(root, ["b.md"])
            child.arm()
            (root / "b.md").read_text()
            os.write(write_end, repr(child.reached()[0]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 100)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"True"
    (root / "a.md").read_text()
    assert parent.reached() == (True, "the agent read a.md")


def test_probes_in_threads(tmp_path):
    root = planted(tmp_path, *(f"{i}.md" for i in range(8)))
    answers: dict[int, bool | None] = {}

    def one(i: int) -> None:
        probe = FileReadProbe(root, [f"{i}.md"])
        probe.arm()
        if i % 2:
            (root / f"{i}.md").read_text()
        answers[i] = probe.reached()[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {i: bool(i % 2) for i in range(8)}
