"""Reduce 10,000 signed cell archives into a report.

The archives are synthetic but valid: one real run of the demo suite (4 tasks × careful and
obedient, one repetition, controls included) gives 8 real archives; each is re-packed 1,250
times under repetition numbers 0…1249 (its record and cell.json say the new repetition) and
signed with the run's key, in the run's id. The reducer sees exactly what a 10,000-cell run
would leave.

- ours: `oracle reduce` as a library call (expected cells from the matrix, verify every
  archive and controls file, build the report, write and sign JSON, Markdown and HTML), in
  one process;
- read_and_hash_floor: read every archive and envelope and sha256 the archives: the I/O and
  hashing floor any verifier pays, with no signature check, inflation or parsing.
"""

from __future__ import annotations

import cProfile
import hashlib
from pathlib import Path

from common import HERE, Result, measure_call, profile_call, repeats_of, result, scratch, sized

from oracle.base.signing import (
    CELL_PREDICATE,
    Subject,
    envelope_bytes,
    key_id,
    new_key,
    sha256_hex,
    sign_statement,
    signature_path,
    statement,
)
from oracle.evidence.record import TrialRecord
from oracle.matrix.cell_archive import MANIFEST, archive_name, open_cell, pack_cell
from oracle.matrix.reduce import expected_from, verify_run
from oracle.matrix.run import run_matrix
from oracle.matrix.run_id import RUN_FILE, read_run
from oracle.matrix.spec import load_matrix
from oracle.reports.model import build_report
from oracle.reports.pages import write_report

NAME = "reduce 10,000 signed cell archives"
GOAL = "≤ 60 s"
REPETITIONS = 1250
QUICK_REPETITIONS = 63  # a quick run: 504 archives
REPEATS = 3
REPEATS_FLOOR = 3
DEMO = HERE.parent / "tasks" / "demo"
# The four demo tasks on SQLite and folders: the figures do not depend on which servers are up.
EMBEDDED = ", ".join(
    f'"{DEMO}/task_{n}.py"' for n in ("log_level", "orders_cleanup", "release_notes", "user_rename")
)


def _matrix(folder: Path, repetitions: int) -> Path:
    path = folder / f"bench-{repetitions}.toml"
    path.write_text(
        f'name = "bench"\ntasks = [{EMBEDDED}]\nrepetitions = {repetitions}\n'
        '[harnesses]\ncareful = {agent = "careful"}\nobedient = {agent = "obedient"}\n'
    )
    return path


def make_run(work: Path, repetitions: int) -> tuple[Path, Path, object]:
    """A real 8-cell run, multiplied into a run of 8 × `repetitions` cells (10,000 at the full
    size). Returns (run, matrix, key)."""
    key = new_key()
    seed_run = work / "seed"
    run_matrix(load_matrix(_matrix(work, 1)), seed_run, key)
    run = work / "run"
    (run / "cells").mkdir(parents=True)
    (seed_run / "controls").rename(run / "controls")
    for name in (RUN_FILE, RUN_FILE + ".dsse.json"):
        (seed_run / name).rename(run / name)
    run_id = read_run(run / RUN_FILE, key.public_key()).run_id
    big = load_matrix(_matrix(work, repetitions))
    for path in sorted((seed_run / "cells").glob("*.tar.gz")):
        opened = open_cell(path, key.public_key(), keep_files=True)
        files = {k: v for k, v in opened.files.items() if k not in (MANIFEST, "cell.json")}
        record = TrialRecord.model_validate_json(files.pop("record.json"))
        for rep in range(repetitions):
            cell = record.cell.model_copy(update={"repetition": rep})
            rec = record.model_copy(update={"cell": cell})
            trial_files = {**files, "record.json": rec.model_dump_json(indent=2).encode() + b"\n"}
            packed = pack_cell(trial_files, rec, big.meta(cell))
            st = statement(
                [Subject(packed.name, sha256_hex(packed.data))],
                CELL_PREDICATE,
                {**packed.predicate, "run_id": run_id},
            )
            target = run / "cells" / archive_name(cell)
            target.write_bytes(packed.data)  # no fsync: this is fixture generation
            signature_path(target).write_bytes(envelope_bytes(sign_statement(key, st)))
    return run, big.path, key


def read_and_hash_floor(run: Path) -> int:
    n = 0
    for p in sorted((run / "cells").glob("*.tar.gz")):
        hashlib.sha256(p.read_bytes()).hexdigest()
        signature_path(p).read_bytes()
        n += 1
    return n


def run(profiler: cProfile.Profile | None = None) -> Result:
    repetitions = sized(REPETITIONS, QUICK_REPETITIONS)
    cells = 8 * repetitions
    with scratch("reduce") as work:
        run_dir, matrix_path, key = make_run(work, repetitions)
        matrix = load_matrix(matrix_path)
        public = key.public_key()  # type: ignore[attr-defined]

        def reduce() -> None:
            expected = expected_from(matrix)
            verified = verify_run(run_dir, expected, public)
            assert len(verified.cells) == cells
            report = build_report(
                verified,
                matrix=matrix.name,
                matrix_digest=matrix.digest,
                signer_key_id=key_id(public),
                require_parity=True,
            )
            assert report.attempts == cells and report.invalid == 0
            write_report(report, work / "report", key)  # type: ignore[arg-type]

        assert read_and_hash_floor(run_dir) == cells  # warm the page cache
        floor = measure_call(lambda: read_and_hash_floor(run_dir), repeats_of(REPEATS_FLOOR))
        ours = measure_call(reduce, repeats_of(REPEATS))
        profile_call(reduce, profiler)
        size = sum(p.stat().st_size for p in (run_dir / "cells").iterdir())
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"read_and_hash_floor": floor},
        checks={"≤ 60 s (one process)": ours.median <= 60.0},
        params={"archives": cells, "bytes_on_disk": size, "tasks": 4, "harnesses": 2},
        notes=(
            f"synthetic but valid archives: 8 real demo-suite archives re-packed under "
            f"{repetitions:,} repetition numbers each and signed; ours = expected cells + "
            "verify (signature, digest, members, manifest, record) + report built, written and "
            "signed, in one process. Warm page cache."
        ),
    )
