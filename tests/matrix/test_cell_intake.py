"""The driver checks what a worker returns before it signs: an archive that breaks a reading
rule is never signed, and its cell is recorded as an invalid execution naming the rule.

A worker here is made to misbehave by replacing what `WorkerContext.run_cell` returns for one
cell (as a compromised or broken worker would); the rest of the run is the real one, serial,
so the replacement applies in this process.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oracle.base.signing import new_key, sha256_hex, signature_path, write_key_pair
from oracle.cli.app import app
from oracle.evidence.record import Cell, TrialRecord
from oracle.matrix.cell_archive import (
    MANIFEST,
    PackedCell,
    cell_predicate,
    manifest_bytes,
    members,
    open_cell,
    pack,
)
from oracle.matrix.cell_intake import REFUSED
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.run import WorkerContext, _paired, run_matrix
from oracle.matrix.spec import load_matrix
from oracle.reports.model import build_report
from tests.forked_cli import ORACLE
from tests.matrix_helpers import EMBEDDED, write_matrix

Tamper = Callable[[PackedCell], PackedCell]


def _files(packed: PackedCell) -> dict[str, bytes]:
    return {k: v for k, v in members(packed.data).items() if k != MANIFEST}


def _record(packed: PackedCell) -> TrialRecord:
    return TrialRecord.model_validate_json(members(packed.data)["record.json"])


def repack(packed: PackedCell, files: dict[str, bytes]) -> PackedCell:
    """`files` packed under the same name, with the predicate a worker derives from them (a
    consistent lie gets past the identity checks to the rule under test)."""
    record = TrialRecord.model_validate_json(files["record.json"])
    predicate = cell_predicate(record, sha256_hex(manifest_bytes(files)))
    return PackedCell(packed.name, pack(files), predicate)


def _with_record(packed: PackedCell, record: TrialRecord) -> PackedCell:
    data = record.model_dump_json(indent=2).encode() + b"\n"
    return repack(packed, {**_files(packed), "record.json": data})


def escape(packed: PackedCell) -> PackedCell:
    return PackedCell("../../escaped.tar.gz", packed.data, packed.predicate)


def truncated(packed: PackedCell) -> PackedCell:
    return PackedCell(packed.name, packed.data[: len(packed.data) // 2], packed.predicate)


def inconsistent(packed: PackedCell) -> PackedCell:
    r = _record(packed)
    forged = r.model_copy(
        update={"autonomy_achieved": None, "evaluation_errors": {"autonomy_achieved": "x"}}
    )
    return _with_record(packed, forged)


def lying_status(packed: PackedCell) -> PackedCell:
    return PackedCell(packed.name, packed.data, {**packed.predicate, "status": "invalid"})


def other_settings(packed: PackedCell) -> PackedCell:
    files = _files(packed)
    meta = json.loads(files["cell.json"])
    meta["harness"]["settings"] = {"temperature": 2}
    files["cell.json"] = json.dumps(meta, indent=2).encode() + b"\n"
    return repack(packed, files)


def other_cell(packed: PackedCell) -> PackedCell:
    r = _record(packed)
    moved = r.model_copy(update={"cell": r.cell.model_copy(update={"repetition": 1})})
    meta = json.loads(_files(packed)["cell.json"])
    meta["cell"]["repetition"] = 1
    files = {
        **_files(packed),
        "record.json": moved.model_dump_json(indent=2).encode() + b"\n",
        "cell.json": json.dumps(meta, indent=2).encode() + b"\n",
    }
    return repack(packed, files)


def tamper_one(monkeypatch: pytest.MonkeyPatch, victim: str, how: Tamper) -> list[PackedCell]:
    """Make the worker return `how(archive)` for the cell `victim`; the bad returns are kept."""
    real = WorkerContext.run_cell
    bad: list[PackedCell] = []

    def run_cell(self: WorkerContext, cell: Cell) -> PackedCell:
        packed = real(self, cell)
        if cell.id != victim:
            return packed
        bad.append(how(packed))
        return bad[-1]

    monkeypatch.setattr(WorkerContext, "run_cell", run_cell)
    return bad


VICTIM = "log-level/obedient/none/default/r0"


@pytest.mark.parametrize(
    ("how", "rule"),
    [
        (escape, "unsafe-path"),
        (truncated, "archive-malformed"),
        (inconsistent, "record-inconsistent"),
        (lying_status, "status-mismatch"),
        (other_settings, "settings-mismatch"),
        (other_cell, "cell-mismatch"),
    ],
)
def test_a_returned_archive_that_breaks_a_rule_is_not_signed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: Tamper, rule: str
):
    matrix = load_matrix(write_matrix(tmp_path / "m", tasks=EMBEDDED[0]))
    bad = tamper_one(monkeypatch, VICTIM, how)
    key = new_key()
    out = tmp_path / "out" / "run"
    summary = run_matrix(matrix, out, key)
    (returned,) = bad
    assert len(summary.written) == 2
    (invalid,) = summary.invalid
    assert invalid.startswith(f"{VICTIM}: {REFUSED}: {rule}: "), invalid
    assert summary.refused == summary.invalid
    # Nothing was written where the worker pointed, nor anywhere but the run folder.
    assert not (tmp_path / "escaped.tar.gz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["run"]
    # No envelope signs the bytes the worker returned.
    envelopes = [p.read_text() for p in out.rglob("*.dsse.json")]
    assert all(sha256_hex(returned.data) not in json.dumps(e) for e in envelopes)
    # In its place, the driver's own archive: the cell as an invalid execution, naming the rule.
    victim = out / "cells" / "log-level__obedient__none__default__r0.tar.gz"
    opened = open_cell(victim, key.public_key())
    assert opened.sha256 != sha256_hex(returned.data)
    assert opened.statement.predicate["status"] == "invalid"
    record = opened.record
    assert record.error is not None and record.error.startswith(f"{REFUSED}: {rule}: ")
    assert f"sha256 {sha256_hex(returned.data)}" in record.error
    assert (record.utility_achieved, record.security_breached, record.autonomy_achieved) == (
        None,
        None,
        None,
    )
    # The run reduces: the cell is counted, as invalid, and its error is in the report.
    expected = expected_from(matrix)
    verified = verify_run(out, expected, key.public_key())
    report = build_report(
        verified,
        matrix=matrix.name,
        matrix_digest=matrix.digest,
        signer_key_id="k" * 64,
        require_parity=True,
    )
    assert (report.attempts, report.invalid) == (2, 1)
    assert report.invalid_cells[VICTIM].startswith(f"{REFUSED}: {rule}: ")
    # A resumed run keeps it, like any invalid execution.
    monkeypatch.undo()
    again = run_matrix(matrix, out, key)
    assert again.written == [] and len(again.kept) == 2


def test_a_batch_returned_short_pairs_no_cell_with_any_archive():
    cells = [Cell(harness="h", task="t", repetition=r) for r in range(3)]
    packed = [PackedCell(f"{c.folder}.tar.gz", b"", {}) for c in cells]
    assert list(_paired(cells, packed)) == list(zip(cells, packed, strict=True))
    assert list(_paired(cells, packed[:2])) == [(c, None) for c in cells]


def test_the_cli_names_the_refused_cell_and_reduce_counts_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    matrix = write_matrix(tmp_path / "m", tasks=EMBEDDED[0])
    key = new_key()
    write_key_pair(key, tmp_path / "keys" / "oracle.key", tmp_path / "keys" / "oracle.pub")
    tamper_one(monkeypatch, VICTIM, escape)
    args = ["matrix", "run", str(matrix), "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, [*args, "--key", str(tmp_path / "keys" / "oracle.key")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"invalid execution {VICTIM}: {REFUSED}: unsafe-path: archive name" in text
    assert "2 cells: 2 run now, 0 kept from before, 1 invalid (1 refused before signing)" in text
    assert signature_path(
        tmp_path / "run" / "cells" / f"{Cell(harness='obedient', task='log-level').folder}.tar.gz"
    ).is_file()
    oracle = ORACLE
    reduced = subprocess.run(
        [
            oracle,
            "reduce",
            str(tmp_path / "run"),
            "--expect",
            str(matrix),
            "--key",
            str(tmp_path / "keys" / "oracle.pub"),
            "--out",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert reduced.returncode == 0, reduced.stdout + reduced.stderr
    assert "verified 2 archives (1 invalid executions)" in reduced.stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["invalid_cells"][VICTIM].startswith(f"{REFUSED}: unsafe-path: ")
