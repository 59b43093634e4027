"""A report as files: ``report.json``, ``report.md``, a self-contained ``report.html``, and
``report.dsse.json`` signing all three (an unsigned report, over trial folders, has no
envelope: `write_unsigned`). Everything is written into the one output folder, each
file atomically; nothing is written anywhere else.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from oracle.base.signing import (
    REPORT_PREDICATE,
    SignatureError,
    Statement,
    Subject,
    envelope_bytes,
    sha256_hex,
    sign_statement,
    statement,
    verify_envelope,
)
from oracle.matrix.cell_archive import write_atomic
from oracle.reports.html import html_page
from oracle.reports.markdown import markdown
from oracle.reports.model import Report

FILES = ("report.json", "report.md", "report.html")
ENVELOPE = "report.dsse.json"


def render(r: Report) -> dict[str, bytes]:
    return {
        "report.json": r.model_dump_json(indent=2).encode("utf-8") + b"\n",
        "report.md": markdown(r).encode("utf-8"),
        "report.html": html_page(r).encode("utf-8"),
    }


def write_report(r: Report, out: Path, key: Ed25519PrivateKey) -> dict[str, Path]:
    """Write the three files and their envelope into `out` (and nowhere else)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(f"{out} is not a folder; give --out a folder to write the report in")
    out.mkdir(parents=True, exist_ok=True)
    files = render(r)
    st = statement(
        [Subject(n, sha256_hex(files[n])) for n in FILES],
        REPORT_PREDICATE,
        {
            "matrix": r.matrix,
            "matrix_digest": r.matrix_digest,
            "run_id": r.run_id,
            "attempts": r.attempts,
            "invalid": r.invalid,
            "inputs_sha256": sha256_hex(
                "".join(f"{i.sha256}  {i.path}\n" for i in r.inputs).encode("utf-8")
            ),
        },
    )
    written = {}
    for name, data in files.items():
        target = out / name
        if target.is_symlink():
            target.unlink()  # never write through a link planted in the output folder
        write_atomic(target, data)
        written[name] = target
    env = out / ENVELOPE
    if env.is_symlink():
        env.unlink()
    write_atomic(env, envelope_bytes(sign_statement(key, st)))
    written[ENVELOPE] = env
    return written


def write_unsigned(r: Report, out: Path) -> dict[str, Path]:
    """Write the three files of an unsigned report (`oracle.reports.trials`) into `out`, and
    no envelope. A folder that holds a signed report's envelope is refused: the new files
    would sit beside a signature that is not theirs."""
    if not r.unsigned:
        raise ValueError("a report of signed archives is written with write_report")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FileExistsError(f"{out} is not a folder; give --out a folder to write the report in")
    if (out / ENVELOPE).exists() or (out / ENVELOPE).is_symlink():
        raise FileExistsError(
            f"{out} holds a signed report ({ENVELOPE}); write the unsigned one elsewhere"
        )
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, data in render(r).items():
        target = out / name
        if target.is_symlink():
            target.unlink()  # never write through a link planted in the output folder
        write_atomic(target, data)
        written[name] = target
    return written


def verify_report(out: Path, public: Ed25519PublicKey) -> Statement:
    """The report's statement if its envelope verifies and every file matches its digest."""
    st = verify_envelope((out / ENVELOPE).read_bytes(), public)
    if st.predicate_type != REPORT_PREDICATE:
        raise SignatureError(f"predicate type {st.predicate_type!r} is not a report's")
    for name in FILES:
        if st.subject_digest(name) != sha256_hex((out / name).read_bytes()):
            raise SignatureError(f"{out / name} is not the file that was signed")
    return st
