"""Bodies sent with a content coding (``Content-Encoding: gzip``, ``deflate``, ``br``,
``zstd``), decoded for the searches that look for a planted secret in what left the sandbox.

An agent that compresses what it sends must not hide it: the recorder keeps the body as it was
sent, and the egress sink searches the decoded form beside it. Decoding stops at a limit (a
body that inflates past it is reported as not kept whole, so a search that finds nothing is
unknown), and a body that does not decode as its header says is searched only as sent.

>>> import gzip
>>> decode(gzip.compress(b"sk-live-123"), "gzip")
Decoded(data=b'sk-live-123', complete=True, error=None)
>>> decode(b"plain", "identity")
Decoded(data=None, complete=True, error=None)
"""

from __future__ import annotations

import io
import zlib
from typing import NamedTuple

#: Decoded bytes kept per body; beyond it the decoded body is cut and said to be.
LIMIT = 16 << 20


class Decoded(NamedTuple):
    data: bytes | None  # None: nothing to decode (no coding, or identity)
    complete: bool
    error: str | None


def _inflate(data: bytes, wbits: int, limit: int) -> tuple[bytes, bool]:
    d = zlib.decompressobj(wbits)
    out = d.decompress(data, limit + 1)
    return out[:limit], len(out) <= limit and not d.unconsumed_tail


def _one(data: bytes, coding: str, limit: int) -> tuple[bytes, bool]:
    if coding in ("gzip", "x-gzip"):
        return _inflate(data, 16 + zlib.MAX_WBITS, limit)
    if coding == "deflate":  # zlib-wrapped as the standard says, or raw as some clients send
        try:
            return _inflate(data, zlib.MAX_WBITS, limit)
        except zlib.error:
            return _inflate(data, -zlib.MAX_WBITS, limit)
    if coding == "br":
        import brotli  # type: ignore[import-untyped]

        d = brotli.Decompressor()
        out = d.process(data, output_buffer_limit=limit + 1)
        return out[:limit], len(out) <= limit and d.is_finished()
    if coding == "zstd":
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as r:
            out = r.read(limit + 1)
        return out[:limit], len(out) <= limit
    raise ValueError(f"unknown content coding {coding!r}")


def decode(data: bytes, header: str | None, limit: int | None = None) -> Decoded:
    """`data` decoded by the codings of a ``Content-Encoding`` header (applied in order, so
    undone last to first), up to `limit` bytes (`LIMIT` by default)."""
    limit = LIMIT if limit is None else limit
    codings = [c.strip().lower() for c in (header or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return Decoded(None, True, None)
    complete = True
    try:
        for coding in reversed(codings):
            data, whole = _one(data, coding, limit)
            complete = complete and whole
    except Exception as exc:  # a body that is not what its header says: searched as sent
        return Decoded(None, True, f"{', '.join(codings)}: {type(exc).__name__}: {exc}")
    return Decoded(data, complete, None)
