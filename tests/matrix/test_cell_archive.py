"""Cell archives: deterministic bytes, normalised headers, and a reader that round-trips them."""

from __future__ import annotations

import io
import tarfile
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from oracle.matrix.cell_archive import MANIFEST, check_manifest, manifest_bytes, members, pack

FILES = {"record.json": b"{}\n", "snapshots/before/db.json": b"[1]\n", "diff.json": b"{}\n"}


def test_same_files_same_bytes_in_any_order():
    a = pack(FILES)
    b = pack(dict(reversed(list(FILES.items()))))
    assert a == b
    assert a[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    assert pack({**FILES, "diff.json": b"{ }\n"}) != a


def test_headers_are_normalised_and_sorted():
    raw = zlib.decompress(pack(FILES), 31)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        infos = tar.getmembers()
    assert [i.name for i in infos] == sorted([*FILES, MANIFEST])
    for i in infos:
        assert (i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) == (0, 0, 0, "", "", 0o644)
        assert i.isreg()


def test_the_manifest_lists_every_other_member_once():
    files = members(pack(FILES))
    lines = files[MANIFEST].decode().splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == sorted(FILES)
    assert files[MANIFEST] == manifest_bytes(FILES)
    check_manifest(files)


paths = st.lists(
    st.text("abcxyz_-.0123456789", min_size=1, max_size=8).filter(lambda s: s not in (".", "..")),
    min_size=1,
    max_size=3,
).map("/".join)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(paths.filter(lambda p: p != MANIFEST), st.binary(max_size=300), max_size=6))
def test_pack_then_read_round_trips(files: dict[str, bytes]):
    data = pack(files)
    assert data == pack(files)
    got = members(data)
    check_manifest(got)
    assert {k: v for k, v in got.items() if k != MANIFEST} == files
