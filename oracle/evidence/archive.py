"""Trial archives: one folder per trial, written atomically, with a manifest of digests.

Layout::

    <cell folder>/
      record.json                 the TrialRecord
      diff.json                   sink → typed changes
      snapshots/before/<sink>.json
      snapshots/after/<sink>.json
      logs/<name>                 captured output, when there is any
      manifest.sha256             "<sha256>  <path>" for every other file, sorted by path

Everything is written into a temporary sibling folder, each file fsync-ed, then the folder is
renamed into place: a reader sees a whole archive or none.

Inside `deferred_sync()` (what the CLI wraps around a run of trials) the fsyncs of an archive
happen on a background thread while the next trial runs, and leaving the block waits for all of
them: when the command returns, every archive is on disk as before. An archive cut short by a
power loss in between is still renamed whole, and its files then fail the manifest's digests
(`verify_archive`): it never reads as another result.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from oracle.base.canonical import dumps_pretty
from oracle.base.globs import check_relative
from oracle.evidence.diff import Diff
from oracle.evidence.record import TrialRecord
from oracle.evidence.snapshot import Snapshot

MANIFEST = "manifest.sha256"


class ArchiveError(RuntimeError):
    """An archive could not be written or does not verify. Names the folder and the file."""


def _write(path: Path, data: bytes, sync: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_lines(files: Mapping[str, bytes]) -> bytes:
    """The manifest for `files` (relative path → bytes): sha256, two spaces, path."""
    lines = [f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items())]
    return "".join(lines).encode("utf-8")


def evidence_files(
    before: Mapping[str, Snapshot], after: Mapping[str, Snapshot], diff: Diff
) -> dict[str, bytes]:
    """The evidence files: the diff and every snapshot, in canonical JSON (what a scorer is
    handed, and what the archive keeps, byte for byte)."""
    files = {"diff.json": dumps_pretty(diff.to_json())}
    for label, snaps in (("before", before), ("after", after)):
        for name, snap in snaps.items():
            files[f"snapshots/{label}/{check_relative(name)}.json"] = dumps_pretty(snap.to_json())
    return files


def archive_files(
    record: TrialRecord,
    before: Mapping[str, Snapshot],
    after: Mapping[str, Snapshot],
    diff: Diff,
    logs: Mapping[str, bytes] | None = None,
    *,
    evidence: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
    """The bytes of every archive file but the manifest, by relative path. `evidence` is
    `evidence_files` already made (for the scorer), reused rather than made again."""
    files: dict[str, bytes] = {
        "record.json": record.model_dump_json(indent=2).encode("utf-8") + b"\n",
        **(evidence if evidence is not None else evidence_files(before, after, diff)),
    }
    for name, data in (logs or {}).items():
        files[f"logs/{check_relative(name)}"] = data
    return files


class ArchiveExistsWarning(UserWarning):
    """An archive was written under another name because its folder held one already."""


def _folders_deepest_first(root: Path, rels: list[str]) -> list[Path]:
    """`root` and every folder between it and the files `rels`, the deepest first."""
    folders = {root}
    for rel in rels:
        parts = Path(rel).parts[:-1]
        folders.update(root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1))
    return sorted(folders, key=lambda p: len(p.parts), reverse=True)


def _staged(folder: Path, files: Mapping[str, bytes], sync: bool = True) -> Path:
    """`files` and their manifest, written (and fsync-ed, with `sync`) into a temporary
    sibling of `folder`."""
    if MANIFEST in files:
        raise ArchiveError(f"{folder}: {MANIFEST} is written by the archive itself")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        rels = [check_relative(rel, "archive path") for rel in files]
        for rel, data in zip(rels, files.values(), strict=True):
            _write(tmp / rel, data, sync)
        _write(tmp / MANIFEST, manifest_lines(files), sync)
        if sync:
            for d in _folders_deepest_first(tmp, rels):
                _fsync_dir(d)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


class _Syncs:
    """The archives whose fsyncs run in the background, inside `deferred_sync`."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oracle-archive-sync")
        self.pending: list[tuple[Path, Future[None]]] = []

    def add(self, folder: Path, rels: list[str]) -> None:
        self.pending.append((folder, self.pool.submit(_sync_archive, folder, rels)))

    def wait(self) -> list[str]:
        self.pool.shutdown(wait=True)
        return [f"{folder}: {fut.exception()}" for folder, fut in self.pending if fut.exception()]


def _sync_archive(folder: Path, rels: list[str]) -> None:
    for rel in [*rels, MANIFEST]:
        _fsync_file(folder / rel)
    for d in _folders_deepest_first(folder, rels):
        _fsync_dir(d)
    _fsync_dir(folder.parent)


_deferred: _Syncs | None = None
_deferred_lock = threading.Lock()


@contextmanager
def deferred_sync() -> Iterator[None]:
    """Archives written by `write_new_archive` in this block are fsync-ed on a background
    thread; leaving the block waits for every one, and raises `ArchiveError` naming those that
    could not be made durable. Blocks nest (the outermost one waits)."""
    global _deferred
    with _deferred_lock:
        nested = _deferred is not None
        if not nested:
            _deferred = _Syncs()
    if nested:
        yield
        return
    try:
        yield
    finally:
        with _deferred_lock:
            syncs, _deferred = _deferred, None
        assert syncs is not None
        failed = syncs.wait()
    if failed:
        raise ArchiveError("archives not made durable: " + "; ".join(failed))


def write_new_archive(folder: Path, files: Mapping[str, bytes]) -> Path:
    """Write `files` and their manifest as a new archive, atomically, and return where: at
    `folder`, or, when `folder` holds an archive already, at the first free ``<folder>.2``,
    ``<folder>.3``… with an `ArchiveExistsWarning` saying so. Never replaces an archive, also
    when two processes write the same folder at once (a folder is renamed into place, which
    fails on a folder that is not empty). Inside `deferred_sync` the fsyncs come later."""
    syncs = _deferred
    tmp = _staged(folder, files, sync=syncs is None)
    try:
        target, n = folder, 1
        while True:
            try:
                os.rename(tmp, target)
                break
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise
            n += 1
            target = folder.with_name(f"{folder.name}.{n}")
        if syncs is None:
            _fsync_dir(folder.parent)
        else:
            syncs.add(target, [check_relative(rel, "archive path") for rel in files])
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target != folder:
        warnings.warn(
            ArchiveExistsWarning(
                f"{folder} already holds a trial archive: this trial was archived as "
                f"{target.name} beside it (nothing was replaced)"
            ),
            stacklevel=2,
        )
    return target


def write_archive(folder: Path, files: Mapping[str, bytes], *, overwrite: bool = False) -> Path:
    """Write `files` and their manifest into `folder`, atomically. Returns `folder`. An
    existing `folder` is an `ArchiveError` unless `overwrite` (see `write_new_archive` for
    the writer that never replaces)."""
    if folder.exists() and not overwrite:
        raise ArchiveError(f"{folder} exists already; choose another --out or remove it")
    tmp = _staged(folder, files)
    try:
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
        _fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def holds_archives(folder: Path, depth: int = 3) -> bool:
    """Whether `folder` is, or holds within `depth` levels, an archive: a trial archive's
    manifest or a signed cell (``*.dsse.json``). Links are not followed."""
    level = [folder]
    for _ in range(depth + 1):
        deeper: list[Path] = []
        for where in level:
            try:
                entries = list(os.scandir(where))
            except OSError:
                continue
            for entry in entries:
                if entry.name == MANIFEST or entry.name.endswith(".dsse.json"):
                    return True
                if entry.is_dir(follow_symlinks=False):
                    deeper.append(Path(entry.path))
        level = deeper
    return False


def private_folders(out: Path) -> list[Path]:
    """The folders an isolated agent must not see when its trial is archived under `out`.

    Always `out` itself. Beside it: the folder that holds `out` when that folder holds nothing
    else but archive folders and empty ones — ``runs/`` for ``runs/<time>``, which then also
    covers runs that start later; otherwise each archive folder beside `out` (`holds_archives`),
    so that a folder of other things (a project's root) stays visible.

    >>> private_folders(Path("/nonexistent/runs/b"))
    [PosixPath('/nonexistent/runs/b')]
    """
    out = out.absolute()
    parent = out.parent
    try:
        siblings = [p for p in parent.iterdir() if p != out]
    except OSError:
        return [out]  # nothing beside it yet
    archives = [p for p in siblings if p.is_dir() and not p.is_symlink() and holds_archives(p)]
    others = [p for p in siblings if p not in archives and not _empty_folder(p)]
    if not others and parent != Path(parent.anchor):
        return [parent]
    return [out, *archives]


def _empty_folder(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def verify_archive(folder: Path) -> list[str]:
    """Problems with an archive: files missing from or extra to the manifest, digest mismatches.

    An empty list means the manifest lists exactly the files present, with their digests.
    """
    problems: list[str] = []
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return [f"{folder}: no {MANIFEST}"]
    listed: dict[str, str] = {}
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            problems.append(f"{manifest}:{n}: malformed line {line!r}")
            continue
        if rel in listed:
            problems.append(f"{manifest}:{n}: {rel} listed twice")
        listed[rel] = digest
    present = {
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink()
    } - {MANIFEST}
    for rel in sorted(present - set(listed)):
        problems.append(f"{folder}: {rel} is not in the manifest")
    for rel in sorted(set(listed) - present):
        problems.append(f"{folder}: {rel} is in the manifest but missing")
    for rel in sorted(present & set(listed)):
        path = folder / rel
        if path.is_symlink():
            problems.append(f"{folder}: {rel} is a link")
            continue
        if hashlib.sha256(path.read_bytes()).hexdigest() != listed[rel]:
            problems.append(f"{folder}: {rel} does not match its digest")
    return problems


def read_verified(folder: Path, rel: str) -> bytes:
    """The bytes of `rel` in the archive `folder`, once the whole archive verifies against its
    manifest (`verify_archive`) and these very bytes match their line in it; otherwise an
    `ArchiveError` listing every problem, each naming the file."""
    problems = verify_archive(folder)
    if problems:
        raise ArchiveError("\n".join(problems))
    listed = {}
    for line in (folder / MANIFEST).read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    if rel not in listed:
        raise ArchiveError(f"{folder}: {rel} is not in the manifest")
    data = (folder / rel).read_bytes()
    if hashlib.sha256(data).hexdigest() != listed[rel]:  # changed since it was verified
        raise ArchiveError(f"{folder}: {rel} does not match its digest")
    return data
