"""Cell archives: one deterministic, signed ``.tar.gz`` per matrix cell, and the rules that a
reader applies before it believes one.

An archive holds the trial's files (``record.json``, ``diff.json``, ``snapshots/…``, ``logs/…``),
``cell.json`` (what the matrix said about the cell: harness settings, model provider and version,
profile) and ``manifest.sha256``, which lists every other member exactly once. Its bytes are a
function of its files only: members sorted by path, regular files only, mtime 0, owner 0/0 with
no names, mode 0644, PAX format, gzip with mtime 0 and no file name. Beside it,
``<name>.tar.gz.dsse.json`` holds a DSSE envelope over an in-toto Statement whose subject is the
archive's sha256 and whose predicate holds the cell's identity and status.

Reading never touches the disk: the archive is inflated in memory up to the limits, and every
member is checked (path, type, size, count) before its bytes are used. Each failure is a
`Rejected` carrying one rule of `RULES`.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oracle.base.signing import (
    CELL_PREDICATE,
    MAX_ENVELOPE_BYTES,
    SignatureError,
    Statement,
    Subject,
    envelope_bytes,
    sha256_hex,
    sign_statement,
    signature_path,
    statement,
    verify_envelope,
)
from oracle.evidence.record import Cell, TrialRecord
from oracle.judging.verdict import contradictions

MANIFEST = "manifest.sha256"
SUFFIX = ".tar.gz"
BLOCK = tarfile.BLOCKSIZE

#: Every rule a reader (and the reducer) applies, with what it rejects.
RULES: dict[str, str] = {
    "unreadable": "the archive or its envelope cannot be read from disk",
    "signature-missing": "no <archive>.dsse.json beside the archive",
    "signature-invalid": "the envelope is malformed, not signed by the given key, or wrong",
    "archive-digest-mismatch": "the archive's sha256 is not the one its signed statement names",
    "archive-malformed": "not a single gzip stream holding one readable tar and nothing else "
    "(no header that cannot be read, no bytes after the tar's end)",
    "archive-too-large": "the archive, compressed or inflated, exceeds the size limit",
    "compression-ratio": "the archive inflates by more than the allowed ratio, past the size "
    "up to which any ratio is allowed",
    "too-many-members": "more members than the member limit",
    "member-too-large": "one member exceeds the single-file limit",
    "unsafe-path": "a member path that is absolute, holds '..', or is not in canonical form",
    "symlink": "a symbolic-link member",
    "hardlink": "a hard-link member",
    "device-file": "a character device, block device or FIFO member",
    "member-type": "a member that is not a regular file (directory, sparse, unknown type)",
    "duplicate-member": "the same path twice in one archive",
    "manifest-missing": "no manifest.sha256 member",
    "manifest-malformed": "a manifest line that is not '<sha256>  <path>'",
    "manifest-duplicate": "the manifest lists a path twice",
    "manifest-unlisted": "a member the manifest does not list",
    "manifest-absent-file": "the manifest lists a path that is not a member",
    "digest-mismatch": "a member whose sha256 differs from its manifest line",
    "record-invalid": "record.json or cell.json missing or not valid against its schema",
    "record-inconsistent": "the record's verdicts contradict the verdict rules (DESIGN §5): a "
    "known utility or a negative security verdict without verified invocation, an unknown "
    "verdict without its reason, verdicts decided over a failed observation…",
    "cell-mismatch": "file name, record, cell.json and signed predicate disagree on the cell",
    "status-mismatch": "the signed status disagrees with the record's execution error",
    "settings-mismatch": "an archive's harness agent or harness, model or profile settings are "
    "not the matrix's",
}


class Rejected(Exception):
    """An archive that breaks `rule` (one of `RULES`), with what was found."""

    def __init__(self, rule: str, detail: str) -> None:
        assert rule in RULES, rule
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


@dataclass(frozen=True)
class Limits:
    """Bounds against archive bombs, one setting for whoever writes or reads a cell archive:
    `oracle matrix run` checks every archive against them before it signs it, a resumed run
    and `oracle reduce` read with the same ones (a matrix may set them in ``[limits]``).

    - `max_archive_bytes`: the archive on disk;
    - `max_total_bytes`: everything it inflates to (the memory a reader spends on it);
    - `max_members`, `max_member_bytes`: how many members, and how large each;
    - `max_ratio`: how many times its own size an archive may inflate to, once it inflates
      past `ratio_free_bytes`. Up to that size any ratio is honest: a seed of 8 MB of text,
      snapshotted before and after, compresses a thousandfold, and a reader spends no more
      on it than `max_total_bytes` allows anyway. Past it, a high ratio is a bomb's mark.

    Defaults fit a trial archive with room to spare.
    """

    max_archive_bytes: int = 64 * 1024 * 1024
    max_members: int = 4096
    max_member_bytes: int = 64 * 1024 * 1024
    max_total_bytes: int = 256 * 1024 * 1024
    max_ratio: float = 250.0
    ratio_free_bytes: int = 128 * 1024 * 1024

    def inflate_cap(self, size: int) -> int:
        """How many bytes an archive of `size` bytes may inflate to."""
        by_ratio = max(int(max(size, 1) * self.max_ratio), self.ratio_free_bytes)
        return min(self.max_total_bytes, by_ratio)


DEFAULT_LIMITS = Limits()


class Setting(BaseModel):
    """A harness, model or profile as the matrix declared it, recorded in ``cell.json``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)


class ModelSetting(Setting):
    provider: str = "none"
    version: str = "none"


class HarnessSetting(Setting):
    agent: str


class CellMeta(BaseModel):
    """``cell.json``: the cell's identity and what the matrix declared for it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    cell: Cell
    harness: HarnessSetting
    model: ModelSetting
    profile: Setting
    matrix: str = Field(description="the matrix's name")
    matrix_digest: str = Field(description="sha256 of the matrix file's bytes")


def archive_name(cell: Cell) -> str:
    return cell.folder + SUFFIX


# -- writing -------------------------------------------------------------------------------------


def manifest_bytes(files: Mapping[str, bytes]) -> bytes:
    lines = [f"{sha256_hex(data)}  {rel}\n" for rel, data in sorted(files.items())]
    return "".join(lines).encode("utf-8")


def pack(files: Mapping[str, bytes]) -> bytes:
    """The deterministic ``.tar.gz`` bytes of `files` plus their manifest."""
    if MANIFEST in files:
        raise ValueError(f"{MANIFEST} is written by pack itself")
    for rel in files:
        check_member_path(rel)
    members = {**files, MANIFEST: manifest_bytes(files)}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(members):
            data = members[rel]
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(data))
    # zlib with a gzip header: mtime 0, no file name, fixed level -> same bytes for same input.
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    return comp.compress(raw.getvalue()) + comp.flush()


def cell_predicate(record: TrialRecord, manifest_digest: str) -> dict[str, Any]:
    return {
        "cell": record.cell.model_dump(mode="json"),
        "cell_id": record.cell.id,
        "status": status_of(record),
        "error": record.error,
        "manifest_sha256": manifest_digest,
    }


def status_of(record: TrialRecord) -> str:
    """``valid`` or ``invalid`` (the run itself broke: an execution error)."""
    return "invalid" if record.error is not None else "valid"


@dataclass(frozen=True)
class PackedCell:
    """A cell's archive bytes and what its signature will say; built where the trial ran."""

    name: str
    data: bytes
    predicate: dict[str, Any]


def pack_cell(files: Mapping[str, bytes], record: TrialRecord, meta: CellMeta) -> PackedCell:
    """The archive of one cell: the trial's files, ``cell.json`` and the manifest."""
    members = {**files, "cell.json": meta.model_dump_json(indent=2).encode("utf-8") + b"\n"}
    data = pack(members)
    return PackedCell(
        archive_name(record.cell),
        data,
        cell_predicate(record, sha256_hex(manifest_bytes(members))),
    )


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` as `path`: a temporary file beside it, fsync-ed, renamed. An `OSError`
    (a full disk among them) names `path` and leaves nothing behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 is for the key, not for evidence
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # write, flush, fsync name none
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_signed(
    folder: Path, name: str, data: bytes, st: Statement, key: Ed25519PrivateKey
) -> Path:
    """Write `data` as `folder/name`, then its envelope; each atomically (temp, fsync, rename).

    The envelope is written last: an archive without one is half-written and a resumed run
    discards it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    sig = signature_path(path)
    sig.unlink(missing_ok=True)
    write_atomic(path, data)
    write_atomic(sig, envelope_bytes(sign_statement(key, st)))
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def read_signed_file(
    path: Path,
    public: Ed25519PublicKey,
    *,
    predicate_type: str,
    subject: str,
    max_bytes: int,
) -> tuple[bytes, Statement]:
    """A small signed file (``run.json``, a controls record) and the statement over it, after
    its envelope verifies with `public`, names `predicate_type` and digests these very bytes
    as `subject`; `Rejected` with the rule it breaks otherwise."""
    try:
        data = read_bounded(path, max_bytes)
        env = read_bounded(signature_path(path), MAX_ENVELOPE_BYTES)
    except FileNotFoundError as exc:
        raise Rejected("signature-missing", f"{Path(str(exc.filename)).name} is missing") from None
    except OSError as exc:
        raise Rejected("unreadable", str(exc)) from None
    if data is None or env is None:
        raise Rejected("archive-too-large", f"{path.name} or its envelope is too large")
    try:
        st = verify_envelope(env, public)
    except SignatureError as exc:
        raise Rejected("signature-invalid", str(exc)) from None
    if st.predicate_type != predicate_type:
        raise Rejected("signature-invalid", f"predicate type {st.predicate_type!r}")
    if st.subject_digest(subject) != sha256_hex(data):
        raise Rejected("archive-digest-mismatch", f"{path.name} is not the file that was signed")
    return data, st


def write_cell(folder: Path, packed: PackedCell, key: Ed25519PrivateKey) -> Path:
    """Sign and write one packed cell under `folder`."""
    st = statement(
        [Subject(packed.name, sha256_hex(packed.data))], CELL_PREDICATE, packed.predicate
    )
    return write_signed(folder, packed.name, packed.data, st, key)


# -- reading -------------------------------------------------------------------------------------

_DRIVE = re.compile(r"^[A-Za-z]:")


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of `path`, or None when it holds more than `limit` (never read past that)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return None if len(data) > limit else data


def check_member_path(name: str) -> str:
    """`name` if it is a canonical relative POSIX path, else `Rejected('unsafe-path')`."""
    bad = (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or _DRIVE.match(name) is not None
        or any(part in ("", ".", "..") for part in name.split("/"))
    )
    if bad:
        raise Rejected("unsafe-path", f"member path {name!r}")
    return name


def inflate(data: bytes, limits: Limits) -> bytes:
    """The tar inside a gzip stream, refusing more than `limits` allows before inflating it."""
    if len(data) > limits.max_archive_bytes:
        raise Rejected(
            "archive-too-large",
            f"{len(data)} bytes on disk, over max_archive_bytes = {limits.max_archive_bytes}",
        )
    if data[:2] != b"\x1f\x8b":
        raise Rejected("archive-malformed", "not a gzip stream")
    d = zlib.decompressobj(31)
    cap = limits.inflate_cap(len(data))
    try:
        raw = d.decompress(data, cap + 1)
    except zlib.error as exc:
        raise Rejected("archive-malformed", f"gzip: {exc}") from None
    if len(raw) > cap:
        if cap == limits.max_total_bytes:
            raise Rejected(
                "archive-too-large",
                f"inflates past max_total_bytes = {limits.max_total_bytes}",
            )
        raise Rejected(
            "compression-ratio",
            f"{len(data)} bytes inflate past {cap}: more than max_ratio = "
            f"{limits.max_ratio:g} times their size, and past ratio_free_bytes = "
            f"{limits.ratio_free_bytes}",
        )
    if not d.eof:
        raise Rejected("archive-malformed", "the gzip stream is truncated")
    if d.unused_data:
        raise Rejected("archive-malformed", "bytes after the gzip stream")
    return raw


def members(data: bytes, limits: Limits | None = None) -> dict[str, bytes]:
    """The regular-file members of a cell archive by path, after every member rule."""
    limits = limits or DEFAULT_LIMITS
    raw = inflate(data, limits)
    out: dict[str, bytes] = {}
    total = 0
    end = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            while True:
                info = tar.next()
                if info is None:
                    break
                if len(out) >= limits.max_members:
                    raise Rejected(
                        "too-many-members", f"more than max_members = {limits.max_members}"
                    )
                _check_member(info, limits)
                if info.name in out:
                    raise Rejected("duplicate-member", info.name)
                total += info.size
                if total > limits.max_total_bytes:
                    raise Rejected(
                        "archive-too-large",
                        f"members exceed max_total_bytes = {limits.max_total_bytes}",
                    )
                f = tar.extractfile(info)
                body = f.read() if f is not None else b""
                if len(body) != info.size:
                    raise Rejected("archive-malformed", f"{info.name} is truncated")
                out[info.name] = body
            end = tar.offset
    except (tarfile.TarError, EOFError, UnicodeError) as exc:
        raise Rejected("archive-malformed", f"tar: {exc}") from None
    _check_tar_end(raw, end)
    return out


def _check_tar_end(raw: bytes, end: int) -> None:
    """Past the last member, only the end-of-archive marker (zero blocks) may follow.

    `tarfile` stops quietly at a header it cannot read once one member was read, and it never
    looks past the marker: members after a corrupt header, or bytes after the end, would be
    carried along unseen by every rule."""
    rest = raw[end:]
    if rest[:BLOCK].strip(b"\0"):
        raise Rejected(
            "archive-malformed",
            f"the tar header at offset {end} cannot be read; what follows it would go unchecked",
        )
    zeros = len(rest) - len(rest.lstrip(b"\0"))
    if zeros < len(rest):
        raise Rejected(
            "archive-malformed",
            f"data after the tar's end (offset {end}): a byte that is not zero at {end + zeros}",
        )
    if len(rest) < 2 * BLOCK:
        raise Rejected("archive-malformed", f"no end-of-archive marker after offset {end}")


def _check_member(info: tarfile.TarInfo, limits: Limits) -> None:
    check_member_path(info.name)
    if info.issym():
        raise Rejected("symlink", f"{info.name} -> {info.linkname}")
    if info.islnk():
        raise Rejected("hardlink", f"{info.name} => {info.linkname}")
    if info.ischr() or info.isblk() or info.isfifo():
        raise Rejected("device-file", info.name)
    if not info.isreg() or info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        raise Rejected("member-type", f"{info.name} (type {info.type!r})")
    if info.size > limits.max_member_bytes:
        raise Rejected(
            "member-too-large",
            f"{info.name}: {info.size} bytes, over max_member_bytes = {limits.max_member_bytes}",
        )


def check_manifest(files: Mapping[str, bytes]) -> None:
    """The manifest lists every other member exactly once, each with its sha256."""
    if MANIFEST not in files:
        raise Rejected("manifest-missing", f"no {MANIFEST}")
    listed: dict[str, str] = {}
    try:
        text = files[MANIFEST].decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("manifest-malformed", "not UTF-8") from None
    if text and not text.endswith("\n"):
        raise Rejected("manifest-malformed", "the last line has no newline")
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise Rejected("manifest-malformed", f"line {n}: {line[:120]!r}")
        try:
            check_member_path(rel)
        except Rejected:
            raise Rejected("manifest-malformed", f"line {n}: unsafe path {rel!r}") from None
        if rel == MANIFEST:
            raise Rejected("manifest-malformed", f"line {n}: the manifest lists itself")
        if rel in listed:
            raise Rejected("manifest-duplicate", f"line {n}: {rel}")
        listed[rel] = digest
    present = set(files) - {MANIFEST}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise Rejected("manifest-unlisted", ", ".join(unlisted))
    absent = sorted(set(listed) - present)
    if absent:
        raise Rejected("manifest-absent-file", ", ".join(absent))
    for rel in sorted(listed):
        if sha256_hex(files[rel]) != listed[rel]:
            raise Rejected("digest-mismatch", rel)


@dataclass
class OpenedCell:
    """A cell archive that passed every rule: its record, its ``cell.json`` and its digest."""

    name: str
    path: Path
    sha256: str
    record: TrialRecord
    meta: CellMeta
    statement: Statement
    files: dict[str, bytes] = field(repr=False, default_factory=dict)


def open_cell(
    path: Path,
    public: Ed25519PublicKey,
    limits: Limits = DEFAULT_LIMITS,
    *,
    keep_files: bool = False,
) -> OpenedCell:
    """Verify the archive at `path` against its envelope and every rule; `Rejected` otherwise.

    Order: signature first (nothing unsigned is parsed), then the archive's digest, then its
    members, manifest and record, then the cell named by each of them, then the record's
    verdicts against the verdict rules."""
    sig = signature_path(path)
    try:
        data = read_bounded(path, limits.max_archive_bytes)
    except OSError as exc:
        raise Rejected("unreadable", str(exc)) from None
    if data is None:
        raise Rejected(
            "archive-too-large",
            f"over max_archive_bytes = {limits.max_archive_bytes} bytes on disk",
        )
    try:
        env = read_bounded(sig, MAX_ENVELOPE_BYTES)
    except FileNotFoundError:
        raise Rejected("signature-missing", f"no {sig.name}") from None
    except OSError as exc:
        raise Rejected("unreadable", str(exc)) from None
    if env is None:
        raise Rejected("signature-invalid", f"{sig.name} is over {MAX_ENVELOPE_BYTES} bytes")
    try:
        st = verify_envelope(env, public)
    except SignatureError as exc:
        raise Rejected("signature-invalid", str(exc)) from None
    if st.predicate_type != CELL_PREDICATE:
        raise Rejected("signature-invalid", f"predicate type {st.predicate_type!r}")
    digest = sha256_hex(data)
    signed = st.subject_digest(path.name)
    if signed is None:
        names = ", ".join(s.name for s in st.subjects)
        raise Rejected("archive-digest-mismatch", f"the statement names {names}, not {path.name}")
    if signed != digest:
        raise Rejected("archive-digest-mismatch", f"sha256 {digest[:16]}…, signed {signed[:16]}…")
    files, record, meta = read_cell(path.name, data, st.predicate, limits)
    return OpenedCell(path.name, path, digest, record, meta, st, files if keep_files else {})


def read_cell(
    name: str, data: bytes, predicate: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> tuple[dict[str, bytes], TrialRecord, CellMeta]:
    """Every reading rule after the signature, on an archive's bytes: members, manifest,
    record and ``cell.json``, the cell that file `name`, record, ``cell.json`` and
    `predicate` (what is, or is to be, signed) name, and the record's verdicts. Returns the
    members, the record and ``cell.json``, or raises `Rejected`."""
    files = members(data, limits)
    check_manifest(files)
    try:
        record = TrialRecord.model_validate_json(files["record.json"])
        meta = CellMeta.model_validate_json(files["cell.json"])
    except KeyError as exc:
        raise Rejected("record-invalid", f"no {exc.args[0]}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise Rejected("record-invalid", f"{where}: {first['msg']}") from None
    _check_identity(name, record, meta, predicate, sha256_hex(files[MANIFEST]))
    contradicted = contradictions(record)
    if contradicted:
        raise Rejected("record-inconsistent", "; ".join(contradicted))
    return files, record, meta


def _check_identity(
    name: str,
    record: TrialRecord,
    meta: CellMeta,
    predicate: Mapping[str, Any],
    manifest_digest: str,
) -> None:
    cell = record.cell
    if meta.cell != cell:
        raise Rejected("cell-mismatch", f"cell.json says {meta.cell.id}, record {cell.id}")
    if predicate.get("cell") != cell.model_dump(mode="json"):
        raise Rejected("cell-mismatch", f"signed {predicate.get('cell_id')!r}, record {cell.id}")
    if name != archive_name(cell):
        raise Rejected("cell-mismatch", f"file name {name}, record {archive_name(cell)}")
    if predicate.get("status") != status_of(record):
        raise Rejected(
            "status-mismatch",
            f"signed {predicate.get('status')!r}, record says {status_of(record)!r}",
        )
    if predicate.get("manifest_sha256") != manifest_digest:
        raise Rejected("archive-digest-mismatch", "the signed manifest digest differs")
