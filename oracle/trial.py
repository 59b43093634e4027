"""One trial, in the order of DESIGN §4: reset, boundary, snapshot, run, snapshot and diff,
evaluate, archive.

`run_trial` is that list, one named call per step. Every failure is caught at the step where it
happens and recorded: a trial always leaves a record, and nothing is reported as "nothing
changed" when it was not observed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from oracle.agent import Agent, AgentError, RunRecord
from oracle.archive import archive_files, write_archive
from oracle.diff import Diff
from oracle.evaluators import PredicateResult
from oracle.evidence import Evidence, HarnessRecords, TaskFacts
from oracle.invocation import Invocation, autonomy
from oracle.record import (
    Cell,
    EvaluatorRecord,
    Finding,
    InjectionRecord,
    PredicateRecord,
    SnapshotDigests,
    TrialRecord,
)
from oracle.sandbox import Sandbox
from oracle.scope import scope_findings
from oracle.snapshot import Snapshot, States
from oracle.task import Task
from oracle.verdict import Metric, Outcome, Verdicts, decide
from oracle.versions import runtime_versions, task_digest


@dataclass
class TrialResult:
    """A finished trial: its record, its archive folder (if written) and its evidence."""

    record: TrialRecord
    archive: Path | None
    diff: Diff = field(default_factory=lambda: Diff({}))
    predicates: dict[str, list[PredicateResult]] = field(default_factory=dict)
    #: The archive's files (relative path -> bytes), for callers that archive elsewhere.
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class _Observation:
    snapshots: dict[str, Snapshot]
    errors: dict[str, str]


def run_trial(
    task: Task,
    agent: Agent,
    *,
    cell: Cell | None = None,
    out: Path | None = None,
    sandbox: Sandbox | None = None,
) -> TrialResult:
    """Run `agent` on `task` once and return the record (archived under `out` if given).

    Pass an open `sandbox` to reuse it across trials (it is reset first either way).
    """
    cell = cell or Cell(harness=agent.name, task=task.name)
    started = time.time()
    with ExitStack() as stack:
        try:
            sb = sandbox or stack.enter_context(Sandbox(task))
        except Exception as exc:
            return _finish(task, cell, out, started, error=f"sandbox could not open: {exc}")
        try:
            sb.reset()  # 1. reset
        except Exception as exc:
            return _finish(task, cell, out, started, error=f"reset failed: {exc}")
        trigger_at = time.time()  # 2. boundary
        before = _observe(sb)  # 3. snapshot before
        injection = _injection_record(task, before)
        run, run_error = _run_agent(agent, sb)  # 4. run
        invocation = run.invocation
        after = _observe(sb)  # 5. snapshot after, and diff
        diff, diff_errors = sb.diff(before.snapshots, after.snapshots)
        evaluation = _evaluate(task, before, after, diff, diff_errors, invocation, injection)  # 6.
        findings = scope_findings(task.scope, diff)  # 7. discrepancies
        return _finish(  # 8. archive
            task,
            cell,
            out,
            started,
            trigger_at=trigger_at,
            error=run_error,
            evaluation=evaluation,
            invocation=invocation,
            injection=injection,
            before=before,
            after=after,
            diff=diff,
            findings=findings,
            logs=run.logs,
        )
    raise AssertionError("unreachable")  # pragma: no cover - the with-block always returns


@dataclass
class _Evaluation:
    verdicts: Verdicts
    autonomy_reason: str
    outcomes: dict[str, tuple[Outcome, list[PredicateResult]]]
    observation_errors: dict[str, str]


def _evaluate(
    task: Task,
    before: _Observation,
    after: _Observation,
    diff: Diff,
    diff_errors: Mapping[str, str],
    invocation: Invocation,
    injection: InjectionRecord | None,
) -> _Evaluation:
    """Utility and security, each in its own error boundary, then the rules of DESIGN §5."""
    evidence = Evidence(
        diff=diff,
        before=States(before.snapshots, "before", before.errors),
        after=States(after.snapshots, "after", after.errors),
        harness=HarnessRecords(invocation=invocation),
        task=_facts(task),
    )
    observation_errors = {
        **{k: f"before: {v}" for k, v in before.errors.items()},
        **{k: f"after: {v}" for k, v in after.errors.items()},
        **diff_errors,
    }
    utility = task.utility_evaluator.evaluate(evidence)
    security = task.security_evaluator.evaluate(evidence)
    auto = autonomy(invocation)
    verdicts = decide(
        utility[0],
        security[0],
        auto,
        observation_errors=observation_errors,
        injection_reached=injection.reached if injection else None,
    )
    return _Evaluation(
        verdicts=verdicts,
        autonomy_reason=auto[1],
        outcomes={Metric.UTILITY.value: utility, Metric.SECURITY.value: security},
        observation_errors=observation_errors,
    )


def _observe(sb: Sandbox) -> _Observation:
    snaps, errors = sb.snapshot()
    return _Observation(snaps, errors)


def _run_agent(agent: Agent, sb: Sandbox) -> tuple[RunRecord, str | None]:
    try:
        return agent.run(sb.view()), None
    except AgentError as exc:
        return exc.run, str(exc)
    except Exception as exc:  # an adapter that broke its contract: still recorded, never lost
        inv = Invocation.not_started("unknown", agent.name, f"{type(exc).__name__}: {exc}")
        return RunRecord(inv), f"agent adapter {agent.name!r} failed: {type(exc).__name__}: {exc}"


def _facts(task: Task) -> TaskFacts:
    return TaskFacts(
        name=task.name,
        prompt=task.prompt,
        injection=task.injection.text if task.injection else None,
        secrets=tuple(task.secrets),
        metadata=dict(task.metadata),
    )


def _injection_record(task: Task, before: _Observation) -> InjectionRecord | None:
    inj = task.injection
    if inj is None:
        return None
    snap = before.snapshots.get(inj.sink)
    planted: bool | None = None
    holds = getattr(snap.state, "holds_text", None) if snap else None
    if callable(holds):
        planted = bool(holds(inj.where, inj.text))
    # Reach is not traced yet; an injection that is not even planted cannot have reached.
    reached = False if planted is False else None
    return InjectionRecord(
        sink=inj.sink, where=inj.where, author=inj.author, planted=planted, reached=reached
    )


def _evaluator_record(outcome: Outcome, preds: list[PredicateResult]) -> EvaluatorRecord:
    return EvaluatorRecord(
        kind=outcome.kind,
        predicates=[
            PredicateRecord(name=p.name, value=p.value, error=p.error, tiers=sorted(p.tiers))
            for p in preds
        ],
    )


def _finish(
    task: Task,
    cell: Cell,
    out: Path | None,
    started: float,
    *,
    error: str | None = None,
    trigger_at: float | None = None,
    evaluation: _Evaluation | None = None,
    invocation: Invocation | None = None,
    injection: InjectionRecord | None = None,
    before: _Observation | None = None,
    after: _Observation | None = None,
    diff: Diff | None = None,
    findings: list[Finding] | None = None,
    logs: Mapping[str, bytes] | None = None,
) -> TrialResult:
    """Build the record (unknown verdicts, with the reason, when the trial broke early) and
    write the archive."""
    diff = diff or Diff({})
    if evaluation is None:
        why = f"the trial did not run to evaluation: {error}"
        evaluation = _Evaluation(
            Verdicts(None, None, None, {m.value: why for m in Metric}), "", {}, {}
        )
    verdicts = evaluation.verdicts
    before = before or _Observation({}, {})
    after = after or _Observation({}, {})
    snapshots = {
        name: SnapshotDigests(
            kind=(before.snapshots.get(name) or after.snapshots.get(name)).kind,  # type: ignore[union-attr]
            before=before.snapshots[name].digest if name in before.snapshots else None,
            after=after.snapshots[name].digest if name in after.snapshots else None,
        )
        for name in sorted(set(before.snapshots) | set(after.snapshots))
    }
    for name in sorted(set(task.sink_names()) - set(snapshots)):
        spec = next(s for s in task.sinks if s.name == name)
        snapshots[name] = SnapshotDigests(kind=spec.kind, before=None, after=None)
    record = TrialRecord(
        cell=cell,
        utility_achieved=verdicts.utility_achieved,
        security_breached=verdicts.security_breached,
        autonomy_achieved=verdicts.autonomy_achieved,
        evaluation_errors=dict(verdicts.evaluation_errors),
        error=error,
        evaluators={m: _evaluator_record(o, p) for m, (o, p) in evaluation.outcomes.items()},
        autonomy_reason=evaluation.autonomy_reason,
        invocation=invocation,
        injection=injection,
        snapshots=snapshots,
        observation_errors=evaluation.observation_errors,
        diff=diff.to_json(),
        findings=findings or [],
        task_digest=task_digest(task),
        versions=runtime_versions(),
        started_at=started,
        trigger_at=trigger_at,
        finished_at=time.time(),
    )
    folder = None
    files = archive_files(record, before.snapshots, after.snapshots, diff, logs)
    if out is not None:
        folder = write_archive(out / cell.folder, files, overwrite=True)
    preds = {m: p for m, (_, p) in evaluation.outcomes.items()}
    return TrialResult(record=record, archive=folder, diff=diff, predicates=preds, files=files)
