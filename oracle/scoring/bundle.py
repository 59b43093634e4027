"""A trial's evidence as bytes: what a sealed scorer receives, and what the archive keeps.

The bundle holds the archive's own evidence files — ``diff.json`` and
``snapshots/{before,after}/<sink>.json``, byte for byte — and ``harness.json``: the harness-tier
records a predicate may read (the invocation, the tool-call log) and which observations failed.
Nothing else: no final message, no claims, no logs, no reply text beyond what the reply sink
itself holds. A live trial and `oracle rescore` build the bundle the same way (the harness
part from the fields a record keeps), so a predicate sees the same evidence in both.

`open_evidence` rebuilds the `Evidence` a predicate reads from a bundle, with the task that the
scorer loaded itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from oracle.base.frozen import freeze
from oracle.evidence.diff import Diff, EvidenceFormatError
from oracle.evidence.evidence import Evidence, HarnessRecords, TaskFacts
from oracle.evidence.invocation import Invocation
from oracle.evidence.snapshot import Snapshot, States, snapshot_from_json
from oracle.evidence.tools import ToolCall

if TYPE_CHECKING:
    from oracle.authoring.task import Task

DIFF = "diff.json"
HARNESS = "harness.json"
_BEFORE = "snapshots/before/"
_AFTER = "snapshots/after/"


def harness_file(
    invocation: Invocation | None,
    tool_calls: Sequence[ToolCall] | None,
    observation_errors: Mapping[str, str],
) -> bytes:
    """``harness.json``: the harness-tier records and the failed observations (sink → why,
    ``before: …``/``after: …`` as a record keeps them)."""
    return orjson.dumps(
        {
            "invocation": invocation.model_dump(mode="json") if invocation else None,
            "tool_calls": (
                [c.model_dump(mode="json") for c in tool_calls] if tool_calls is not None else None
            ),
            "observation_errors": dict(observation_errors),
        },
        option=orjson.OPT_SORT_KEYS,
    )


@dataclass(frozen=True)
class EvidenceBundle:
    """One trial's evidence files (relative path → bytes), ``harness.json`` among them."""

    files: Mapping[str, bytes] = field(default_factory=dict)

    @classmethod
    def from_archive(cls, files: Mapping[str, bytes]) -> EvidenceBundle:
        """The bundle of an archived trial: its evidence files, and ``harness.json`` made
        from its ``record.json`` the way a live trial makes it."""
        from oracle.evidence.record import TrialRecord

        try:
            record = TrialRecord.model_validate_json(files["record.json"])
        except KeyError:
            raise EvidenceFormatError(None, None, "the archive holds no record.json") from None
        except ValueError as exc:
            raise EvidenceFormatError(
                None, None, f"record.json is not a trial record: {exc}"
            ) from None
        kept = {k: v for k, v in files.items() if k == DIFF or k.startswith("snapshots/")}
        kept[HARNESS] = harness_file(
            record.invocation, record.tool_calls, record.observation_errors
        )
        return cls(kept)

    def blobs(self) -> tuple[list[str], list[bytes]]:
        """Names and bytes in a stable order, for the channel to a scorer."""
        names = sorted(self.files)
        return names, [self.files[n] for n in names]


def _json(files: Mapping[str, bytes], name: str) -> Any:
    try:
        return orjson.loads(files[name])
    except KeyError:
        raise EvidenceFormatError(None, None, f"the evidence holds no {name}") from None
    except orjson.JSONDecodeError as exc:
        raise EvidenceFormatError(None, None, f"{name} is not JSON: {exc}") from None


def task_facts(task: Task) -> TaskFacts:
    """What the task's author wrote, as predicates read it (``ev.task``)."""
    return TaskFacts(
        name=task.name,
        prompt=task.prompt,
        injection=task.injection.text if task.injection else None,
        secrets=tuple(task.secrets),
        metadata=freeze(dict(task.metadata)),
    )


def _snapshots(files: Mapping[str, bytes], prefix: str, task: Task) -> dict[str, Snapshot]:
    out: dict[str, Snapshot] = {}
    for name in sorted(files):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        sink = name[len(prefix) : -len(".json")]
        raw = _json(files, name)
        if not isinstance(raw, dict) or raw.get("sink") != sink:
            raise EvidenceFormatError(None, None, f"{name} is not the snapshot of sink {sink!r}")
        out[sink] = snapshot_from_json(raw, task.spec(sink))
    return out


def _failed(errors: Mapping[str, str], label: str) -> dict[str, str]:
    prefix = f"{label}: "
    return {k: v[len(prefix) :] for k, v in errors.items() if v.startswith(prefix)}


def open_evidence(bundle: EvidenceBundle, task: Task) -> Evidence:
    """The `Evidence` a predicate of `task` reads, rebuilt from `bundle`. Raises
    `EvidenceFormatError` (naming the file) where a part cannot be read whole."""
    files = bundle.files
    harness = _json(files, HARNESS)
    if not isinstance(harness, dict):
        raise EvidenceFormatError(None, None, f"{HARNESS} is not an object")
    errors = harness.get("observation_errors") or {}
    if not isinstance(errors, dict) or not all(isinstance(v, str) for v in errors.values()):
        raise EvidenceFormatError(None, None, f"{HARNESS}: observation_errors is not sink → reason")
    try:
        raw_inv = harness.get("invocation")
        invocation = Invocation.model_validate(raw_inv) if raw_inv is not None else None
        raw_calls = harness.get("tool_calls")
        calls = (
            tuple(ToolCall.model_validate(c) for c in raw_calls) if raw_calls is not None else None
        )
    except ValueError as exc:
        raise EvidenceFormatError(None, None, f"{HARNESS}: {exc}") from None
    before = _snapshots(files, _BEFORE, task)
    after = _snapshots(files, _AFTER, task)
    raw_diff = _json(files, DIFF)
    if not isinstance(raw_diff, dict):
        raise EvidenceFormatError(None, None, f"{DIFF} is not an object of sink diffs")
    sinks = {*before, *after, *errors, *task.sink_names()}
    not_diffed = {
        s: errors.get(s) or "not observed before and after" for s in sinks if s not in raw_diff
    }
    diff = Diff.from_json(raw_diff, failed=not_diffed)
    return Evidence(
        diff=diff,
        before=States(before, "before", _failed(errors, "before")),
        after=States(after, "after", _failed(errors, "after")),
        harness=HarnessRecords(invocation=invocation, tool_calls=calls),
        task=task_facts(task),
    )
