"""Ed25519 keys and DSSE envelopes over in-toto Statements."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from oracle.base.signing import (
    CELL_PREDICATE,
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    KeyFileError,
    SignatureError,
    Subject,
    key_id,
    load_private_key,
    load_public_key,
    new_key,
    pae,
    sha256_hex,
    sign_statement,
    statement,
    verify_envelope,
    write_key_pair,
)


def test_pae_is_the_dsse_encoding():
    assert pae(PAYLOAD_TYPE, b"{}") == b"DSSEv1 28 application/vnd.in-toto+json 2 {}"


def test_round_trip_and_the_statement_shape():
    key = new_key()
    st = statement([Subject("a.tar.gz", sha256_hex(b"a"))], CELL_PREDICATE, {"cell_id": "x"})
    env = sign_statement(key, st)
    assert env["payloadType"] == PAYLOAD_TYPE
    assert env["signatures"][0]["keyid"] == key_id(key.public_key())
    doc = json.loads(base64.b64decode(env["payload"]))
    assert doc["_type"] == STATEMENT_TYPE
    assert doc["subject"] == [{"name": "a.tar.gz", "digest": {"sha256": sha256_hex(b"a")}}]
    got = verify_envelope(json.dumps(env).encode(), key.public_key())
    assert got.subject_digest("a.tar.gz") == sha256_hex(b"a")
    assert got.predicate == {"cell_id": "x"}


def test_another_key_or_a_changed_payload_is_refused():
    key = new_key()
    st = statement([Subject("a", "0" * 64)], CELL_PREDICATE, {"status": "valid"})
    env = sign_statement(key, st)
    with pytest.raises(SignatureError, match="not signed by key"):
        verify_envelope(json.dumps(env).encode(), new_key().public_key())
    forged = json.loads(base64.b64decode(env["payload"]))
    forged["predicate"]["status"] = "invalid"
    env["payload"] = base64.b64encode(json.dumps(forged).encode()).decode()
    with pytest.raises(SignatureError, match="does not verify"):
        verify_envelope(json.dumps(env).encode(), key.public_key())


def test_key_files(tmp_path: Path):
    key = new_key()
    write_key_pair(key, tmp_path / "k.key", tmp_path / "k.pub")
    assert (tmp_path / "k.key").stat().st_mode & 0o777 == 0o600
    assert key_id(load_private_key(tmp_path / "k.key").public_key()) == key_id(key.public_key())
    assert key_id(load_public_key(tmp_path / "k.pub")) == key_id(key.public_key())
    with pytest.raises(FileExistsError):
        write_key_pair(new_key(), tmp_path / "k.key", tmp_path / "other.pub")
    with pytest.raises(KeyFileError, match="not a readable public key"):
        load_public_key(tmp_path / "k.key")
    with pytest.raises(KeyFileError, match="not a readable private key"):
        load_private_key(tmp_path / "k.pub")
