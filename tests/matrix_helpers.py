"""Helpers for the matrix, archive and reducer tests: matrices, keys, and crafted archives."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import textwrap
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oracle.base.signing import CELL_PREDICATE, Subject, sha256_hex, statement
from oracle.evidence.record import TrialRecord
from oracle.matrix.cell_archive import (
    MANIFEST,
    CellMeta,
    manifest_bytes,
    write_signed,
)
from oracle.matrix.run_id import RUN_FILE
from tests.conftest import DEMO

#: The demo tasks on the embedded defaults (SQLite and folders): fixed figures whatever
#: servers are up.
EMBEDDED = tuple(
    f"{DEMO}/task_{n}.py" for n in ("log_level", "orders_cleanup", "release_notes", "user_rename")
)


def write_matrix(
    folder: Path,
    *,
    repetitions: int = 1,
    tasks: str | Iterable[str] = EMBEDDED,
    harnesses: str = 'careful = {agent = "careful"}\nobedient = {agent = "obedient"}',
    extra: str = "",
    name: str = "m.toml",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        textwrap.dedent(
            f"""\
            schema_version = 1
            name = "test"
            tasks = [{", ".join(f'"{t}"' for t in ([tasks] if isinstance(tasks, str) else tasks))}]
            repetitions = {repetitions}
            {extra}
            [harnesses]
            """
        )
        + harnesses
        + "\n"
    )
    return path


@dataclass
class Member:
    """One tar member to craft: any type, any name, any bytes."""

    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    linkname: str = ""
    size: int | None = None


def raw_tar(members: Iterable[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type = m.type
            info.linkname = m.linkname
            info.mtime = 0
            if m.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                info.size = len(m.data) if m.size is None else m.size
                tar.addfile(info, io.BytesIO(m.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def gz(raw: bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    return comp.compress(raw) + comp.flush()


def files_of(members: dict[str, bytes]) -> list[Member]:
    """Members for `members` plus a correct manifest."""
    out = [Member(n, d) for n, d in sorted(members.items())]
    out.append(Member(MANIFEST, manifest_bytes(members)))
    return out


def sign_bytes(
    folder: Path,
    name: str,
    data: bytes,
    key: Ed25519PrivateKey,
    record: TrialRecord,
    *,
    status: str | None = None,
    manifest: bytes | None = None,
    cell: dict[str, object] | None = None,
    run_id: str | None = None,
) -> Path:
    """Write `data` as `name` with a valid envelope whose predicate describes `record`, in the
    run `run_id` (by default that of the ``run.json`` in or above `folder`, if any)."""
    predicate = {
        "cell": cell if cell is not None else record.cell.model_dump(mode="json"),
        "cell_id": record.cell.id,
        "status": status or ("invalid" if record.error else "valid"),
        "error": record.error,
        "manifest_sha256": sha256_hex(manifest) if manifest is not None else None,
    }
    run_id = run_id or run_id_near(folder)
    if run_id is not None:
        predicate["run_id"] = run_id
    st = statement([Subject(name, sha256_hex(data))], CELL_PREDICATE, predicate)
    return write_signed(folder, name, data, st, key)


def run_id_near(folder: Path) -> str | None:
    """The run id of the ``run.json`` in `folder` or the nearest folder above it."""
    for where in (folder, *folder.parents):
        if (where / RUN_FILE).is_file():
            return str(json.loads((where / RUN_FILE).read_text())["run_id"])
    return None


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def meta_bytes(meta: CellMeta) -> bytes:
    return meta.model_dump_json(indent=2).encode() + b"\n"
