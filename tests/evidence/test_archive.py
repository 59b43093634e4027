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
