"""Re-scoring archived trials: the (possibly edited) predicates of their tasks, run again on
the evidence the archives kept, with no agent run again.

An eval author who fixes a predicate rescores a trial folder, a run folder or a matrix output.
Every archive is read and checked (its manifest, or a cell's reading rules) before its
evidence is used; the predicates run in the same scorer as a live trial's, handed the same
bundle (`oracle.scoring.bundle`); the rules of DESIGN §5 are applied to the new outcomes with
the archived invocation, observation errors and injection reach. Each new record is written
as a new archive beside the old one — never over it — holding the old evidence byte for byte,
the new verdicts, and what they replaced (`TrialRecord.rescore`).

A task whose digest changed (an edited predicate) gets the controls status of its new digest:
until `oracle controls` proves it again, its new verdicts are *not measured*, so no report
counts them.

Example::

    results = rescore([Path("runs/demo")], load_tasks(["tasks/demo"]), scorer)
    [(r.old.security_breached, r.new.security_breached) for r in results if r.new]
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from oracle.authoring.check import refusals
from oracle.authoring.control_status import controls_status
from oracle.authoring.loader import Loaded
from oracle.authoring.task import Task
from oracle.authoring.versions import runtime_versions, task_digest
from oracle.evidence.archive import MANIFEST, ArchiveError, verify_archive, write_archive
from oracle.evidence.invocation import autonomy
from oracle.evidence.record import Cell, RescoreRecord, TrialRecord
from oracle.judging import reach as reach_mod
from oracle.judging.verdict import Metric, decide
from oracle.scoring.scorer import Scorer, TrialEvidence
from oracle.trial.loop import evaluator_record, not_measured

CELL_SUFFIX = ".tar.gz"


class RescoreError(RuntimeError):
    """An archive that cannot be rescored: unreadable, failing its checks, or of a task that
    is not loaded. Names the archive."""


@dataclass(frozen=True)
class Source:
    """One archived trial: a trial folder, or a matrix cell's ``.tar.gz``. ``rel`` is its
    place under the path it was found in (where its rescored archive goes under the output)."""

    path: Path
    rel: Path

    def read(self, public: Ed25519PublicKey | None = None) -> dict[str, bytes]:
        """The archive's files, after its checks: a trial folder against its manifest, a
        signed cell against its signature (`public`) and every rule of the reducer.
        `RescoreError` names what failed."""
        if self.path.is_dir():
            problems = verify_archive(self.path)
            if problems:
                raise RescoreError("; ".join(problems))
            return {
                str(p.relative_to(self.path)): p.read_bytes()
                for p in sorted(self.path.rglob("*"))
                if p.is_file() and p.name != MANIFEST
            }
        from oracle.matrix.cell_archive import Rejected, open_cell

        if public is None:
            raise RescoreError(
                f"{self.path}: a signed cell is read only after its signature is checked; "
                "give the public key that signed it (--key)"
            )
        try:
            opened = open_cell(self.path, public, keep_files=True)
        except Rejected as exc:
            raise RescoreError(f"{self.path}: {exc}") from None
        return {k: v for k, v in opened.files.items() if k not in (MANIFEST, "cell.json")}


def find_sources(path: Path) -> list[Source]:
    """The archived trials at or under `path`, in path order."""
    if path.is_file() and path.name.endswith(CELL_SUFFIX):
        return [Source(path, Path(path.name[: -len(CELL_SUFFIX)]))]
    if (path / MANIFEST).is_file():
        return [Source(path, Path(path.absolute().name))]
    if not path.is_dir():
        raise RescoreError(
            f"{path}: neither an archive folder, a cell archive nor a folder of them"
        )
    found: list[Source] = []
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            continue
        if p.is_dir() and (p / MANIFEST).is_file() and (p / "record.json").is_file():
            found.append(Source(p, p.relative_to(path)))
        elif p.is_file() and p.name.endswith(CELL_SUFFIX):
            found.append(Source(p, p.relative_to(path).with_name(p.name[: -len(CELL_SUFFIX)])))
    # A trial folder inside another one is part of it (never the case for our archives).
    return [s for s in found if not any(o.path in s.path.parents for o in found)]


@dataclass
class Rescored:
    """One archived trial, rescored (``new``) or not (``error``)."""

    source: Source
    cell: Cell | None
    old: TrialRecord | None
    new: TrialRecord | None = None
    folder: Path | None = None
    error: str | None = None


def rescore_record(files: dict[str, bytes], task: Task, scorer: Scorer, source: str) -> TrialRecord:
    """The record of an archived trial with `task`'s predicates run again by `scorer`."""
    old = TrialRecord.model_validate_json(files["record.json"])
    if old.scoring is None and old.error is not None:
        raise RescoreError(
            f"{source}: the trial never reached evaluation ({old.error}): nothing to rescore"
        )
    scored = scorer.score(task, TrialEvidence.from_archive(files), refusals(task))
    utility = scored.outcomes[Metric.UTILITY.value]
    security = scored.outcomes[Metric.SECURITY.value]
    auto = (
        autonomy(old.invocation)
        if old.invocation is not None
        else (None, "the archive holds no invocation record")
    )
    reach = old.injection.reached if old.injection and old.injection.applied else None
    verdicts = decide(
        utility[0],
        security[0],
        auto,
        observation_errors=old.observation_errors,
        injection_reached=reach,
    )
    controls = (
        old.controls
        if old.controls is not None and old.controls.status == "control"
        else controls_status(task)
    )
    outcomes = {Metric.UTILITY.value: utility, Metric.SECURITY.value: security}
    return old.model_copy(
        update={
            "utility_achieved": verdicts.utility_achieved,
            "security_breached": verdicts.security_breached,
            "autonomy_achieved": verdicts.autonomy_achieved,
            "evaluation_errors": dict(verdicts.evaluation_errors),
            # The reach finding follows the verdict it is about; the others stand as found.
            "findings": [
                *(f for f in old.findings if f.kind != reach_mod.NOT_OBSERVED),
                *reach_mod.findings(old.injection, verdicts.security_breached),
            ],
            "evaluators": {m: evaluator_record(o, p) for m, (o, p) in outcomes.items()},
            "autonomy_reason": auto[1],
            "controls": controls,
            "scoring": scored.record,
            "not_measured": not_measured(task, controls, outcomes),
            "task_digest": task_digest(task),
            "versions": runtime_versions(),
            "rescore": RescoreRecord(
                of="sha256:" + hashlib.sha256(files["record.json"]).hexdigest(),
                source=source,
                at=time.time(),
                previous={
                    Metric.UTILITY.value: old.utility_achieved,
                    Metric.SECURITY.value: old.security_breached,
                    Metric.AUTONOMY.value: old.autonomy_achieved,
                },
                previous_task_digest=old.task_digest,
                previous_not_measured=dict(old.not_measured),
            ),
        }
    )


def default_out(path: Path) -> Path:
    """Where the rescored archives of `path` go by default: beside it, named by the time."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = path.absolute()
    name = base.name[: -len(CELL_SUFFIX)] if base.name.endswith(CELL_SUFFIX) else base.name
    return base.with_name(f"{name}.rescore-{stamp}")


def output_folders(paths: Sequence[Path], out: Path | None) -> list[Path]:
    """Where the rescored archives of each of `paths` go: under `out` (one folder per path
    when there are several), else beside each path (`default_out`)."""
    if out is None:
        return [default_out(p) for p in paths]
    if len(paths) == 1:
        return [out]
    return [out / p.absolute().name for p in paths]


def rescore(
    paths: Sequence[Path],
    loaded: Loaded,
    scorer: Scorer,
    *,
    outs: Sequence[Path] | None = None,
    public: Ed25519PublicKey | None = None,
) -> list[Rescored]:
    """Rescore every archived trial under `paths` with the tasks of `loaded`; write each new
    archive under the matching folder of `outs` (`output_folders` by default), at the
    trial's place under its path. Signed cells are checked against `public`. Nothing is ever
    overwritten: an archive folder that exists already is an error for its trial."""
    by_name = {t.name: t for t in loaded.tasks}
    results: list[Rescored] = []
    targets = list(outs) if outs is not None else output_folders(paths, None)
    for path, target in zip(paths, targets, strict=True):
        for source in find_sources(path):
            results.append(_one(source, by_name, scorer, target / source.rel, public))
    return results


def _one(
    source: Source,
    tasks: dict[str, Task],
    scorer: Scorer,
    folder: Path,
    public: Ed25519PublicKey | None,
) -> Rescored:
    try:
        files = source.read(public)
        old = TrialRecord.model_validate_json(files["record.json"])
    except (RescoreError, OSError) as exc:
        return Rescored(source, None, None, error=str(exc))
    except (KeyError, ValueError) as exc:
        return Rescored(source, None, None, error=f"{source.path}: no valid record.json ({exc})")
    task = tasks.get(old.cell.task)
    if task is None:
        known = ", ".join(sorted(tasks)) or "none"
        why = f"{source.path}: task {old.cell.task!r} is not among the loaded tasks ({known})"
        return Rescored(source, old.cell, old, error=why)
    try:
        new = rescore_record(files, task, scorer, str(source.path))
    except RescoreError as exc:
        return Rescored(source, old.cell, old, error=str(exc))
    kept = {k: v for k, v in files.items() if k != "record.json"}
    kept["record.json"] = new.model_dump_json(indent=2).encode("utf-8") + b"\n"
    try:
        write_archive(folder, kept)
    except (ArchiveError, OSError) as exc:
        return Rescored(source, old.cell, old, new, error=f"not written: {exc}")
    return Rescored(source, old.cell, old, new, folder)
