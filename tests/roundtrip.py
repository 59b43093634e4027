"""Evidence taken through the bytes an archive holds and rebuilt, as a sealed scorer gets it.

`observe` runs an action in a real sandbox between two snapshots; `rebuild` writes the
snapshots and the diff as the archive does, reads them back and checks that every rebuilt
object writes the same bytes again and keeps its digest and time; `same` asks one question of
the live and the rebuilt evidence and checks both answer alike (the same value, or the same
error). `rescore` runs a task's evaluators on the evidence rebuilt from a trial's archive files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from oracle.authoring.task import Task
from oracle.base.canonical import dumps, dumps_pretty
from oracle.evidence.diff import Diff, sink_diff_from_json
from oracle.evidence.evidence import Evidence, HarnessRecords, TaskFacts
from oracle.evidence.record import TrialRecord
from oracle.evidence.sink import SinkSpec
from oracle.evidence.snapshot import Snapshot, States, snapshot_from_json
from oracle.judging.evaluators import PredicateResult
from oracle.sandbox.sandbox import Sandbox, SandboxView


@dataclass
class Observed:
    """Snapshots before and after an action, their diff, and the specs of the sinks."""

    specs: Mapping[str, SinkSpec]
    before: Mapping[str, Snapshot]
    after: Mapping[str, Snapshot]
    diff: Diff


def observe(specs: Sequence[SinkSpec], act: Callable[[SandboxView, Sandbox], object]) -> Observed:
    """Open a sandbox with `specs`, reset it, snapshot, `act`, snapshot again and diff."""
    task = Task(name="roundtrip", prompt="round trip", sinks=list(specs), utility=True)
    with Sandbox(task) as sb:
        sb.reset()
        before, errors = sb.snapshot()
        assert errors == {}
        act(sb.view(), sb)
        after, errors = sb.snapshot()
        assert errors == {}
        diff, errors = sb.diff(before, after)
        assert errors == {}
    return Observed({s.name: s for s in specs}, before, after, diff)


def archived(value: Any) -> Any:
    """`value` as a scorer reads it back: the archive's bytes (canonical, indented), parsed."""
    return orjson.loads(dumps_pretty(value))


def rebuilt_snapshot(snap: Snapshot, spec: SinkSpec | None = None) -> Snapshot:
    """`snap` through its archived bytes; checks the round trip keeps it whole."""
    back = snapshot_from_json(archived(snap.to_json()), spec)
    assert dumps(back.to_json()) == dumps(snap.to_json())
    assert (back.sink, back.kind, back.digest, back.taken_at) == (
        snap.sink,
        snap.kind,
        snap.digest,
        snap.taken_at,
    )
    assert type(back.state) is type(snap.state)
    assert back.state is not snap.state
    return back


def rebuild(obs: Observed) -> Observed:
    """Every snapshot and the diff of `obs` through their archived bytes."""
    before = {n: rebuilt_snapshot(s, obs.specs.get(n)) for n, s in obs.before.items()}
    after = {n: rebuilt_snapshot(s, obs.specs.get(n)) for n, s in obs.after.items()}
    diff = Diff.from_json(archived(obs.diff.to_json()), failed=obs.diff.failed)
    assert dumps(diff.to_json()) == dumps(obs.diff.to_json())
    assert dict(diff.failed) == dict(obs.diff.failed)
    for name, live in obs.diff.items():
        back = diff[name]
        assert type(back) is type(live)
        assert back.changes == live.changes
        assert [type(c) for c in back.changes] == [type(c) for c in live.changes]
        alone = sink_diff_from_json(archived(live.to_json()))
        assert dumps(alone.to_json()) == dumps(live.to_json())
    return Observed(obs.specs, before, after, diff)


def outcome(question: Callable[[Observed], Any], obs: Observed) -> tuple[str, Any]:
    """What `question` answers on `obs`: ``("value", v)`` or ``("error", type, message)``."""
    try:
        return ("value", question(obs))
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


def same(live: Observed, back: Observed, question: Callable[[Observed], Any]) -> Any:
    """Ask `question` of both; they must answer alike. Returns the live answer's value (or
    its error text), so the caller can also check it is the expected one."""
    want = outcome(question, live)
    got = outcome(question, back)
    assert got == want
    return want[1]


def evidence_from_archive(files: Mapping[str, bytes], task: Task) -> Evidence:
    """The evidence a scorer that holds only a trial's archive files rebuilds: the snapshots
    (with the task's sink specs), the diff, and the harness records of the record."""
    record = TrialRecord.model_validate_json(files["record.json"])
    specs = {s.name: s for s in task.sinks}

    def states(label: str) -> States:
        prefix = f"snapshots/{label}/"
        snaps = {}
        for path, data in files.items():
            if path.startswith(prefix):
                snap = snapshot_from_json(orjson.loads(data), specs.get(path[len(prefix) : -5]))
                snaps[snap.sink] = snap
        return States(snaps, label)

    return Evidence(
        diff=Diff.from_json(orjson.loads(files["diff.json"])),
        before=states("before"),
        after=states("after"),
        harness=HarnessRecords(
            record.invocation,
            tuple(record.tool_calls) if record.tool_calls is not None else None,
        ),
        task=TaskFacts(
            name=task.name,
            prompt=task.prompt,
            injection=task.injection.text if task.injection else None,
            secrets=tuple(task.secrets),
            metadata=dict(task.metadata),
        ),
    )


def rescore(files: Mapping[str, bytes], task: Task) -> dict[str, list[PredicateResult]]:
    """Metric → the results of its predicates, run on the evidence rebuilt from `files`."""
    ev = evidence_from_archive(files, task)
    return {
        "utility_achieved": task.utility_evaluator.evaluate(ev)[1],
        "security_breached": task.security_evaluator.evaluate(ev)[1],
    }
