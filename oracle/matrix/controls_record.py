"""A task's controls result as a signed file, so a report can show it beside the task's rates.

`oracle matrix run` runs every task's controls once (in the real sandbox, like `oracle controls`)
and writes ``controls/<task>.json`` with a DSSE envelope beside it. The reducer verifies it and
shows no figure for a metric whose predicates are not *proven* (DESIGN §6), saying why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from oracle.authoring.control_status import MutationScore, lean
from oracle.authoring.task import Task
from oracle.authoring.versions import task_digest
from oracle.base.signing import (
    CONTROLS_PREDICATE,
    Subject,
    sha256_hex,
    statement,
)
from oracle.controls.run import Status, calibrate_judges, classify, proof_extras, run_controls
from oracle.judging.llm.calibration import JudgeCalibration
from oracle.matrix.cell_archive import Rejected, read_signed_file, write_signed

FOLDER = "controls"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_BYTES = 16 * 1024 * 1024


class PredicateControl(BaseModel):
    """One predicate's status. Only ``proven`` lets its metric's figure be reported; an
    ``unsupported`` predicate (one that cannot decide a verdict at all) withholds it too."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    predicate: str
    status: Status
    reason: str
    kind: Literal["predicate", "judge"] = "predicate"
    mutants: MutationScore | None = None
    missed: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _lean(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return lean(handler(self))


class ControlRunSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    control: str
    kind: str
    behaved: bool
    error: str | None = None


class ControlsRecord(BaseModel):
    """Each predicate's status for one task, from its controls."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    task: str
    task_digest: str
    predicates: list[PredicateControl] = Field(default_factory=list)
    runs: list[ControlRunSummary] = Field(default_factory=list)
    judges: list[JudgeCalibration] = Field(
        default_factory=list,
        description="each LLM judge's agreement with the controls and labelled examples",
    )
    error: str | None = Field(None, description="the controls could not run at all")

    def status(self, metric: str) -> tuple[bool, str]:
        """``(proven, why)`` for one metric: proven when every predicate of it is (an
        unsupported one is not: the metric's figure is withheld, with why)."""
        if self.error:
            return False, f"controls did not run: {self.error}"
        preds = [p for p in self.predicates if p.metric == metric]
        if not preds:
            return False, f"no {metric} predicate was judged by controls"
        bad = [p for p in preds if p.status != "proven"]
        if bad:
            return False, "; ".join(f"{p.predicate} is {p.status} ({p.reason})" for p in bad)
        return True, "proven by " + ", ".join(r.control for r in self.runs if r.behaved)


def file_name(task: str) -> str:
    return _SAFE.sub("_", task) + ".json"


def run_task_controls(task: Task) -> ControlsRecord:
    """Run and classify the controls of `task`."""
    runs, error = run_controls(task)
    cals = calibrate_judges(task, runs)[0] if not error else []
    statuses = classify(task, runs, cals) if not error else []
    return ControlsRecord(
        task=task.name,
        task_digest=task_digest(task),
        predicates=[
            PredicateControl(
                metric=str(s.metric),
                predicate=s.predicate,
                status=s.status,
                reason=s.reason,
                kind=s.kind,
                **proof_extras(s),
            )
            for s in statuses
        ],
        runs=[
            ControlRunSummary(
                control=r.control.name, kind=r.control.kind, behaved=r.behaved, error=r.record.error
            )
            for r in runs
        ],
        judges=cals,
        error=error,
    )


def write_controls(out: Path, rec: ControlsRecord, key: Ed25519PrivateKey, run_id: str) -> Path:
    """Sign and write `rec` under ``out/controls/``; the statement names the run `run_id`."""
    data = rec.model_dump_json(indent=2).encode("utf-8") + b"\n"
    name = file_name(rec.task)
    st = statement(
        [Subject(name, sha256_hex(data))],
        CONTROLS_PREDICATE,
        {"task": rec.task, "task_digest": rec.task_digest, "run_id": run_id},
    )
    return write_signed(out / FOLDER, name, data, st, key)


def read_controls(path: Path, public: Ed25519PublicKey) -> tuple[ControlsRecord, str, str | None]:
    """A verified controls record, the sha256 of the bytes verified and the run its statement
    names (None: signed before runs had ids), or `Rejected` with the rule it breaks."""
    data, st = read_signed_file(
        path, public, predicate_type=CONTROLS_PREDICATE, subject=path.name, max_bytes=MAX_BYTES
    )
    try:
        rec = ControlsRecord.model_validate_json(data)
    except ValidationError as exc:
        raise Rejected("record-invalid", str(exc.errors()[0]["msg"])) from None
    if path.name != file_name(rec.task) or st.predicate.get("task") != rec.task:
        raise Rejected("cell-mismatch", f"{path.name} holds the controls of {rec.task!r}")
    run = st.predicate.get("run_id")
    return rec, sha256_hex(data), run if isinstance(run, str) else None
