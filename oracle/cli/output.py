"""The documents of ``--json``: one per command, each a versioned model.

With ``--json`` a command writes exactly one document to stdout, whatever happens (a usage
error too: its ``exit_code`` is 2 and ``problems`` says why); every message, table and progress
bar goes to stderr (`oracle.cli.outcome`). Each document has ``schema_version``, ``command``,
``exit_code`` (the process's own, `oracle.cli.exits`) and ``problems`` (each reason the exit
code is not 0, one line each). ``oracle schema`` writes each model's JSON schema to
``schemas/cli/<command>.schema.json``.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle.authoring.loader import Loaded
from oracle.authoring.task import Task
from oracle.base.lazy import lazy_names
from oracle.evidence.record import TrialRecord


class LoadErrorOut(BaseModel):
    """A task file, or a task in one, that could not be loaded."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the path given or the task file")
    part: str = Field(description="what failed: 'path', 'import', 'tasks()', a task's field…")
    message: str


class Output(BaseModel):
    """What every command's document holds."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    exit_code: int = Field(0, description="the command's exit code (docs/cli.md)")
    problems: list[str] = Field(
        default_factory=list, description="each reason the exit code is not 0, one line each"
    )


class Loading(Output):
    """A command that loads tasks: what could not be loaded."""

    load_errors: list[LoadErrorOut] = Field(default_factory=list)

    def loaded(self, loaded: Loaded) -> None:
        """Note the load errors of `loaded`."""
        self.load_errors = [
            LoadErrorOut(source=str(e.source), part=e.part, message=e.message)
            for e in loaded.errors
        ]


class SinkOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str
    description: str


class ControlOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["breach", "clean", "mirror"]


class TaskOut(BaseModel):
    """A task as ``oracle list`` shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    source: str | None = Field(description="the task file (null: built in code)")
    sinks: list[SinkOut]
    controls: list[ControlOut] = Field(description="the author's controls (not derived ones)")


class ListOutput(Loading):
    """``oracle list --json``."""

    command: Literal["list"] = "list"
    tasks: list[TaskOut] = Field(default_factory=list)


def task_out(t: Task) -> TaskOut:
    """`t` as ``oracle list --json`` describes it."""
    return TaskOut(
        name=t.name,
        source=None if t.source is None else str(t.source),
        sinks=[SinkOut(name=s.name, kind=s.kind, description=s.describe()) for s in t.sinks],
        controls=[ControlOut(name=c.name, kind=c.kind) for c in t.controls],
    )


class Refusal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    predicate: str
    message: str


class CheckedTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    source: str | None
    ok: bool = Field(description="no predicate was refused")
    refused: list[Refusal] = Field(default_factory=list)


class CheckOutput(Loading):
    """``oracle check --json``."""

    command: Literal["check"] = "check"
    tasks: list[CheckedTask] = Field(default_factory=list)


class TrialOutput(Loading):
    """``oracle trial --json``: every trial's record, as archived."""

    command: Literal["trial"] = "trial"
    archives: str | None = Field(None, description="the archive folder (null: nothing ran)")
    records: list[TrialRecord] = Field(default_factory=list)
    refused: list[str] = Field(
        default_factory=list, description="tasks refused by `oracle check` or not run"
    )
    skipped: dict[str, str] = Field(
        default_factory=dict, description="task → why it was not run (a server it needs is down)"
    )
    broken: list[str] = Field(
        default_factory=list, description="trials that broke outside their error boundaries"
    )
    contained: list[str] = Field(
        default_factory=list, description="predicates a scorer had to contain, with their trial"
    )
    unproven: dict[str, str] = Field(
        default_factory=dict,
        description="task → why its controls do not prove it (missing, stale or unproven)",
    )


class ShowOutput(Output):
    """``oracle show --json``: the record, once it verified."""

    command: Literal["show"] = "show"
    source: str = Field("", description="the archive folder, record.json or cell archive given")
    verified: Literal["manifest", "signature"] | None = Field(
        None,
        description="what it was checked against: a trial folder's manifest.sha256, or a cell "
        "archive's signature and the reducer's rules (null: it did not verify)",
    )
    record: TrialRecord | None = Field(None, description="null: not shown (see problems)")


# The documents of `controls` and `reduce` need the controls' and the reports' models, which
# the other commands never load: they live in modules of their own, imported when first asked
# for (their names still resolve here).
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        **dict.fromkeys(
            ("ControlRunOut", "PredicateOut", "ControlsOutput"), "oracle.cli.output_controls"
        ),
        **dict.fromkeys(("RejectionOut", "ReduceOutput"), "oracle.cli.output_reduce"),
    },
)

#: Each command with ``--json`` and the name of its document's model.
MODELS: dict[str, str] = {
    "list": "ListOutput",
    "check": "CheckOutput",
    "trial": "TrialOutput",
    "controls": "ControlsOutput",
    "show": "ShowOutput",
    "reduce": "ReduceOutput",
}


def model(command: str) -> type[Output]:
    """The model of `command`'s document (imported, for `controls` and `reduce`, now)."""
    found: type[Output] = getattr(sys.modules[__name__], MODELS[command])
    return found


def cli_schemas() -> dict[str, dict[str, Any]]:
    """Command → the JSON schema of its ``--json`` document (``schemas/cli/<command>…``)."""
    out = {}
    for command in MODELS:
        schema = model(command).model_json_schema()
        schema["$id"] = f"https://oracle.invalid/schemas/cli/{command}.schema.json"
        schema["title"] = f"oracle {command} --json"
        out[command] = schema
    return out
