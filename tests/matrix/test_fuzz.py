"""Hypothesis against the archive reader: any member list, any manifest, any bytes.

Whatever comes in, the reader either returns members that satisfy every rule or raises
`Rejected` with a known rule; it never raises anything else and never writes a file.
"""

from __future__ import annotations

import tarfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle.base.signing import sha256_hex
from oracle.matrix.cell_archive import (
    MANIFEST,
    RULES,
    Limits,
    Rejected,
    check_manifest,
    check_member_path,
    manifest_bytes,
    members,
    open_cell,
    pack,
)
from tests.matrix_helpers import Member, gz, raw_tar, sign_bytes

SMALL = Limits(
    max_members=20,
    max_member_bytes=4096,
    max_total_bytes=32_768,
    max_ratio=50,
    ratio_free_bytes=4096,
)

segment = st.sampled_from(["a", "b", "logs", "record.json", "..", ".", "", "x y", "ü", "C:", "\\"])
names = st.one_of(
    st.lists(segment, min_size=1, max_size=4).map("/".join),
    st.sampled_from(["/etc/passwd", "../../x", "record.json", MANIFEST, "a/../b", "//x"]),
    st.text(min_size=1, max_size=12),
)
types = st.sampled_from(
    [
        tarfile.REGTYPE,
        tarfile.REGTYPE,
        tarfile.REGTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.FIFOTYPE,
        tarfile.BLKTYPE,
    ]
)
member = st.builds(
    Member, name=names, data=st.binary(max_size=64), type=types, linkname=st.sampled_from(["", "x"])
)


def _valid(files: dict[str, bytes]) -> bool:
    try:
        for n in files:
            check_member_path(n)
        check_manifest(files)
    except Rejected:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(member, max_size=8), st.booleans())
def test_any_member_list_is_accepted_only_when_sound(ms: list[Member], add_manifest: bool):
    if add_manifest:
        regular = {m.name: m.data for m in ms if m.type == tarfile.REGTYPE and m.name != MANIFEST}
        ms = [*ms, Member(MANIFEST, manifest_bytes(regular))]
    try:
        raw = raw_tar(ms)
    except (ValueError, UnicodeError):
        return  # tarfile itself refuses to write some names; nothing to read then
    try:
        files = members(gz(raw), SMALL)
        check_manifest(files)
    except Rejected as exc:
        assert exc.rule in RULES
        return
    # Accepted: every member is a regular file at a canonical path, listed with its digest.
    assert len(files) == len(ms)
    assert all(m.type == tarfile.REGTYPE for m in ms)
    for name, data in files.items():
        assert check_member_path(name) == name
        if name != MANIFEST:
            assert f"{sha256_hex(data)}  {name}\n".encode() in files[MANIFEST]
    assert _valid(files)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b/c", "record.json"]), st.binary(max_size=32), max_size=3
    ),
    st.lists(st.text(max_size=90), max_size=5),
    st.booleans(),
)
def test_any_manifest_text_is_accepted_only_when_exact(
    files: dict[str, bytes], lines: list[str], append: bool
):
    exact = manifest_bytes(files).decode()
    text = exact + "".join(line + "\n" for line in lines) if append else "\n".join(lines)
    try:
        check_manifest({**files, MANIFEST: text.encode()})
    except Rejected as exc:
        assert exc.rule in RULES
        return
    # Only the exact listing (in any order) passes.
    assert sorted(text.splitlines()) == sorted(exact.splitlines())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_any_bytes_are_rejected_or_read(data: bytes):
    try:
        files = members(data, SMALL)
    except Rejected as exc:
        assert exc.rule in RULES
        return
    assert all(check_member_path(n) == n for n in files)


GOOD = pack({"record.json": b'{"a": 1}', "logs/out.txt": b"hello " * 40})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, len(GOOD)),
)
def test_mutated_archives_are_rejected_or_still_sound(flips: list[tuple[int, int]], cut: int):
    data = bytearray(GOOD)
    for i, v in flips:
        data[i] = v
    try:
        files = members(bytes(data[:cut] if cut else data), SMALL)
        check_manifest(files)
    except Rejected as exc:
        assert exc.rule in RULES
        return
    assert _valid(files)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(member, max_size=5),
    st.sampled_from([b"{}", b"not json", b'{"schema_version": 1}', b"\x00" * 10]),
)
def test_signed_archives_of_any_members_are_rejected_by_rule(
    demo_run, tmp_path_factory, ms: list[Member], record: bytes
):
    """Validly signed, so only the archive rules stand between these members and the reader."""
    folder = tmp_path_factory.mktemp("fuzz")
    path = sorted((demo_run.run / "cells").glob("*.tar.gz"))[0]
    real = open_cell(path, demo_run.key.public_key())
    files = {"record.json": record, **{m.name: m.data for m in ms if m.type == tarfile.REGTYPE}}
    try:
        data = gz(
            raw_tar([*ms, Member("record.json", record), Member(MANIFEST, manifest_bytes(files))])
        )
    except (ValueError, UnicodeError):
        return
    sign_bytes(folder, path.name, data, demo_run.key, real.record)
    try:
        open_cell(folder / path.name, demo_run.key.public_key())
    except Rejected as exc:
        assert exc.rule in RULES
    else:
        raise AssertionError("an archive without a valid record was accepted")
