"""A run's id: a random nonce made once per run folder and named in every statement it signs.

`oracle matrix run` writes ``OUT/run.json`` (and its envelope, ``run.json.dsse.json``) the
first time it runs into OUT and reuses the id when it resumes there. The signed statement of
every cell archive and every controls result carries the id (``run_id`` in its predicate), so
a cell taken from another run of the same matrix — same cells, same key, other bytes — is
refused by `oracle reduce` (``run-mismatch``) and discarded by a resumed run.

Example::

    info, note = ensure_run(Path("runs/m"), key)   # made now, or read back and verified
    info.run_id                                     # 32 hex digits
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oracle.base.signing import (
    RUN_PREDICATE,
    Subject,
    sha256_hex,
    signature_path,
    statement,
)
from oracle.matrix.cell_archive import Rejected, read_signed_file, write_signed

RUN_FILE = "run.json"
_MAX_BYTES = 64 * 1024


class RunInfo(BaseModel):
    """``run.json``: the run's id and when it was made."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    run_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="128 random bits, in hex")
    created_at: str


def run_id_of(predicate: Mapping[str, Any]) -> str | None:
    """The run id a signed predicate names, or None (signed before runs had ids)."""
    value = predicate.get("run_id")
    return value if isinstance(value, str) else None


def read_run(path: Path, public: Ed25519PublicKey) -> RunInfo:
    """A verified ``run.json``, or `Rejected` with the rule it breaks."""
    data, st = read_signed_file(
        path, public, predicate_type=RUN_PREDICATE, subject=RUN_FILE, max_bytes=_MAX_BYTES
    )
    try:
        info = RunInfo.model_validate_json(data)
    except ValidationError as exc:
        raise Rejected("record-invalid", str(exc.errors()[0]["msg"])) from None
    if run_id_of(st.predicate) != info.run_id:
        raise Rejected("record-invalid", f"{path.name} and its signed statement name other runs")
    return info


def ensure_run(out: Path, key: Ed25519PrivateKey) -> tuple[RunInfo, str | None]:
    """The run of folder `out`: read back when ``run.json`` verifies with `key`, else made
    now (then the second value says why an existing one was replaced)."""
    path = out / RUN_FILE
    note = None
    if path.exists() or signature_path(path).exists():
        try:
            return read_run(path, key.public_key()), None
        except Rejected as exc:
            note = f"{RUN_FILE}: {exc.rule}: {exc.detail}; a new run id was made"
    info = RunInfo(
        run_id=secrets.token_hex(16),
        created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    data = info.model_dump_json(indent=2).encode("utf-8") + b"\n"
    st = statement([Subject(RUN_FILE, sha256_hex(data))], RUN_PREDICATE, {"run_id": info.run_id})
    write_signed(out, RUN_FILE, data, st, key)
    return info, note
