"""Reading what the catalog found, verified first, as `oracle show` and `oracle reduce` do.

- a trial folder: every file against ``manifest.sha256`` (each listed once, each digest right,
  nothing unlisted, no links), then the bytes shown are checked against their line again;
- a cell archive: its signature, digest, members, manifest and record (`open_cell`), read in
  memory;
- a report: its envelope's signature, then each file's bytes against the digest it signs;
- a signed controls record: `read_controls`.

A result is either `Opened` or `NotVerified` with the problems, never partly both. Results
are kept while the files they came from are unchanged (same size, times and inode of every
file: a ctime cannot be set back), so a list of many trials is not hashed on every load.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from oracle.authoring.control_status import ControlsFile
from oracle.base.signing import (
    REPORT_PREDICATE,
    SignatureError,
    sha256_hex,
    signature_path,
    verify_envelope,
)
from oracle.evidence.archive import MANIFEST, verify_archive
from oracle.evidence.record import TrialRecord
from oracle.matrix.cell_archive import Rejected, open_cell
from oracle.matrix.controls_record import ControlsRecord, read_controls
from oracle.reports.model import Report
from oracle.view.catalog import ControlsEntry, ReportEntry, TrialEntry

#: The largest log shown whole; a longer one is cut, and the page says so.
LOG_LIMIT = 256 * 1024


@dataclass
class Opened:
    """A trial that verified: its record, its logs (name → text) and how it was verified."""

    record: TrialRecord
    logs: dict[str, str]
    verified_by: str
    sha256: str | None = None
    cut: list[str] = field(default_factory=list)


@dataclass
class NotVerified:
    """Something that does not verify: each problem, naming the file. Nothing of its content."""

    problems: list[str]


def _stamp(path: Path) -> tuple[object, ...]:
    """What changes when any file at or under `path` changes (links included, not followed)."""
    out: list[object] = []
    paths = [path] if not path.is_dir() else sorted(p for p in path.rglob("*"))
    for p in paths:
        try:
            st = os.lstat(p)
        except OSError:
            out.append((str(p), None))
            continue
        out.append((str(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode))
    return tuple(out)


class Reader:
    """Verified reads with a cache keyed by the files' stamps. `public` checks signatures
    (None: no key, so nothing signed verifies)."""

    def __init__(self, public: Ed25519PublicKey | None, key_note: str = "") -> None:
        self.public = public
        self.key_note = key_note
        self._cache: dict[str, tuple[tuple[object, ...], Opened | NotVerified]] = {}

    def _no_key(self) -> NotVerified:
        return NotVerified([f"no public key to check its signature ({self.key_note})"])

    def trial(self, entry: TrialEntry) -> Opened | NotVerified:
        """The trial at `entry`, verified; cached while its files are unchanged."""
        paths = [entry.path] if entry.kind == "folder" else [entry.path, signature_path(entry.path)]
        stamp = tuple(_stamp(p) for p in paths)
        hit = self._cache.get(str(entry.path))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        result = _open_folder(entry.path) if entry.kind == "folder" else self._open_cell(entry)
        self._cache[str(entry.path)] = (stamp, result)
        return result

    def _open_cell(self, entry: TrialEntry) -> Opened | NotVerified:
        if self.public is None:
            return self._no_key()
        try:
            cell = open_cell(entry.path, self.public, keep_files=True)
        except Rejected as exc:
            return NotVerified([f"{entry.path.name}: {exc.rule}: {exc.detail}"])
        logs, cut = _logs(cell.files)
        return Opened(
            cell.record, logs, "signature and every rule of the reducer", cell.sha256, cut
        )

    def report(self, entry: ReportEntry) -> tuple[Report, bytes] | NotVerified:
        """The report and its HTML page, if its signature and every file's digest verify."""
        folder = entry.path
        if not (folder / "report.dsse.json").exists():
            return _unsigned_report(folder)
        if self.public is None:
            return self._no_key()
        try:
            st = verify_envelope((folder / "report.dsse.json").read_bytes(), self.public)
            if st.predicate_type != REPORT_PREDICATE:
                raise SignatureError(f"predicate type {st.predicate_type!r} is not a report's")
            files = {}
            for name in ("report.json", "report.md", "report.html"):
                data = (folder / name).read_bytes()
                if st.subject_digest(name) != sha256_hex(data):
                    raise SignatureError(f"{name} is not the file that was signed")
                files[name] = data
            report = Report.model_validate_json(files["report.json"])
        except (OSError, SignatureError) as exc:
            return NotVerified([f"{folder}: {exc}"])
        except ValidationError as exc:
            return NotVerified([f"{folder / 'report.json'} is not a report: {exc.errors()[0]}"])
        return report, files["report.html"]

    def controls(self, entry: ControlsEntry) -> ControlsFile | ControlsRecord | NotVerified:
        """A task's controls result: a signed record verified, or an unsigned file parsed."""
        if entry.signed:
            if self.public is None:
                return self._no_key()
            try:
                return read_controls(entry.path, self.public)[0]
            except Rejected as exc:
                return NotVerified([f"{entry.path.name}: {exc.rule}: {exc.detail}"])
        try:
            return ControlsFile.model_validate_json(entry.path.read_bytes())
        except OSError as exc:
            return NotVerified([f"{entry.path}: cannot be read: {exc}"])
        except (ValidationError, ValueError) as exc:
            return NotVerified([f"{entry.path} is not a controls file: {_first(exc)}"])


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        e = exc.errors()[0]
        return f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
    return str(exc)


def _manifest(data: bytes) -> dict[str, str]:
    listed: dict[str, str] = {}
    for line in data.decode("utf-8").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    return listed


def _open_folder(folder: Path) -> Opened | NotVerified:
    try:
        problems = verify_archive(folder)
        if problems:
            return NotVerified(problems)
        manifest = (folder / MANIFEST).read_bytes()
        listed = _manifest(manifest)
        files: dict[str, bytes] = {}
        for name in ["record.json", *sorted(n for n in listed if n.startswith("logs/"))]:
            if name not in listed:
                return NotVerified([f"{folder}: {name} is not in the manifest"])
            data = (folder / name).read_bytes()
            # Read again after the check: what is shown is what matched, not a later edit.
            if hashlib.sha256(data).hexdigest() != listed[name]:
                return NotVerified([f"{folder}: {name} does not match its digest"])
            files[name] = data
    except OSError as exc:
        return NotVerified([f"{folder}: cannot be read: {exc}"])
    try:
        record = TrialRecord.model_validate_json(files["record.json"])
    except ValidationError as exc:
        return NotVerified([f"{folder / 'record.json'} is not a trial record: {_first(exc)}"])
    logs, cut = _logs(files)
    # The folder's digest is its manifest's: what an unsigned report names it by.
    return Opened(record, logs, MANIFEST, hashlib.sha256(manifest).hexdigest(), cut)


def _logs(files: dict[str, bytes]) -> tuple[dict[str, str], list[str]]:
    logs: dict[str, str] = {}
    cut: list[str] = []
    for name, data in sorted(files.items()):
        if not name.startswith("logs/"):
            continue
        short = name.removeprefix("logs/")
        if len(data) > LOG_LIMIT:
            cut.append(short)
            data = data[:LOG_LIMIT]
        logs[short] = data.decode("utf-8", "replace")
    return logs, cut


def _unsigned_report(folder: Path) -> tuple[Report, bytes] | NotVerified:
    """A report with no signature: shown only when it says so itself (a report over trial
    folders, whose page carries the unsigned mark); any other is one whose envelope is gone."""
    try:
        report = Report.model_validate_json((folder / "report.json").read_bytes())
        page = (folder / "report.html").read_bytes()
    except OSError as exc:
        return NotVerified([f"{folder}: cannot be read: {exc}"])
    except (ValidationError, ValueError) as exc:
        return NotVerified([f"{folder / 'report.json'} is not a report: {_first(exc)}"])
    if not report.unsigned:
        return NotVerified(
            [f"{folder}: no report.dsse.json, and the report does not say it is unsigned"]
        )
    return report, page
