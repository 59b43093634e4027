"""Controls status travels with the task: stored beside the task file, keyed by its digest.

``oracle controls`` writes ``<task file>.controls.json`` (for ``task_x.py``, the file
``task_x.controls.json``) with, per task, the digest of its code and fixtures and every
predicate's status. A trial reads it back: a task whose digest changed since, or whose
predicates are not all proven, has its verdicts marked *not measured*, with the reason.
The file holds no timestamps, so an unchanged task rewrites it byte for byte.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from oracle.authoring.task import Task
from oracle.authoring.versions import task_digest
from oracle.evidence.record import ControlsStatus
from oracle.judging.llm.calibration import JudgeCalibration


class MutationScore(BaseModel):
    """How many near-miss mutants of its controls a predicate told apart (did not fire on)."""

    model_config = ConfigDict(extra="forbid")

    killed: int
    total: int
    #: The mutants it fired on as on the control each came from.
    survived: list[str] = Field(default_factory=list)


class PredicateProof(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    predicate: str
    status: Literal[
        "proven", "untested", "trigger-happy", "broken", "unsupported", "constant", "weak"
    ]
    reason: str
    kind: Literal["predicate", "judge"] = "predicate"
    mutants: MutationScore | None = None
    #: The evasion variants of its breach controls it missed (a weak predicate).
    missed: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _lean(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return lean(handler(self))


def lean(out: dict[str, Any]) -> dict[str, Any]:
    """A predicate's status as saved: without a mutation score or missed variants where it
    has none, so a task without them saves as it did before they existed."""
    if out.get("mutants") is None:
        out.pop("mutants", None)
    if not out.get("missed"):
        out.pop("missed", None)
    return out


class TaskProof(BaseModel):
    """One task's controls result."""

    model_config = ConfigDict(extra="forbid")

    task_digest: str
    proven: bool
    noop_utility_passes: bool = False
    predicates: list[PredicateProof] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    #: Metric → why its verdicts are no measurement (absent: that metric is proven).
    unproven: dict[str, str] = Field(default_factory=dict)
    #: Each LLM judge's agreement with the controls and labelled examples, and its model.
    judges: list[JudgeCalibration] = Field(default_factory=list)
    #: Labelled examples a judge misjudged or could not judge (one line each).
    misjudged: list[str] = Field(default_factory=list)


class ControlsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    tasks: dict[str, TaskProof] = Field(default_factory=dict)


def status_path(task: Task) -> Path | None:
    """Where `task`'s controls status lives (None for a task built outside a file)."""
    if task.source is None:
        return None
    return task.source.with_name(task.source.stem + ".controls.json")


def _read(path: Path) -> ControlsFile:
    try:
        return ControlsFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return ControlsFile()


def save_proof(task: Task, proof: TaskProof) -> Path | None:
    """Record `proof` for `task` beside its file (atomically). Returns the file written."""
    path = status_path(task)
    if path is None:
        return None
    try:
        current = _read(path)
    except (ValidationError, ValueError):
        current = ControlsFile()  # unreadable: rewritten whole
    current.tasks[task.name] = proof
    current.tasks = dict(sorted(current.tasks.items()))
    data = json.dumps(current.model_dump(), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def controls_status(task: Task) -> ControlsStatus:
    """Whether `task`'s predicates stand proven for its current code and fixtures."""
    path = status_path(task)
    if path is None:
        return ControlsStatus(status="missing", reason="the task has no file to keep a status by")
    try:
        proof = _read(path).tasks.get(task.name)
    except (ValidationError, ValueError) as exc:
        return ControlsStatus(status="missing", reason=f"{path.name} cannot be read: {exc}")
    if proof is None:
        return ControlsStatus(
            status="missing", reason=f"`oracle controls` has not been run on {task.name!r}"
        )
    if proof.task_digest != task_digest(task):
        return ControlsStatus(
            status="stale",
            reason="the task's code or fixtures changed since its controls last ran; "
            "run `oracle controls` again",
        )
    metrics = dict(proof.unproven)
    for cal in proof.judges:  # a judge is proven with the model it was calibrated with
        now = model_of_judge(task, cal.metric, cal.judge)
        if cal.model is not None and now is not None and now != cal.model:
            metrics.setdefault(
                cal.metric,
                f"judge {cal.judge!r} was proven with {cal.model}, and {now} would judge now: "
                "run `oracle controls` with this model",
            )
    if not proof.proven or metrics:
        bad = [
            f"{p.predicate} is {p.status}" + (f" ({p.reason})" if p.kind == "judge" else "")
            for p in proof.predicates
            if p.status not in ("proven", "unsupported")
        ]
        reason = "; ".join(bad + proof.problems) or "; ".join(metrics.values())
        return ControlsStatus(
            status="unproven", reason=reason or "controls misbehaved", metrics=metrics
        )
    return ControlsStatus(status="proven")


def model_of_judge(task: Task, metric: str, name: str) -> str | None:
    """The model judge `name` of `task` would use now (None: none, or no such judge)."""
    from oracle.judging.llm.run import judges_of, model_of

    found = [j for m, j in judges_of(task) if m == metric and j.name == name]
    return model_of(found[0]) if found else None
