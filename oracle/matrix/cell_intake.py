"""What the matrix driver does with what a worker hands back, before it signs anything.

A worker (this process, a local worker process, a Ray node) runs a cell and returns its
packed archive; only the driver holds the key. Before it signs, the driver applies the
reader's rules to the returned bytes (`oracle.matrix.cell_archive.read_cell`: members, manifest,
record, identity, verdicts), checks that the archive is named for the cell it asked for (so
it lands in ``OUT/cells`` and nowhere else) and that ``cell.json`` is what the matrix
declares, and derives what the signature says from the checked record and the run's id,
never from the worker's own claim.

An archive that breaks a rule is not signed. In its place the driver signs an archive of its
own for that cell, whose record is an execution error naming the rule and what was returned
(size and sha256): the cell is then an *invalid execution* wherever it is read — the run's
summary, `oracle reduce`, the report's invalid cells — counted, and in no denominator.

Example::

    packed = accept(cell, returned, matrix.meta(cell), run_id=info.run_id, task_digest=d)
    packed.predicate["status"]           # "invalid" when the worker's archive was refused
"""

from __future__ import annotations

import time

from oracle.authoring.versions import runtime_versions
from oracle.base.signing import sha256_hex
from oracle.evidence.record import Cell, TrialRecord
from oracle.judging.verdict import Metric
from oracle.matrix.cell_archive import (
    DEFAULT_LIMITS,
    MANIFEST,
    CellMeta,
    Limits,
    PackedCell,
    Rejected,
    archive_name,
    cell_predicate,
    pack_cell,
    read_cell,
)

#: The first words of the execution error of a cell whose returned archive was refused.
REFUSED = "the worker's archive was refused before signing"


def accept(
    cell: Cell,
    returned: PackedCell | None,
    meta: CellMeta,
    *,
    run_id: str,
    task_digest: str,
    limits: Limits = DEFAULT_LIMITS,
) -> PackedCell:
    """What the driver signs for `cell`: the worker's archive with the predicate derived from
    it, or, when it breaks a rule (`None`: the worker returned nothing for the cell), the
    driver's own archive recording the cell as invalid, naming the rule."""
    try:
        return checked(cell, returned, meta, run_id=run_id, limits=limits)
    except Rejected as exc:
        return refused(cell, meta, exc, returned, run_id=run_id, task_digest=task_digest)


def checked(
    cell: Cell,
    returned: PackedCell | None,
    meta: CellMeta,
    *,
    run_id: str,
    limits: Limits = DEFAULT_LIMITS,
) -> PackedCell:
    """The returned archive and the predicate to sign, or `Rejected` with the rule broken."""
    if returned is None:
        raise Rejected("cell-mismatch", "the worker returned no archive for this cell")
    want = archive_name(cell)
    if returned.name != want:
        name = repr(returned.name[:200])
        if _leaves_folder(returned.name):
            raise Rejected(
                "unsafe-path",
                f"archive name {name} is not a plain file name: it would be written outside "
                "the run's cells folder",
            )
        raise Rejected("cell-mismatch", f"archive name {name}; the cell asked for is {want}")
    files, record, got = read_cell(returned.name, returned.data, returned.predicate, limits)
    if record.cell != cell:
        raise Rejected("cell-mismatch", f"asked for {cell.id}, the archive holds {record.cell.id}")
    if got != meta:
        raise Rejected(
            "settings-mismatch", f"{cell.id}: cell.json is not what the matrix declares for it"
        )
    predicate = {**cell_predicate(record, sha256_hex(files[MANIFEST])), "run_id": run_id}
    return PackedCell(want, returned.data, predicate)


def refused(
    cell: Cell,
    meta: CellMeta,
    exc: Rejected,
    returned: PackedCell | None,
    *,
    run_id: str,
    task_digest: str,
) -> PackedCell:
    """The driver's archive for a cell whose returned archive broke `exc.rule`: a record with
    that as its execution error and every verdict unknown, and nothing else of the worker's."""
    what = (
        f"{len(returned.data)} bytes named {returned.name[:200]!r}, sha256 "
        f"{sha256_hex(returned.data)}"
        if returned is not None
        else "nothing"
    )
    error = f"{REFUSED}: {exc.rule}: {exc.detail} (it returned {what})"
    now = time.time()
    record = TrialRecord(
        cell=cell,
        utility_achieved=None,
        security_breached=None,
        autonomy_achieved=None,
        evaluation_errors={m.value: f"no verdict: {error}" for m in Metric},
        error=error,
        task_digest=task_digest,
        versions=runtime_versions(),
        started_at=now,
        finished_at=now,
    )
    files = {"record.json": record.model_dump_json(indent=2).encode("utf-8") + b"\n"}
    packed = pack_cell(files, record, meta)
    return PackedCell(packed.name, packed.data, {**packed.predicate, "run_id": run_id})


def _leaves_folder(name: str) -> bool:
    """Whether `name`, joined to a folder, would name anything but a file in it."""
    return not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name
