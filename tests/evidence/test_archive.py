"""Archives: atomic folders whose manifest lists every other file exactly once."""

from __future__ import annotations

import pytest

from oracle.evidence.archive import MANIFEST, ArchiveError, verify_archive, write_archive

FILES = {"record.json": b"{}", "diff.json": b"{}", "snapshots/before/db.json": b"[1]"}


def test_manifest_lists_every_file_once(tmp_path):
    folder = write_archive(tmp_path / "cell", FILES)
    lines = (folder / MANIFEST).read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == sorted(FILES)
    assert verify_archive(folder) == []


def test_tampering_is_found(tmp_path):
    folder = write_archive(tmp_path / "cell", FILES)
    (folder / "record.json").write_bytes(b'{"security_breached": false}')
    (folder / "extra.txt").write_text("x")
    (folder / "diff.json").unlink()
    problems = "\n".join(verify_archive(folder))
    assert "record.json does not match its digest" in problems
    assert "extra.txt is not in the manifest" in problems
    assert "diff.json is in the manifest but missing" in problems


def test_existing_archive_is_not_overwritten_by_default(tmp_path):
    write_archive(tmp_path / "cell", FILES)
    with pytest.raises(ArchiveError, match="exists"):
        write_archive(tmp_path / "cell", FILES)
    folder = write_archive(tmp_path / "cell", {"record.json": b"new"}, overwrite=True)
    assert (folder / "record.json").read_bytes() == b"new"
    assert not (folder / "diff.json").exists()


def test_paths_may_not_leave_the_archive(tmp_path):
    with pytest.raises(ValueError, match="leaves"):
        write_archive(tmp_path / "cell", {"../escape.txt": b"x"})
    assert not (tmp_path / "escape.txt").exists()
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone too


def _fsyncs(monkeypatch):
    """The paths fsync-ed, in order (the real fsync still runs)."""
    import os

    real = os.fsync
    seen: list[str] = []

    def recording(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def test_deferred_sync_writes_whole_archives_and_syncs_them_before_the_block_ends(
    tmp_path, monkeypatch
):
    from oracle.evidence.archive import deferred_sync, write_new_archive

    seen = _fsyncs(monkeypatch)
    files = {"record.json": b"{}", "snapshots/before/db.json": b"[1]"}
    with deferred_sync():
        folder = write_new_archive(tmp_path / "runs" / "cell", files)
        # Renamed into place whole, at once: readable and verified before it is durable.
        assert verify_archive(folder) == []
    synced = {p.removeprefix(str(folder)) for p in seen}
    assert {"/record.json", "/snapshots/before/db.json", f"/{MANIFEST}"} <= synced
    assert {"", "/snapshots", "/snapshots/before"} <= synced  # the folders' entries
    assert str(tmp_path / "runs") in seen  # and the rename itself


def test_deferred_sync_names_an_archive_that_could_not_be_made_durable(tmp_path, monkeypatch):
    import os

    from oracle.evidence.archive import deferred_sync, write_new_archive

    def failing(fd):
        raise OSError(5, "Input/output error")

    durable = r"not made durable: .*cell: .*Input/output error"
    with pytest.raises(ArchiveError, match=durable), deferred_sync():
        # Inside the block only the background thread fsyncs: it fails there.
        monkeypatch.setattr(os, "fsync", failing)
        folder = write_new_archive(tmp_path / "cell", {"record.json": b"{}"})
        assert verify_archive(folder) == []  # written whole all the same


def test_a_nested_deferred_sync_leaves_the_waiting_to_the_outer_one(tmp_path, monkeypatch):
    from oracle.evidence import archive

    with archive.deferred_sync():
        outer = archive._deferred
        with archive.deferred_sync():
            assert archive._deferred is outer
            archive.write_new_archive(tmp_path / "cell", {"record.json": b"{}"})
        assert archive._deferred is outer and len(outer.pending) == 1
    assert archive._deferred is None


def test_without_deferred_sync_an_archive_is_synced_before_it_is_returned(tmp_path, monkeypatch):
    from oracle.evidence.archive import write_new_archive

    seen = _fsyncs(monkeypatch)
    write_new_archive(tmp_path / "cell", {"record.json": b"{}"})
    # Synced where it was staged, before the rename, then the rename itself.
    assert any(p.endswith(".tmp/record.json") for p in seen)
    assert seen[-1] == str(tmp_path)
