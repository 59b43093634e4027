"""Canonical JSON and digests: one byte form for every value that evidence holds.

Snapshots, diffs and records cross process and machine boundaries, so every value in them has
exactly one JSON form. Plain JSON types map to themselves; the rest are tagged objects that
cannot be confused with a string that happens to look alike:

>>> to_jsonable(b"\\x00\\x01")
{'$bytes': 'AAE='}
>>> to_jsonable(float("inf"))
{'$float': 'inf'}
>>> dumps({"b": 1, "a": [1.5, None]})
b'{"a":[1.5,null],"b":1}'

Across database backends a value has one form whatever driver read it: a timestamp with a zone
is written in UTC (``2024-01-01T09:00:00+00:00``), a decimal keeps its scale, a JSON column holds
its parsed structure, and a JSON ``null`` stored in a column is `JSON_NULL` (``{"$json": null}``),
so that it stays apart from SQL ``NULL`` (``None``).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import math
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

type Json = bool | int | float | str | list["Json"] | dict[str, "Json"] | None


class JsonNull:
    """A JSON ``null`` held in a column: not the same as SQL ``NULL`` (``None``)."""

    _instance: JsonNull | None = None

    def __new__(cls) -> JsonNull:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "JSON_NULL"

    def __eq__(self, other: object) -> bool:
        return other is self or other == {"$json": None}

    def __hash__(self) -> int:
        return hash("JSON_NULL")


#: The one `JsonNull`.
JSON_NULL = JsonNull()


def _default(value: Any) -> Any:
    """Tagged forms for the types that JSON has no word for."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, _dt.timedelta):
        return {"$timedelta": value.total_seconds()}
    if isinstance(value, JsonNull):
        return {"$json": None}
    if isinstance(value, _dt.datetime):
        # orjson writes aware datetimes with their own offset; one instant gets one form.
        return _datetime(value)
    raise TypeError(f"cannot put a value of type {type(value).__name__} into evidence: {value!r}")


def _float(value: float) -> Json:
    if math.isfinite(value):
        return value
    return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def _datetime(value: _dt.datetime) -> str:
    if value.tzinfo is not None and value.utcoffset() is not None:
        value = value.astimezone(_dt.UTC)
    return value.isoformat()


def to_jsonable(value: Any) -> Json:
    """The canonical JSON-able form of `value` (tagged objects for bytes, decimals, non-finite
    floats, timedeltas; ISO strings for dates and times; lists for tuples and sets)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        # JSON readers lose integers beyond 64 bits; keep them exact as text.
        return value if -(2**63) <= value < 2**64 else {"$int": str(value)}
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, _dt.datetime):
        return _datetime(value)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, set | frozenset):
        return [to_jsonable(v) for v in sorted(value, key=repr)]
    if hasattr(value, "model_dump"):
        return to_jsonable(value.model_dump(mode="python"))
    return to_jsonable(_default(value))


def dumps(value: Any) -> bytes:
    """Canonical JSON bytes of `value`: sorted keys, no whitespace, tagged non-JSON types."""
    return orjson.dumps(to_jsonable(value), option=orjson.OPT_SORT_KEYS)


def dumps_pretty(value: Any) -> bytes:
    """Canonical JSON, indented, for files that people open in an editor."""
    return orjson.dumps(
        to_jsonable(value),
        option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
    )


def row_digest(row: tuple[Any, ...]) -> bytes:
    """A 16-byte digest of one row, exact for every value the database drivers return.

    The fast path hashes orjson's bytes. orjson writes NaN and infinities as ``null``, so a row
    whose bytes contain ``null`` is hashed through the exact, slower form instead."""
    try:
        raw = orjson.dumps(row, default=_default)
    except orjson.JSONEncodeError:
        raw = b"null"  # forces the exact path below
    if b"null" in raw:
        raw = b"x" + orjson.dumps(to_jsonable(row))
    return hashlib.blake2b(raw, digest_size=16).digest()


def digest(data: bytes) -> str:
    """sha256 of `data` as ``sha256:<hex>``, the form every digest in a record takes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    """sha256 of the canonical JSON of `value`."""
    return digest(dumps(value))


def native(value: Any) -> Any:
    """The Python value of a canonical one: tagged forms back to `Decimal`, bytes, floats…

    Predicates read canonical values; use this to compute with them:

    >>> native({"$decimal": "49.90"}) + 1
    Decimal('50.90')
    >>> native([{"$bytes": "AAE="}, 3])
    [b'\\x00\\x01', 3]
    """
    if isinstance(value, list):
        return [native(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, raw), *_ = value.items()
            if tag == "$decimal":
                return decimal.Decimal(raw)
            if tag == "$bytes":
                return base64.b64decode(raw)
            if tag == "$float":
                return float(raw)
            if tag == "$int":
                return int(raw)
            if tag == "$timedelta":
                return _dt.timedelta(seconds=raw)
            if tag == "$json" and raw is None:
                return JSON_NULL
        return {k: native(v) for k, v in value.items()}
    return value
