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

from oracle.cell_archive import Rejected, read_bounded, write_signed
from oracle.signing import (
    MAX_ENVELOPE_BYTES,
    RUN_PREDICATE,
    SignatureError,
    Subject,
    sha256_hex,
    signature_path,
    statement,
    verify_envelope,
)

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
    try:
        data = read_bounded(path, _MAX_BYTES)
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
    if st.predicate_type != RUN_PREDICATE:
        raise Rejected("signature-invalid", f"predicate type {st.predicate_type!r}")
    if st.subject_digest(RUN_FILE) != sha256_hex(data):
        raise Rejected("archive-digest-mismatch", f"{path.name} is not the file that was signed")
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
