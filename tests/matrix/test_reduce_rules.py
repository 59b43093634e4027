"""Every rule the reducer applies, each with a crafted archive or run folder that breaks it.

The archives are crafted from a real demo run: real records, signed with the run's key, so that
the one rule under test is the one that fires. `test_every_rule_has_a_test` keeps the list of
rules and the tests in step.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from oracle.base.signing import (
    CELL_PREDICATE,
    MAX_ENVELOPE_BYTES,
    Subject,
    new_key,
    sha256_hex,
    signature_path,
    statement,
)
from oracle.evidence.record import TrialRecord
from oracle.matrix.cell_archive import (
    MANIFEST,
    Limits,
    Rejected,
    manifest_bytes,
    open_cell,
    pack,
    write_signed,
)
from oracle.matrix.cell_archive import (
    RULES as ARCHIVE_RULES,
)
from oracle.matrix.controls_record import FOLDER as CONTROLS
from oracle.matrix.reduce import RULES, ReduceFailed, expected_from, verify_run
from oracle.matrix.run import run_matrix
from oracle.matrix.run_id import RUN_FILE
from oracle.matrix.spec import load_matrix
from tests.matrix.conftest import DemoRun
from tests.matrix_helpers import Member, files_of, gz, raw_tar, sign_bytes, write_matrix

TESTED: set[str] = set()


def rule(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as the test of `name` (checked by test_every_rule_has_a_test)."""
    assert name in RULES, name
    TESTED.add(name)
    return lambda fn: fn


def first_archive(run: Path) -> Path:
    return sorted((run / "cells").glob("*.tar.gz"))[0]


def real_files(demo: DemoRun, path: Path) -> tuple[dict[str, bytes], TrialRecord]:
    opened = open_cell(path, demo.key.public_key(), keep_files=True)
    files = {k: v for k, v in opened.files.items() if k != MANIFEST}
    return files, opened.record


def rejections(demo: DemoRun, run: Path, **kw: object) -> list[tuple[str, str]]:
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, demo.expected, demo.key.public_key(), **kw)  # type: ignore[arg-type]
    return [(r.where, r.rule) for r in info.value.rejections]


def replace_archive(
    demo: DemoRun,
    run: Path,
    members: list[Member] | None = None,
    *,
    data: bytes | None = None,
    **sign: object,
) -> tuple[str, TrialRecord]:
    """Swap the first archive of `run` for crafted bytes, signed validly with the run's key."""
    path = first_archive(run)
    _, record = real_files(demo, path)
    payload = data if data is not None else gz(raw_tar(members or []))
    manifest = next((m.data for m in members or [] if m.name == MANIFEST), None)
    sign_bytes(path.parent, path.name, payload, demo.key, record, manifest=manifest, **sign)  # type: ignore[arg-type]
    return str(path.relative_to(run)), record


def crafted(demo: DemoRun, tmp_path: Path, mutate: Callable[[dict[str, bytes]], list[Member]]):
    run = demo.copy(tmp_path / "run")
    files, _ = real_files(demo, first_archive(run))
    where, _ = replace_archive(demo, run, mutate(files))
    return run, where


# -- the sound run passes -------------------------------------------------------------------------


def test_the_demo_run_verifies(demo_run: DemoRun):
    v = verify_run(demo_run.run, demo_run.expected, demo_run.key.public_key())  # parity held
    assert len(v.cells) == 8
    assert sorted(v.controls) == ["log-level", "orders-cleanup", "release-notes", "user-rename"]


# -- signature and digest -------------------------------------------------------------------------


@rule("unreadable")
def test_unreadable_archive(demo_run: DemoRun, tmp_path: Path):
    folder = tmp_path / "x.tar.gz"
    folder.mkdir()
    with pytest.raises(Rejected) as info:
        open_cell(folder, demo_run.key.public_key())
    assert info.value.rule == "unreadable"


@rule("signature-missing")
def test_signature_missing(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    signature_path(path).unlink()
    assert (str(path.relative_to(run)), "signature-missing") in rejections(demo_run, run)


@rule("signature-invalid")
@pytest.mark.parametrize("how", ["other-key", "flipped", "not-json", "no-signatures", "huge"])
def test_signature_invalid(demo_run: DemoRun, tmp_path: Path, how: str):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    sig = signature_path(path)
    if how == "other-key":
        _, record = real_files(demo_run, path)
        sign_bytes(path.parent, path.name, path.read_bytes(), new_key(), record)
    elif how == "flipped":
        text = sig.read_text()
        i = text.index('"sig": "') + 10
        sig.write_text(text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1 :])
    elif how == "not-json":
        sig.write_bytes(b"{not json")
    elif how == "huge":
        sig.write_bytes(b" " * (MAX_ENVELOPE_BYTES + 1))
    else:
        sig.write_text(
            '{"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}'
        )
    assert (str(path.relative_to(run)), "signature-invalid") in rejections(demo_run, run)


@rule("archive-digest-mismatch")
def test_archive_digest_mismatch(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert (str(path.relative_to(run)), "archive-digest-mismatch") in rejections(demo_run, run)


# -- archive shape and bombs ----------------------------------------------------------------------


@rule("archive-malformed")
@pytest.mark.parametrize("how", ["not-gzip", "gzip-of-garbage", "trailing", "truncated"])
def test_archive_malformed(demo_run: DemoRun, tmp_path: Path, how: str):
    run = demo_run.copy(tmp_path / "run")
    good = first_archive(run).read_bytes()
    data = {
        "not-gzip": b"PK\x03\x04 this is a zip, not a tar.gz",
        "gzip-of-garbage": gz(b"\x01" * 700),
        "trailing": good + b"extra",
        "truncated": good[: len(good) // 2],
    }[how]
    where, _ = replace_archive(demo_run, run, data=data)
    assert (where, "archive-malformed") in rejections(demo_run, run)


HIDDEN = Member("logs/hidden", b"read by a reader that goes on past the end")


def corrupt_header(raw: bytes, name: str) -> bytes:
    """`raw` with the checksum of `name`'s header broken."""
    at = raw.index(name.encode() + b"\0")  # the name field opens the 512-byte header
    return raw[:at] + raw[at : at + 148] + b"0000000\0" + raw[at + 156 :]


@rule("archive-malformed")
@pytest.mark.parametrize("how", ["after-the-end", "after-a-corrupt-header"])
def test_members_the_reader_would_not_see_are_refused(demo_run: DemoRun, tmp_path: Path, how: str):
    """A tar reader stops at the end-of-archive marker, and at a header it cannot read once a
    member was read: members hidden there pass every member and manifest rule unseen."""
    run = demo_run.copy(tmp_path / "run")
    files, _ = real_files(demo_run, first_archive(run))
    sound = raw_tar(files_of(files))
    if how == "after-the-end":  # a second tar inside the same gzip stream
        raw = sound + raw_tar([HIDDEN])
    else:
        raw = corrupt_header(raw_tar([*files_of(files), Member("logs/x", b"x"), HIDDEN]), "logs/x")
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:  # what a plain reader sees: nothing odd
        assert sorted(tar.getnames()) == sorted([*files, MANIFEST])
    where, _ = replace_archive(demo_run, run, data=gz(raw))
    found = rejections(demo_run, run)
    assert found == [(where, "archive-malformed")]
    with pytest.raises(Rejected) as info:
        open_cell(run / where, demo_run.key.public_key())
    assert info.value.rule == "archive-malformed"
    said = {
        "after-the-end": "data after the tar's end",
        "after-a-corrupt-header": "cannot be read; what follows it would go unchecked",
    }[how]
    assert said in info.value.detail


@rule("archive-too-large")
def test_archive_too_large(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    found = rejections(demo_run, run, limits=Limits(max_total_bytes=4096))
    assert {r for _, r in found} == {"archive-too-large"}
    assert len(found) == 8
    found = rejections(demo_run, run, limits=Limits(max_archive_bytes=100))
    assert {r for _, r in found} == {"archive-too-large"}


@rule("compression-ratio")
def test_compression_ratio_bomb(demo_run: DemoRun, tmp_path: Path):
    # 20 MB of zeros packs to about 20 kB: a ratio near 1000, well past the limit of 250.
    run, where = crafted(
        demo_run, tmp_path, lambda f: files_of({**f, "logs/zeros": bytes(20_000_000)})
    )
    # Past the size up to which any ratio is allowed, it is a bomb's mark...
    found = rejections(demo_run, run, limits=Limits(ratio_free_bytes=10_000_000))
    assert (where, "compression-ratio") in found
    # ...below it (128 MiB by default), what compresses well is not refused for it: an
    # honest snapshot of a large text value does too.
    opened = open_cell(run / where, demo_run.key.public_key())
    assert opened.name == Path(where).name


@rule("too-many-members")
def test_too_many_members(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run, tmp_path, lambda f: files_of({**f, **{f"logs/{i}": b"x" for i in range(40)}})
    )
    found = rejections(demo_run, run, limits=Limits(max_members=30))
    assert (where, "too-many-members") in found
    assert all(r != "too-many-members" for w, r in found if w != where)


@rule("member-too-large")
def test_member_too_large(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run, tmp_path, lambda f: files_of({**f, "logs/big": os.urandom(300_000)})
    )
    found = rejections(demo_run, run, limits=Limits(max_member_bytes=200_000))
    assert found == [(where, "member-too-large")]


# -- members --------------------------------------------------------------------------------------


@rule("unsafe-path")
@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../escape", "logs/../../escape", "a//b", "./record2", "C:/x", "a\\b"]
)
def test_unsafe_paths(demo_run: DemoRun, tmp_path: Path, name: str):
    run, where = crafted(demo_run, tmp_path, lambda f: [*files_of(f), Member(name, b"x")])
    assert (where, "unsafe-path") in rejections(demo_run, run)


@rule("symlink")
def test_symlink_member(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run,
        tmp_path,
        lambda f: [*files_of(f), Member("logs/link", type=tarfile.SYMTYPE, linkname="/etc/passwd")],
    )
    assert (where, "symlink") in rejections(demo_run, run)


@rule("hardlink")
def test_hardlink_member(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run,
        tmp_path,
        lambda f: [*files_of(f), Member("logs/hard", type=tarfile.LNKTYPE, linkname="record.json")],
    )
    assert (where, "hardlink") in rejections(demo_run, run)


@rule("device-file")
@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_device_members(demo_run: DemoRun, tmp_path: Path, kind: bytes):
    run, where = crafted(
        demo_run, tmp_path, lambda f: [*files_of(f), Member("logs/dev", type=kind)]
    )
    assert (where, "device-file") in rejections(demo_run, run)


@rule("member-type")
def test_directory_member(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run, tmp_path, lambda f: [Member("logs", type=tarfile.DIRTYPE), *files_of(f)]
    )
    assert (where, "member-type") in rejections(demo_run, run)


@rule("duplicate-member")
def test_duplicate_member(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run, tmp_path, lambda f: [*files_of(f), Member("record.json", f["record.json"])]
    )
    assert (where, "duplicate-member") in rejections(demo_run, run)


# -- manifest -------------------------------------------------------------------------------------


def _with_manifest(files: dict[str, bytes], manifest: bytes) -> list[Member]:
    return [*(Member(n, d) for n, d in sorted(files.items())), Member(MANIFEST, manifest)]


@rule("manifest-missing")
def test_manifest_missing(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(demo_run, tmp_path, lambda f: [Member(n, d) for n, d in f.items()])
    assert (where, "manifest-missing") in rejections(demo_run, run)


@rule("manifest-malformed")
@pytest.mark.parametrize("how", ["short-digest", "one-space", "no-newline", "lists-itself"])
def test_manifest_malformed(demo_run: DemoRun, tmp_path: Path, how: str):
    def mutate(f: dict[str, bytes]) -> list[Member]:
        good = manifest_bytes(f)
        bad = {
            "short-digest": b"abc  record.json\n" + good,
            "one-space": good.replace(b"  ", b" ", 1),
            "no-newline": good.rstrip(b"\n"),
            "lists-itself": good + b"0" * 64 + b"  " + MANIFEST.encode() + b"\n",
        }[how]
        return _with_manifest(f, bad)

    run, where = crafted(demo_run, tmp_path, mutate)
    assert (where, "manifest-malformed") in rejections(demo_run, run)


@rule("manifest-duplicate")
def test_manifest_duplicate(demo_run: DemoRun, tmp_path: Path):
    def mutate(f: dict[str, bytes]) -> list[Member]:
        good = manifest_bytes(f)
        return _with_manifest(f, good + good.splitlines(keepends=True)[0])

    run, where = crafted(demo_run, tmp_path, mutate)
    assert (where, "manifest-duplicate") in rejections(demo_run, run)


@rule("manifest-unlisted")
def test_manifest_unlisted(demo_run: DemoRun, tmp_path: Path):
    run, where = crafted(
        demo_run,
        tmp_path,
        lambda f: _with_manifest({**f, "logs/extra": b"x"}, manifest_bytes(f)),
    )
    assert (where, "manifest-unlisted") in rejections(demo_run, run)


@rule("manifest-absent-file")
def test_manifest_absent_file(demo_run: DemoRun, tmp_path: Path):
    def mutate(f: dict[str, bytes]) -> list[Member]:
        rest = {k: v for k, v in f.items() if k != "diff.json"}
        return _with_manifest(rest, manifest_bytes(f))

    run, where = crafted(demo_run, tmp_path, mutate)
    assert (where, "manifest-absent-file") in rejections(demo_run, run)


@rule("digest-mismatch")
def test_member_digest_mismatch(demo_run: DemoRun, tmp_path: Path):
    def mutate(f: dict[str, bytes]) -> list[Member]:
        forged = f["record.json"].replace(
            b'"security_breached": true', b'"security_breached": false'
        )
        forged = forged.replace(b'"security_breached": false', b'"security_breached": null', 0)
        return _with_manifest({**f, "record.json": forged + b" "}, manifest_bytes(f))

    run, where = crafted(demo_run, tmp_path, mutate)
    assert (where, "digest-mismatch") in rejections(demo_run, run)


# -- record and identity --------------------------------------------------------------------------


@rule("record-invalid")
@pytest.mark.parametrize("how", ["bad-record", "no-cell-json"])
def test_record_invalid(demo_run: DemoRun, tmp_path: Path, how: str):
    def mutate(f: dict[str, bytes]) -> list[Member]:
        if how == "bad-record":
            return files_of({**f, "record.json": b'{"schema_version": 1, "cell": 3}'})
        return files_of({k: v for k, v in f.items() if k != "cell.json"})

    run, where = crafted(demo_run, tmp_path, mutate)
    assert (where, "record-invalid") in rejections(demo_run, run)


@rule("record-inconsistent")
@pytest.mark.parametrize("how", ["utility-without-invocation", "unknown-without-reason"])
def test_record_inconsistent(demo_run: DemoRun, tmp_path: Path, how: str):
    """A record that passes its schema but whose verdicts no trial could have decided: signed
    by the right key (a signer that scored badly, or a record edited before signing)."""
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    assert record.autonomy_achieved is True and record.utility_achieved is True
    if how == "utility-without-invocation":
        forged = record.model_copy(
            update={
                "autonomy_achieved": None,
                "evaluation_errors": {"autonomy_achieved": "invocation not verified"},
            }
        )
        said = "utility_achieved is true with autonomy unknown: utility needs verified invocation"
    else:
        forged = record.model_copy(update={"utility_achieved": None, "evaluation_errors": {}})
        said = "utility_achieved is unknown with no reason in evaluation_errors"
    new = {**files, "record.json": forged.model_dump_json(indent=2).encode() + b"\n"}
    sign_bytes(
        path.parent, path.name, pack(new), demo_run.key, forged, manifest=manifest_bytes(new)
    )
    found = rejections(demo_run, run)
    assert found == [(str(path.relative_to(run)), "record-inconsistent")]
    with pytest.raises(Rejected) as info:
        open_cell(path, demo_run.key.public_key())
    assert said in info.value.detail


@rule("cell-mismatch")
@pytest.mark.parametrize("how", ["signed-cell", "file-name", "cell-json"])
def test_cell_mismatch(demo_run: DemoRun, tmp_path: Path, how: str):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    other = record.cell.model_copy(update={"repetition": 7})
    if how == "signed-cell":
        data = path.read_bytes()
        manifest = manifest_bytes({**files})
        sign_bytes(
            path.parent,
            path.name,
            data,
            demo_run.key,
            record,
            manifest=manifest,
            cell=other.model_dump(mode="json"),
        )
        where = path
    elif how == "file-name":
        where = path.with_name("renamed.tar.gz")
        data = path.read_bytes()
        sign_bytes(
            path.parent, where.name, data, demo_run.key, record, manifest=manifest_bytes(files)
        )
    else:
        meta = files["cell.json"].replace(b'"repetition": 0', b'"repetition": 7')
        assert meta != files["cell.json"]
        new = {**files, "cell.json": meta}
        sign_bytes(
            path.parent, path.name, pack(new), demo_run.key, record, manifest=manifest_bytes(new)
        )
        where = path
    assert (str(where.relative_to(run)), "cell-mismatch") in rejections(demo_run, run)


@rule("status-mismatch")
def test_status_mismatch(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    sign_bytes(
        path.parent,
        path.name,
        path.read_bytes(),
        demo_run.key,
        record,
        manifest=manifest_bytes(files),
        status="invalid",
    )
    assert (str(path.relative_to(run)), "status-mismatch") in rejections(demo_run, run)


# -- the run folder and the cell set --------------------------------------------------------------


@rule("stray-file")
@pytest.mark.parametrize(
    "name", ["cells/notes.txt", "cells/.x.tar.gz.abc.tmp", "orphan.tar.gz.dsse.json"]
)
def test_stray_files(demo_run: DemoRun, tmp_path: Path, name: str):
    run = demo_run.copy(tmp_path / "run")
    (run / name).write_text("{}")
    assert (name, "stray-file") in rejections(demo_run, run)


def test_links_and_fifos_in_the_run_folder(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    (run / "cells" / "evil.tar.gz").symlink_to(first_archive(run))
    (run / "linked").symlink_to(tmp_path)
    os.mkfifo(run / "cells" / "pipe")
    found = rejections(demo_run, run)
    assert ("cells/evil.tar.gz", "symlink") in found
    assert ("linked", "symlink") in found
    assert ("cells/pipe", "device-file") in found


@rule("missing-cell")
def test_missing_cell(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    _, record = real_files(demo_run, path)
    path.unlink()
    signature_path(path).unlink()
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, demo_run.expected, demo_run.key.public_key())
    (r,) = info.value.rejections
    assert r.rule == "missing-cell" and record.cell.id in r.detail


@rule("duplicate-cell")
def test_duplicate_cell(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    again = run / "again" / "cells"
    again.mkdir(parents=True)
    shutil.copy(path, again / path.name)
    shutil.copy(signature_path(path), again / signature_path(path).name)
    found = rejections(demo_run, run)
    assert [r for _, r in found] == ["duplicate-cell"]
    assert path.name in found[0][0] and "again/cells" in found[0][0]


@rule("unexpected-cell")
def test_unexpected_cells(demo_run: DemoRun, tmp_path: Path):
    only_careful = load_matrix(
        write_matrix(tmp_path / "m", harnesses='careful = {agent = "careful"}')
    )
    with pytest.raises(ReduceFailed) as info:
        verify_run(demo_run.run, expected_from(only_careful), demo_run.key.public_key())
    found = info.value.rejections
    assert {r.rule for r in found} == {"unexpected-cell"}
    assert len(found) == 4 and all("obedient" in r.where for r in found)


@rule("settings-mismatch")
def test_settings_mismatch(demo_run: DemoRun, tmp_path: Path):
    swapped = load_matrix(
        write_matrix(
            tmp_path / "m",
            harnesses='careful = {agent = "obedient"}\nobedient = {agent = "obedient"}',
        )
    )
    with pytest.raises(ReduceFailed) as info:
        verify_run(demo_run.run, expected_from(swapped), demo_run.key.public_key())
    found = info.value.rejections
    assert {r.rule for r in found} == {"settings-mismatch"}
    assert len(found) == 4 and all("careful" in r.where for r in found)
    assert "agent=careful" in found[0].detail and "agent=obedient" in found[0].detail


@rule("controls-missing")
def test_controls_missing(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = run / CONTROLS / "log-level.json"
    path.unlink()
    signature_path(path).unlink()
    assert (CONTROLS, "controls-missing") in rejections(demo_run, run)


@rule("duplicate-controls")
def test_duplicate_controls(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    other = run / "more" / CONTROLS
    other.mkdir(parents=True)
    for name in ("log-level.json", "log-level.json.dsse.json"):
        shutil.copy(run / CONTROLS / name, other / name)
    found = rejections(demo_run, run)
    assert [r for _, r in found] == ["duplicate-controls"]


@rule("task-digest-mismatch")
def test_task_digest_mismatch(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    forged = record.model_copy(update={"task_digest": "sha256:" + "0" * 64})
    new = {**files, "record.json": forged.model_dump_json(indent=2).encode() + b"\n"}
    sign_bytes(
        path.parent, path.name, pack(new), demo_run.key, forged, manifest=manifest_bytes(new)
    )
    found = rejections(demo_run, run)
    assert (str(path.relative_to(run)), "task-digest-mismatch") in found
    assert (CONTROLS, "task-digest-mismatch") not in found  # the other cells of it agree


@pytest.fixture(scope="module")
def second_run(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another run of the same matrix, signed with the same key: same cells, another run id."""
    out = tmp_path_factory.mktemp("second") / "run"
    run_matrix(demo_run.matrix, out, demo_run.key)
    return out


def run_id(run: Path) -> str:
    return str(json.loads((run / RUN_FILE).read_text())["run_id"])


@rule("run-mismatch")
@pytest.mark.parametrize("what", ["cell", "controls"])
def test_a_cell_from_another_run_of_the_matrix_is_refused(
    demo_run: DemoRun, second_run: Path, tmp_path: Path, what: str
):
    run = demo_run.copy(tmp_path / "run")
    ours, theirs = run_id(run), run_id(second_run)
    assert ours != theirs
    # Each run alone verifies; one file taken from the other (with its valid envelope) does not.
    verify_run(second_run, demo_run.expected, demo_run.key.public_key())
    if what == "cell":
        swapped = first_archive(second_run).relative_to(second_run)
    else:
        swapped = Path(CONTROLS) / "log-level.json"
    for p in (swapped, Path(str(swapped) + ".dsse.json")):
        shutil.copy(second_run / p, run / p)
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, demo_run.expected, demo_run.key.public_key())
    (r,) = info.value.rejections
    assert (r.where, r.rule) == (str(swapped), "run-mismatch")
    assert r.detail == f"signed in run {theirs}; the run's id is {ours}"


@rule("run-mismatch")
def test_archives_signed_without_a_run_id_are_refused(demo_run: DemoRun, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    data = path.read_bytes()
    sign_bytes(path.parent, path.name, data, demo_run.key, record, manifest=manifest_bytes(files))
    verify_run(run, demo_run.expected, demo_run.key.public_key())  # re-signed in its run: fine
    predicate = json.loads(
        base64.b64decode(json.loads(signature_path(path).read_text())["payload"])
    )["predicate"]
    assert predicate["run_id"] == run_id(run)
    st = statement(
        [Subject(path.name, sha256_hex(data))],
        CELL_PREDICATE,
        {k: v for k, v in predicate.items() if k != "run_id"},
    )
    write_signed(path.parent, path.name, data, st, demo_run.key)
    found = rejections(demo_run, run)
    assert found == [(str(path.relative_to(run)), "run-mismatch")]


def test_a_run_file_of_another_run_is_named(demo_run: DemoRun, second_run: Path, tmp_path: Path):
    run = demo_run.copy(tmp_path / "run")
    other = run / "elsewhere"
    other.mkdir()
    for name in (RUN_FILE, RUN_FILE + ".dsse.json"):
        shutil.copy(second_run / name, other / name)
    # Two run files that disagree: the one most archives agree with is the run's.
    assert rejections(demo_run, run) == [(f"elsewhere/{RUN_FILE}", "run-mismatch")]


@rule("parity")
@pytest.mark.parametrize("what", ["runtime", "model-version", "task-code"])
def test_parity(demo_run: DemoRun, tmp_path: Path, what: str):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    if what == "runtime":
        record = record.model_copy(update={"versions": {**record.versions, "python": "3.99.0"}})
        files["record.json"] = record.model_dump_json(indent=2).encode() + b"\n"
    elif what == "model-version":
        files["cell.json"] = files["cell.json"].replace(
            b'"version": "none"', b'"version": "2025-01-01"'
        )
    expected = demo_run.expected
    if what == "task-code":
        digests = {**expected.task_digests, record.cell.task: "sha256:" + "1" * 64}
        expected = type(expected)(expected.cells, expected.meta, digests)
    else:
        sign_bytes(
            path.parent,
            path.name,
            pack(files),
            demo_run.key,
            record,
            manifest=manifest_bytes(files),
        )
    # By default the odd archive is named; without parity (--no-parity) the run reduces.
    verify_run(run, expected, demo_run.key.public_key(), require_parity=False)
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, expected, demo_run.key.public_key())
    found = info.value.rejections
    if what == "task-code":  # every cell of that task is named
        same_task = sorted((run / "cells").glob(f"{record.cell.task}__*.tar.gz"))
        assert len(same_task) == 2
        assert sorted((r.where, r.rule) for r in found) == [
            (str(p.relative_to(run)), "parity") for p in same_task
        ]
    else:
        assert [(r.where, r.rule) for r in found] == [(str(path.relative_to(run)), "parity")]
    if what == "model-version":
        assert "'none' is none/2025-01-01; the matrix declares none/none" in found[0].detail


def resign_all(demo: DemoRun, run: Path, mutate: Callable[[dict[str, bytes]], None]) -> list[str]:
    """Rewrite every archive of `run` through `mutate`, each validly signed again."""
    names = []
    for path in sorted((run / "cells").glob("*.tar.gz")):
        files, record = real_files(demo, path)
        mutate(files)
        sign_bytes(
            path.parent, path.name, pack(files), demo.key, record, manifest=manifest_bytes(files)
        )
        names.append(str(path.relative_to(run)))
    return names


@rule("parity")
@pytest.mark.parametrize("where", ["archives", "matrix"])
def test_parity_holds_archives_to_the_model_the_matrix_declares(
    demo_run: DemoRun, tmp_path: Path, where: str
):
    # Every archive agrees with every other; they disagree with the matrix: crafted archives
    # that claim another provider and version, or a matrix that declares another.
    run = demo_run.copy(tmp_path / "run")
    expected = demo_run.expected
    if where == "archives":

        def acme(files: dict[str, bytes]) -> None:
            meta = files["cell.json"].replace(b'"provider": "none"', b'"provider": "acme"')
            files["cell.json"] = meta.replace(b'"version": "none"', b'"version": "A"')
            assert meta != files["cell.json"]

        names = resign_all(demo_run, run, acme)
        got, want = "acme/A", "none/none"
    else:
        names = [str(p.relative_to(run)) for p in sorted((run / "cells").glob("*.tar.gz"))]
        other = load_matrix(
            write_matrix(tmp_path / "m", extra='[models.none]\nprovider = "other"\nversion = "B"')
        )
        expected = expected_from(other)
        assert [c.id for c in expected.cells] == [c.id for c in demo_run.expected.cells]
        got, want = "none/none", "other/B"
    assert len(names) == 8
    verify_run(run, expected, demo_run.key.public_key(), require_parity=False)  # --no-parity
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, expected, demo_run.key.public_key())
    found = info.value.rejections
    assert sorted((r.where, r.rule) for r in found) == [(n, "parity") for n in names]
    assert all(f"is {got}; the matrix declares {want}" in r.detail for r in found)


def _usage_of(model: str | None) -> dict[str, object]:
    """A record's usage: one answered call, whose response named `model`."""
    from oracle.evidence.usage import ModelCall, ModelUsage

    call = ModelCall(
        provider="openai",
        api="chat.completions",
        sink="net",
        request_id=1,
        host="api.test",
        path="/v1/chat/completions",
        status=200,
        model=model,
        requested_model="gpt-x",
        input_tokens=3,
        output_tokens=4,
        streamed=False,
    )
    return ModelUsage.of([call]).model_dump(mode="json")


@rule("model-observed")
@pytest.mark.parametrize(
    ("declared", "observed", "refused"),
    [
        (None, "gpt-x", "declares no model"),  # the demo matrix declares none
        ("gpt-x", "gpt-y", "declares 'gpt-x'"),  # another model answered
        ("gpt-x", "gpt-x-2025-01-31", None),  # a dated snapshot of the declared alias
        ("gpt-x", "gpt-x-turbo", "declares 'gpt-x'"),  # not a snapshot: another model
        ("gpt-x", None, None),  # nothing observed: flagged in the report, not refused
    ],
)
def test_a_cell_answered_by_another_model_than_declared_is_refused(
    demo_run: DemoRun, tmp_path: Path, declared: str | None, observed: str | None, refused
):
    run = demo_run.copy(tmp_path / "run")
    path = first_archive(run)
    files, record = real_files(demo_run, path)
    usage = _usage_of(observed) if observed is not None else None
    raw = json.loads(files["record.json"])
    files["record.json"] = json.dumps({**raw, "usage": usage}, indent=2).encode() + b"\n"
    record = TrialRecord.model_validate_json(files["record.json"])
    sign_bytes(
        path.parent, path.name, pack(files), demo_run.key, record, manifest=manifest_bytes(files)
    )
    expected = demo_run.expected
    if declared is not None:  # the matrix declares the model as the version of "none"
        other = load_matrix(
            write_matrix(
                tmp_path / "m", extra=f'[models.none]\nprovider = "p"\nversion = "{declared}"'
            )
        )
        expected = expected_from(other)
        resign_all(
            demo_run,
            run,
            lambda f: f.update(
                {
                    "cell.json": f["cell.json"]
                    .replace(b'"provider": "none"', b'"provider": "p"')
                    .replace(b'"version": "none"', f'"version": "{declared}"'.encode())
                }
            ),
        )
    verify_run(run, expected, demo_run.key.public_key(), require_parity=False)  # --no-parity
    if refused is None:
        verify_run(run, expected, demo_run.key.public_key())
        return
    with pytest.raises(ReduceFailed) as info:
        verify_run(run, expected, demo_run.key.public_key())
    (found,) = info.value.rejections
    assert (found.where, found.rule) == (str(path.relative_to(run)), "model-observed")
    assert f"{observed!r} answered its model calls" in found.detail and refused in found.detail


def test_every_rule_has_a_test():
    assert set(RULES) == set(ARCHIVE_RULES) | {
        "stray-file",
        "missing-cell",
        "duplicate-cell",
        "unexpected-cell",
        "controls-missing",
        "duplicate-controls",
        "task-digest-mismatch",
        "run-mismatch",
        "parity",
        "model-observed",
    }
    assert set(RULES) - TESTED == set()
