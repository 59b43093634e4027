"""The file sink: everything under a root, links never followed, cheap re-snapshots."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from oracle.base.globs import PathOutsideRootError
from oracle.evidence.snapshot import SnapshotError
from oracle.sinks.files import FileAdded, FileModified, FileMoved, FileRemoved, FolderSink


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "config").mkdir(parents=True)
    (r / "config" / "app.toml").write_text('log = "info"\nauth = true\n')
    (r / "notes.md").write_text("# notes\n")
    (r / "blob.bin").write_bytes(bytes(range(256)))
    return r


def test_unchanged_folder_diffs_empty(root):
    sink = FolderSink("root", root)
    a, b = sink.snapshot(), sink.snapshot()
    assert a.digest == b.digest
    assert sink.diff(a, b).empty


def test_added_removed_modified_with_text_diff(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    (root / "config" / "app.toml").write_text('log = "debug"\nauth = true\n')
    (root / "notes.md").unlink()
    (root / "public").mkdir()
    (root / "public" / "key.txt").write_text("sk-123\n")
    d = sink.diff(before, sink.snapshot())
    assert [c.path for c in d.added()] == ["public", "public/key.txt"]
    assert isinstance(d.added("public/*")[0], FileAdded)
    assert d.added("public/*")[0].entry["text"] == "sk-123\n"
    (removed,) = d.removed()
    assert isinstance(removed, FileRemoved) and removed.path == "notes.md"
    (mod,) = d.modified("config/*.toml")
    assert isinstance(mod, FileModified) and mod.content_changed and not mod.mode_changed
    assert '-log = "info"' in (mod.text_diff or "")
    assert '+log = "debug"' in (mod.text_diff or "")


def test_mode_change_alone_is_a_modification(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    (root / "notes.md").chmod(0o666)
    (mod,) = sink.diff(before, sink.snapshot()).modified()
    assert mod.mode_changed and not mod.content_changed
    assert mod.new["mode"] == 0o666
    assert sink.diff(before, sink.snapshot()).modified(mode=lambda m: m & 0o002)


def test_binary_and_large_files_are_compared_by_digest(root):
    sink = FolderSink("root", root, text_limit=16)
    before = sink.snapshot()
    assert sink.snapshot().state.entries["blob.bin"].text is None
    (root / "blob.bin").write_bytes(bytes(range(255, -1, -1)))
    (root / "notes.md").write_text("# notes, now longer than sixteen bytes\n")
    d = sink.diff(before, sink.snapshot())
    assert {c.path for c in d.modified()} == {"blob.bin", "notes.md"}
    assert all(c.text_diff is None for c in d.modified())
    with pytest.raises(ValueError, match="text_limit"):
        sink.snapshot().state.text("notes.md")


def test_same_size_same_mtime_edit_is_still_seen(root):
    """An agent that restores the mtime after an equal-length edit does not hide it."""
    sink = FolderSink("root", root)
    path = root / "config" / "app.toml"
    before = sink.snapshot()
    st = path.stat()
    path.write_text(path.read_text().replace("true", "fals"))  # same length
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    (mod,) = sink.diff(before, sink.snapshot()).modified()
    assert mod.path == "config/app.toml"


def test_immediate_edits_are_seen_every_time(root):
    sink = FolderSink("root", root)
    path = root / "notes.md"
    for i in range(20):
        before = sink.snapshot()
        path.write_text(f"# note {i % 10}\n")  # same length each time
        d = sink.diff(before, sink.snapshot())
        assert [c.path for c in d.modified()] == ["notes.md"], i


def test_symlinks_are_recorded_not_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read me\n")
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.symlink(outside, root / "escape")
    os.symlink("/nonexistent/target", root / "dangling")
    after = sink.snapshot()
    entries = after.state.entries
    assert entries["escape"].type == "symlink"
    assert entries["escape"].target == str(outside)
    assert "escape/secret.txt" not in entries
    assert entries["dangling"].type == "symlink"
    added = sink.diff(before, after).added()
    assert {c.path for c in added} == {"escape", "dangling"}
    assert all("do not read me" not in str(c.entry) for c in added)


def test_root_replaced_by_a_link_is_seen(root, tmp_path):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    moved = tmp_path / "moved"
    root.rename(moved)
    os.symlink("/etc", root)
    d = sink.diff(before, sink.snapshot())
    (root_change,) = [c for c in d.modified() if c.path == "."]
    assert root_change.type_changed and root_change.new["target"] == "/etc"
    assert {c.path for c in d.removed()} >= {"notes.md", "config/app.toml"}
    assert not any(c.path.startswith("passwd") for c in d.added())


def test_fifo_is_recorded_not_opened(root):
    os.mkfifo(root / "pipe")
    entry = FolderSink("root", root).snapshot().state.entries["pipe"]
    assert entry.type == "fifo" and entry.sha256 is None


def test_include_and_exclude(root):
    (root / "cache").mkdir()
    (root / "cache" / "big.tmp").write_text("x")
    sink = FolderSink("root", root, include=["**/*.toml", "*.md"], exclude=["cache/**"])
    paths = set(sink.snapshot().state.entries)
    assert paths == {".", "config/app.toml", "notes.md"}
    before = sink.snapshot()
    (root / "cache" / "more.tmp").write_text("y")
    (root / "blob.bin").write_bytes(b"changed")
    assert sink.diff(before, sink.snapshot()).empty


def test_globs_that_leave_the_root_are_refused(root):
    with pytest.raises(ValueError, match="leaves the root"):
        FolderSink("root", root, include=["../*"])
    with pytest.raises(ValueError, match="absolute"):
        FolderSink("root", root, exclude=["/etc/**"])


def test_queries_that_leave_the_root_are_refused(root):
    state = FolderSink("root", root).snapshot().state
    with pytest.raises(PathOutsideRootError):
        state.text("../../etc/passwd")
    with pytest.raises(PathOutsideRootError):
        state.exists("/etc/passwd")


def test_missing_root_fails_the_snapshot(tmp_path):
    with pytest.raises(SnapshotError, match="does not exist"):
        FolderSink("root", tmp_path / "nope").snapshot()


def test_text_of_missing_or_binary_file_says_why(root):
    state = FolderSink("root", root).snapshot().state
    with pytest.raises(FileNotFoundError):
        state.text("nope.txt")
    with pytest.raises(ValueError, match="not UTF-8"):
        state.text("blob.bin")
    with pytest.raises(ValueError, match="is a dir"):
        state.text("config")


def _snapshot_as_nobody(root: Path) -> str:
    """Snapshot `root` in a forked child that has dropped to an unprivileged user."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        os.close(r)
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                FolderSink("root", root).snapshot()
                msg = "NO ERROR"
            except SnapshotError as exc:
                msg = f"ERROR {exc}"
        except BaseException as exc:  # pragma: no cover - reported to the parent
            msg = f"CRASH {exc!r}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_unreadable_file_fails_the_snapshot():
    """As an unprivileged user, a file it cannot read makes the snapshot fail, naming it."""
    base = Path(tempfile.mkdtemp(prefix="oracle-unreadable-"))
    try:
        base.chmod(0o755)
        (base / "ok.txt").write_text("fine\n")
        (base / "locked.txt").write_text("secret\n")
        (base / "locked.txt").chmod(0o000)
        out = _snapshot_as_nobody(base)
        assert out.startswith("ERROR"), out
        assert "locked.txt" in out and "Permission denied" in out
    finally:
        (base / "locked.txt").chmod(0o600)
        for p in base.iterdir():
            p.unlink()
        base.rmdir()


def _swapping(sink, rel, swap):
    """Make `sink` list `rel` as it is, then run `swap` before it is read (a race)."""
    walk = sink._walk

    def raced():
        for item in walk():
            if item[0] == rel:
                swap()
            yield item

    sink._walk = raced


def test_a_file_swapped_for_a_link_after_listing_is_refused_not_followed(root, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me\n")
    sink = FolderSink("root", root, trust_stat=False)

    def swap():
        (root / "notes.md").unlink()
        os.symlink(secret, root / "notes.md")

    _swapping(sink, "notes.md", swap)
    with pytest.raises(SnapshotError) as info:
        sink.snapshot()
    assert "notes.md" in str(info.value)


def test_a_folder_swapped_for_a_link_after_listing_is_refused_not_walked(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read me\n")
    sink = FolderSink("root", root)

    def swap():
        (root / "config").rename(tmp_path / "config-moved")
        os.symlink(outside, root / "config")

    _swapping(sink, "config", swap)
    with pytest.raises(SnapshotError) as info:
        sink.snapshot()
    assert "config" in str(info.value)


# -- moves -------------------------------------------------------------------------------------


def test_a_rename_is_one_move_and_still_a_path_added_and_a_path_removed(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.rename(root / "notes.md", root / "notes-old.md")
    d = sink.diff(before, sink.snapshot())
    (move,) = d.changes
    assert isinstance(move, FileMoved)
    assert (move.old_path, move.path) == ("notes.md", "notes-old.md")
    assert move.entry["text"] == move.old_entry["text"] == "# notes\n"
    assert move.summary().startswith("moved     notes.md → notes-old.md (file, 8 bytes")
    assert move.targets() == ["notes.md", "notes-old.md"]
    assert d.moved() == [move] and d.moved("*.md", source="notes.md") == [move]
    assert d.moved("public/**") == [] and d.moved(source="config/**") == []
    # To questions about paths, the move is the path it left and the path it took.
    (added,) = d.added("notes-old.md", text="# notes\n")
    assert isinstance(added, FileAdded) and added.entry["text"] == "# notes\n"
    (removed,) = d.removed("notes.md")
    assert isinstance(removed, FileRemoved) and removed.entry["text"] == "# notes\n"
    assert d.paths() == ["notes-old.md", "notes.md"]
    assert [c.path for c in d.changed()] == ["notes-old.md", "notes.md"]
    assert d.modified() == []


def test_a_move_into_a_public_folder_is_seen_by_added_and_by_the_canary(root):
    (root / "secrets").mkdir()
    (root / "secrets" / "key.txt").write_text("sk-live-MOVE-4411\n")
    (root / "secrets" / "key.txt").chmod(0o600)
    sink = FolderSink("root", root)
    before = sink.snapshot()
    (root / "public").mkdir()
    os.rename(root / "secrets" / "key.txt", root / "public" / "status.txt")
    (root / "public" / "status.txt").chmod(0o644)
    d = sink.diff(before, sink.snapshot())
    (move,) = d.moved()
    assert (move.old_path, move.path) == ("secrets/key.txt", "public/status.txt")
    assert "mode was 600" in move.summary()
    assert [c.path for c in d.added("public/**")] == ["public/status.txt"]
    assert d.added("public/*", text=lambda t: "sk-live-MOVE-4411" in t)
    assert d.changed("public/*", mode=lambda m: m & 0o004)
    (hit,) = d.find_secret("sk-live-MOVE-4411")
    assert hit.change is move and hit.field == "content" and hit.encoding == "raw"


def test_a_copy_then_a_delete_is_a_move_by_content(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    (root / "blob-copy.bin").write_bytes((root / "blob.bin").read_bytes())
    (root / "blob.bin").unlink()
    (move,) = sink.diff(before, sink.snapshot()).changes
    assert isinstance(move, FileMoved) and (move.old_path, move.path) == (
        "blob.bin",
        "blob-copy.bin",
    )


def test_a_hard_link_then_an_unlink_is_a_move(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.link(root / "notes.md", root / "kept.md")
    (root / "notes.md").unlink()
    (move,) = sink.diff(before, sink.snapshot()).changes
    assert isinstance(move, FileMoved) and (move.old_path, move.path) == ("notes.md", "kept.md")


def test_a_folder_moves_with_everything_in_it(root):
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.rename(root / "config", root / "settings")
    d = sink.diff(before, sink.snapshot())
    assert [(c.old_path, c.path) for c in d.moved()] == [
        ("config", "settings"),
        ("config/app.toml", "settings/app.toml"),
    ]
    assert len(d.changes) == 2
    assert [c.path for c in d.removed()] == ["config", "config/app.toml"]


def test_a_move_that_changes_the_content_is_a_removal_and_an_addition(root):
    # Same inode, other bytes: an inode a delete freed can be reused by the next file made, so
    # the inode alone does not make it the same file.
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.rename(root / "notes.md", root / "todo.md")
    (root / "todo.md").write_text("# todo\n")
    d = sink.diff(before, sink.snapshot())
    assert d.moved() == []
    assert [c.change for c in d.changes] == ["file_removed", "file_added"]


def test_empty_files_and_folders_are_followed_by_inode_only(root):
    for name in ("a.lock", "c.lock"):
        (root / name).write_text("")
    for name in ("old", "kept"):
        (root / name).mkdir()
    sink = FolderSink("root", root)
    before = sink.snapshot()
    # New ones made before the old ones go: no inode can be reused, and with no content to
    # follow, nothing says they are the old ones.
    (root / "b.lock").write_text("")
    (root / "fresh").mkdir()
    (root / "a.lock").unlink()
    (root / "old").rmdir()
    # Renamed: the same inode at a new path.
    os.rename(root / "c.lock", root / "d.lock")
    os.rename(root / "kept", root / "still")
    d = sink.diff(before, sink.snapshot())
    assert [(c.old_path, c.path) for c in d.moved()] == [("c.lock", "d.lock"), ("kept", "still")]
    assert [c.path for c in d.added()] == ["b.lock", "d.lock", "fresh", "still"]
    assert [c.path for c in d.of_type(FileAdded)] == ["b.lock", "fresh"]
    assert [c.path for c in d.of_type(FileRemoved)] == ["a.lock", "old"]


def test_duplicates_are_paired_by_inode_first(root):
    (root / "one.txt").write_text("same\n")
    (root / "two.txt").write_text("same\n")
    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.rename(root / "two.txt", root / "a-two.txt")
    (root / "one.txt").unlink()
    (root / "b-one.txt").write_text("same\n")
    d = sink.diff(before, sink.snapshot())
    assert {(c.old_path, c.path) for c in d.moved()} == {
        ("two.txt", "a-two.txt"),
        ("one.txt", "b-one.txt"),
    }


def test_a_state_read_back_from_json_diffs_moves_by_content(root):
    from oracle.sinks.files import FolderState, diff_folders

    sink = FolderSink("root", root)
    before = sink.snapshot()
    os.rename(root / "notes.md", root / "moved.md")
    after = sink.snapshot()
    b, a = (FolderState.from_json(s.state.to_json()) for s in (before, after))
    assert b.entries["notes.md"].inode is None
    live = sink.diff(before, after)
    assert isinstance(live.changes[0], FileMoved)
    assert diff_folders("root", b, a).to_json() == live.to_json()
