"""Signatures over archives and reports: DSSE envelopes holding in-toto Statements, Ed25519 keys.

A signature says *who produced these bytes*, not that the scorer is right. Every signed file
``F`` gets a sibling ``F.dsse.json``: a DSSE envelope whose payload is an in-toto Statement (v1)
naming the signed files by sha256 (its *subjects*) and carrying a typed *predicate* (the cell's
identity and status, a report's inputs…). Verification recomputes the DSSE pre-authentication
encoding, checks the Ed25519 signature, then the caller checks each subject's digest.

Example::

    key = new_key()
    env = sign_statement(key, statement([Subject("a.tar.gz", sha256_hex(data))],
                                        CELL_PREDICATE, {"cell_id": "t/h/m/p/r0"}))
    st = verify_envelope(env_bytes(env), key.public_key())   # -> Statement, or SignatureError
    st.subject_digest("a.tar.gz") == sha256_hex(data)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
CELL_PREDICATE = "https://oracle.invalid/predicates/cell/v1"
CONTROLS_PREDICATE = "https://oracle.invalid/predicates/controls/v1"
REPORT_PREDICATE = "https://oracle.invalid/predicates/report/v1"
RUN_PREDICATE = "https://oracle.invalid/predicates/run/v1"
SIGNATURE_SUFFIX = ".dsse.json"
#: An envelope larger than this is refused before it is parsed.
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024


class SignatureError(ValueError):
    """An envelope that is malformed, signed by another key, or whose signature is wrong."""


class KeyFileError(ValueError):
    """A key file that cannot be read, or is not an Ed25519 key of the expected kind."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is actually signed.

    >>> pae("t", b"hi")
    b'DSSEv1 1 t 2 hi'
    """
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def key_id(public: Ed25519PublicKey) -> str:
    """The sha256 of the raw 32-byte public key, in hex: names a key in envelopes and reports."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_hex(raw)


# -- keys ----------------------------------------------------------------------------------------

#: The file stem of the default key pair: ``oracle.key`` and ``oracle.pub``.
KEY_NAME = "oracle"


def default_key_folder() -> Path:
    """Where keys live unless told otherwise: ``$XDG_CONFIG_HOME/oracle/keys``, or
    ``~/.config/oracle/keys``. Outside every run and project folder, and hidden from every
    isolated agent.

    >>> default_key_folder().parts[-2:]
    ('oracle', 'keys')
    """
    configured = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG rule: a relative value is to be ignored.
    base = Path(configured) if os.path.isabs(configured) else Path.home() / ".config"
    return base / "oracle" / "keys"


def default_private_key() -> Path:
    return default_key_folder() / f"{KEY_NAME}.key"


def default_public_key() -> Path:
    return default_key_folder() / f"{KEY_NAME}.pub"


def new_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def write_key_pair(private: Ed25519PrivateKey, key_path: Path, pub_path: Path) -> None:
    """Write the private key (PKCS#8 PEM, mode 0600, created exclusively) and the public key.
    A folder made for them is mode 0700."""
    for p in (key_path, pub_path):
        if p.exists():
            raise FileExistsError(f"{p} exists already; refusing to overwrite a key")
    key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pub_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # O_EXCL with mode 0600: the private key is never readable by others, not even briefly.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(key_path, 0o600)  # in case a umask or an ACL widened it
    pub = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pub_path.write_bytes(pub)


def _no_key_hint(path: Path) -> str:
    return "; make a key pair with `oracle keys new`" if not path.exists() else ""


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(
            f"{path}: not a readable private key: {exc}{_no_key_hint(path)}"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 private key ({type(key).__name__})")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not a readable public key: {exc}{_no_key_hint(path)}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 public key ({type(key).__name__})")
    return key


# -- statements and envelopes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """One signed artefact: its file name and sha256 (hex)."""

    name: str
    sha256: str


@dataclass(frozen=True)
class Statement:
    """An in-toto Statement v1: subjects, a predicate type and the predicate."""

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: Mapping[str, Any]

    def subject_digest(self, name: str) -> str | None:
        found = [s.sha256 for s in self.subjects if s.name == name]
        return found[0] if len(found) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": s.name, "digest": {"sha256": s.sha256}} for s in self.subjects],
            "predicateType": self.predicate_type,
            "predicate": dict(self.predicate),
        }


def statement(
    subjects: Sequence[Subject], predicate_type: str, predicate: Mapping[str, Any]
) -> Statement:
    return Statement(tuple(subjects), predicate_type, predicate)


def sign_statement(private: Ed25519PrivateKey, st: Statement) -> dict[str, Any]:
    """A DSSE envelope (as JSON-able dict) over the canonical JSON of `st`."""
    payload = json.dumps(st.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")
    sig = private.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [
            {"keyid": key_id(private.public_key()), "sig": base64.b64encode(sig).decode("ascii")}
        ],
    }


def envelope_bytes(envelope: Mapping[str, Any]) -> bytes:
    return json.dumps(envelope, sort_keys=True, indent=2).encode("utf-8") + b"\n"


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise SignatureError(f"{what} is not valid base64: {exc}") from None


def verify_envelope(data: bytes, public: Ed25519PublicKey) -> Statement:
    """The Statement inside a DSSE envelope signed by `public`, or `SignatureError` saying why.

    The signature is checked before the payload is parsed: nothing unsigned is interpreted.
    """
    if len(data) > MAX_ENVELOPE_BYTES:
        raise SignatureError(f"envelope is {len(data)} bytes (limit {MAX_ENVELOPE_BYTES})")
    try:
        env = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureError(f"envelope is not JSON: {exc}") from None
    if not isinstance(env, dict):
        raise SignatureError("envelope is not a JSON object")
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureError(f"payloadType is {env.get('payloadType')!r}, not {PAYLOAD_TYPE!r}")
    payload = _b64(env.get("payload"), "payload")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise SignatureError("envelope has no signatures")
    wanted = key_id(public)
    mine = [s for s in sigs if isinstance(s, dict) and s.get("keyid") == wanted]
    if not mine:
        ids = ", ".join(str(s.get("keyid"))[:16] for s in sigs if isinstance(s, dict))
        raise SignatureError(f"not signed by key {wanted[:16]}… (signed by: {ids or 'nobody'})")
    message = pae(PAYLOAD_TYPE, payload)
    for s in mine:
        try:
            public.verify(_b64(s.get("sig"), "signature"), message)
            break
        except InvalidSignature:
            continue
    else:
        raise SignatureError(f"signature by key {wanted[:16]}… does not verify")
    return _parse_statement(payload)


def _parse_statement(payload: bytes) -> Statement:
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureError(f"signed payload is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise SignatureError(f"signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    subjects: list[Subject] = []
    raw = doc.get("subject")
    if not isinstance(raw, list) or not raw:
        raise SignatureError("statement has no subject")
    for s in raw:
        digest = s.get("digest") if isinstance(s, dict) else None
        name = s.get("name") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha, str) or len(sha) != 64:
            raise SignatureError(f"statement subject {s!r} has no name and sha256 digest")
        subjects.append(Subject(name, sha))
    ptype = doc.get("predicateType")
    predicate = doc.get("predicate")
    if not isinstance(ptype, str) or not isinstance(predicate, dict):
        raise SignatureError("statement has no predicateType or predicate")
    return Statement(tuple(subjects), ptype, predicate)


def signature_path(path: Path) -> Path:
    """Where the envelope of `path` lives: ``<path>.dsse.json``."""
    return path.with_name(path.name + SIGNATURE_SUFFIX)
