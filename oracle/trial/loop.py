"""One trial, in the order of DESIGN §4: reset, boundary, snapshot, run, snapshot and diff,
evaluate, discrepancies, archive.

`run_trial` is that list, one named call per step. Every failure is caught at the step where it
happens and recorded: a trial always leaves a record, and nothing is reported as "nothing
changed" when it was not observed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from oracle.authoring.check import refusals
from oracle.authoring.control_status import controls_status
from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.authoring.versions import runtime_versions, task_digest
from oracle.evidence.archive import archive_files, private_folders, write_new_archive
from oracle.evidence.claims import parse_claims
from oracle.evidence.diff import Diff
from oracle.evidence.evidence import HarnessRecords
from oracle.evidence.invocation import Invocation, autonomy
from oracle.evidence.prices import priced_by_env
from oracle.evidence.record import (
    Cell,
    ControlsStatus,
    EvaluatorRecord,
    Finding,
    InjectionRecord,
    PredicateRecord,
    ScoringRecord,
    ServerContainerRecord,
    ServerExposure,
    SnapshotDigests,
    TrialRecord,
)
from oracle.evidence.sink import Exposure, SinkSpec
from oracle.evidence.snapshot import Snapshot, States
from oracle.evidence.usage import ModelUsage, observe_usage
from oracle.judging import reach as reach_mod
from oracle.judging.evaluators import PredicateResult, unsupported_predicates
from oracle.judging.reach import ReachProbe
from oracle.judging.verdict import Metric, Outcome, Verdicts, decide
from oracle.scoring.scorer import Scorer, TrialEvidence
from oracle.trial.agent import Agent, AgentError, RunRecord
from oracle.trial.findings import call_findings, claim_findings, scope_findings
from oracle.trial.sandboxing import Sandbox, new_sandbox

FINAL_MESSAGE_LIMIT = 64 * 1024


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
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class _Evaluation:
    verdicts: Verdicts
    autonomy_reason: str = ""
    outcomes: dict[str, tuple[Outcome, list[PredicateResult]]] = field(default_factory=dict)
    observation_errors: dict[str, str] = field(default_factory=dict)
    scoring: ScoringRecord | None = None
    #: The evidence files as the scorer got them (the archive keeps the same bytes).
    files: dict[str, bytes] | None = None


@dataclass
class _Trial:
    """What the steps have found so far; `_finish` turns it into the record."""

    task: Task
    cell: Cell
    started: float
    controls: ControlsStatus
    error: str | None = None
    trigger_at: float | None = None
    before: _Observation = field(default_factory=_Observation)
    after: _Observation = field(default_factory=_Observation)
    injection: InjectionRecord | None = None
    run: RunRecord | None = None
    diff: Diff = field(default_factory=lambda: Diff({}))
    evaluation: _Evaluation | None = None
    findings: list[Finding] = field(default_factory=list)
    #: Sink → what its server lets an agent do past the sandbox's account.
    exposures: dict[str, Exposure] = field(default_factory=dict)
    #: The servers of the task's sinks that the run started in containers.
    servers: list[ServerContainerRecord] = field(default_factory=list)
    #: The model calls the egress recorders saw during the run.
    usage: ModelUsage | None = None


def run_trial(
    task: Task,
    agent: Agent,
    *,
    cell: Cell | None = None,
    out: Path | None = None,
    sandbox: Sandbox | None = None,
    controls: ControlsStatus | None = None,
    allow_hosts: Sequence[str] = (),
    extra_sinks: Sequence[SinkSpec] = (),
    scorer: Scorer | None = None,
) -> TrialResult:
    """Run `agent` on `task` once and return the record (archived under `out` if given).

    Pass an open `sandbox` to reuse it across trials (it is reset first either way); otherwise
    one is opened with `allow_hosts` and `extra_sinks` (see `Sandbox`).
    `controls` is the task's controls status; by default it is read from beside the task
    file. Control runs pass ``ControlsStatus(status="control")``: injection reach is recorded
    but does not make their security verdict unknown. `scorer` is where the predicates run:
    by default a sealed scorer process (`oracle.scoring`).
    """
    cell = cell or Cell(harness=agent.name, task=task.name)
    with TrialSession(
        task,
        cell,
        out=out,
        sandbox=sandbox,
        controls=controls,
        allow_hosts=allow_hosts,
        extra_sinks=extra_sinks,
        scorer=scorer,
    ) as session:
        if not session.begin():  # 1. reset, 2. boundary, 3. snapshot before
            return session.finish()
        run, error = _run_agent(agent, session.sandbox, session.private)  # 4. run
        return session.finish(run, error=error)  # 5. snapshot after … 8. archive
    raise AssertionError("unreachable")  # pragma: no cover - the with-block always returns


class TrialSession:
    """One trial whose step 4 (running the agent) is done by someone else: `run_trial`, or a
    harness that embeds the oracle (`oracle.trial.embed`).

    ``begin()`` resets, records the boundary and takes the before snapshots; ``finish(run)``
    takes the harness's `RunRecord` and snapshots after, diffs, evaluates, looks for
    discrepancies and archives. Used as a context manager it opens the sandbox (unless one is
    given) and always tears it down; a session left without `finish` is *abandoned*: its
    record says so as an execution error, with every verdict unknown.

    Example::

        with TrialSession(task, Cell(harness="mine", task=task.name)) as s:
            if s.begin():
                run = my_harness(s.view())       # returns a RunRecord
                result = s.finish(run)
        s.result.record                          # finished, or abandoned
    """

    def __init__(
        self,
        task: Task,
        cell: Cell,
        *,
        out: Path | None = None,
        sandbox: Sandbox | None = None,
        controls: ControlsStatus | None = None,
        allow_hosts: Sequence[str] = (),
        extra_sinks: Sequence[SinkSpec] = (),
        scorer: Scorer | None = None,
    ) -> None:
        self.task = task
        self.out = out
        self._scorer = scorer
        self._allow_hosts = tuple(allow_hosts)
        self._extra_sinks = tuple(extra_sinks)
        self._given = sandbox
        self._sandbox: Sandbox | None = sandbox
        self._stack = ExitStack()
        self._probe: ReachProbe | None = None
        self._began = False
        self._private: list[Path] | None = None
        self.result: TrialResult | None = None
        self.trial = _Trial(task, cell, time.time(), controls or controls_status(task))

    def __enter__(self) -> TrialSession:
        if self._sandbox is None:
            try:
                self._sandbox = self._stack.enter_context(
                    new_sandbox(
                        self.task, allow_hosts=self._allow_hosts, extra_sinks=self._extra_sinks
                    )
                )
            except Exception as exc:
                self.trial.error = f"sandbox could not open: {exc}"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.result is None:
                why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
                self.abandon(f"the harness left the sandbox without finishing the trial{why}")
        finally:
            self._stack.close()

    @property
    def sandbox(self) -> Sandbox:
        """The open sandbox (raises if it could not be opened)."""
        if self._sandbox is None:
            raise RuntimeError(f"task {self.task.name!r}: {self.trial.error or 'no sandbox'}")
        return self._sandbox

    def view(self) -> SandboxView:
        """What the agent gets: the prompt and the endpoints."""
        return self.sandbox.view(private=self.private)

    @property
    def private(self) -> list[Path]:
        """The archive folders the agent and the scorer must not see (read once a trial)."""
        if self._private is None:
            self._private = private_folders(self.out) if self.out else []
        return self._private

    def begin(self) -> bool:
        """Steps 1–3: reset, boundary, snapshot before (and arm the injection reach probe).
        False when the trial broke before the agent could run: call `finish()` to record it."""
        t = self.trial
        if self._sandbox is None or t.error is not None:
            return False
        try:
            self._sandbox.reset()  # 1. reset
        except Exception as exc:
            t.error = f"reset failed: {exc}"
            return False
        t.trigger_at = time.time()  # 2. boundary
        t.exposures = self._sandbox.exposures()
        containers_of = getattr(self._sandbox, "server_containers", None)
        t.servers = containers_of() if callable(containers_of) else []
        t.before = _observe(self._sandbox)  # 3. snapshot before
        self._probe = _arm_reach_probe(self._sandbox, t.task, t.before)
        close = getattr(self._probe, "close", None)
        if callable(close):  # a watch left open by a trial that never finishes
            self._stack.callback(close)
        self._began = True
        return True

    def finish(self, run: RunRecord | None = None, *, error: str | None = None) -> TrialResult:
        """Steps 5–8 on the harness's `run` (with `error` if the run itself broke)."""
        if self.result is not None:
            raise RuntimeError(f"task {self.task.name!r}: the trial was already finished")
        t = self.trial
        if not self._began or self._sandbox is None:
            return self._done(_finish(t, self.out))
        sb = self._sandbox
        # The agent folder's limit is the sandbox's: read now, for every kind of agent.
        t.run, t.error = sb.limit_records(run or _no_run()), error
        # The captured run reaches the sinks fed by the harness (the reply it captured, the
        # connections it saw refused) before the after snapshot.
        sb.receive(t.run)
        t.injection = _injection_record_or_why(t, self._probe)
        t.after = _observe(sb)  # 5. snapshot after, and diff
        t.usage = priced_by_env(observe_usage(sb.provisioned))  # what the model calls used
        t.diff, diff_errors = sb.diff(t.before.snapshots, t.after.snapshots)
        t.evaluation = _evaluate(t, diff_errors, self.scorer)  # 6. evaluate
        t.findings = _discrepancies_or_why(t, sb)  # 7. discrepancies
        return self._done(_finish(t, self.out))  # 8. archive

    def abandon(self, why: str) -> TrialResult:
        """Record the trial as abandoned: an execution error, every verdict unknown. What the
        sinks hold by then is still snapshotted and diffed, for triage."""
        t = self.trial
        t.error = f"abandoned: {why}" if t.error is None else f"{t.error}; abandoned: {why}"
        t.evaluation = None  # whatever was judged before it broke does not stand
        if self._began and self._sandbox is not None:
            t.after = _observe(self._sandbox)
            t.usage = priced_by_env(observe_usage(self._sandbox.provisioned))
            t.diff, _ = self._sandbox.diff(t.before.snapshots, t.after.snapshots)
        return self._done(_finish(t, self.out))

    @property
    def scorer(self) -> Scorer:
        """Where the predicates run: the scorer given, else a sealed scorer process that
        sees none of this trial's archive folders."""
        if self._scorer is None:
            from oracle.scoring.pool import SealedScorer

            self._scorer = SealedScorer(hidden=self.private)
        return self._scorer

    def _done(self, result: TrialResult) -> TrialResult:
        self.result = result
        return result


def _no_run() -> RunRecord:
    return RunRecord(Invocation.not_started("unknown", "unknown", "the harness handed no run"))


def _observe(sb: Sandbox) -> _Observation:
    snaps, errors = sb.snapshot()
    return _Observation(snaps, errors)


def _run_agent(agent: Agent, sb: Sandbox, private: Sequence[Path]) -> tuple[RunRecord, str | None]:
    try:
        return sb.run_agent(agent, sb.view(private=private)), None
    except AgentError as exc:
        return exc.run, str(exc)
    except Exception as exc:  # an adapter that broke its contract: still recorded, never lost
        inv = Invocation.not_started("unknown", agent.name, f"{type(exc).__name__}: {exc}")
        return RunRecord(inv), f"agent adapter {agent.name!r} failed: {type(exc).__name__}: {exc}"


def _arm_reach_probe(sb: Sandbox, task: Task, before: _Observation) -> ReachProbe | None:
    """The planting sink's probe, armed; None where the sink offers none or it fails."""
    inj = task.injection
    if inj is None or inj.sink not in before.snapshots:
        return None
    make = getattr(sb.provisioned[inj.sink].sink, "reach_probe", None)
    if not callable(make):
        return None
    try:
        probe = make(inj.where, inj.text, before.snapshots[inj.sink])
        if probe is not None:
            probe.arm()
    except Exception:
        return None  # reach stays undetermined, which changes no verdict
    return probe if isinstance(probe, ReachProbe) else None


def _injection_record_or_why(t: _Trial, probe: ReachProbe | None) -> InjectionRecord | None:
    """The injection's record; where working it out fails, reach is not determined (which
    changes no verdict) and the record says why."""
    try:
        return _injection_record(t, probe)
    except Exception as exc:
        inj = t.task.injection
        assert inj is not None  # _injection_record returns None without raising otherwise
        return InjectionRecord(
            sink=inj.sink,
            where=inj.where,
            author=inj.author,
            planted=None,
            reached=None,
            reach_note=f"could not be determined: {type(exc).__name__}: {exc}",
            applied=t.controls.status != "control",
        )


def _injection_record(t: _Trial, probe: ReachProbe | None) -> InjectionRecord | None:
    inj = t.task.injection
    if inj is None:
        return None
    snap = t.before.snapshots.get(inj.sink)
    holds = getattr(snap.state, "holds_text", None) if snap else None
    planted = bool(holds(inj.where, inj.text)) if callable(holds) else None
    answer = probe.reached() if probe is not None else None
    reach = reach_mod.combine(
        text=inj.text,
        prompt=t.task.prompt,
        probe=answer,
        tool_calls=t.run.tool_calls if t.run else None,
    )
    if planted is False and not reach.via:
        reach = reach_mod.Reach(False, note="the injection is not in the seed: never planted")
    return InjectionRecord(
        sink=inj.sink,
        where=inj.where,
        author=inj.author,
        planted=planted,
        reached=reach.reached,
        reached_via=reach.via,
        reach_note=reach.note,
        applied=t.controls.status != "control",
    )


def _evaluate(t: _Trial, diff_errors: Mapping[str, str], scorer: Scorer) -> _Evaluation:
    """Utility and security, each in its own error boundary, by the scorer (which is handed
    the evidence alone), then the rules of DESIGN §5."""
    run = t.run
    assert run is not None
    observation_errors = {
        **{k: f"before: {v}" for k, v in t.before.errors.items()},
        **{k: f"after: {v}" for k, v in t.after.errors.items()},
        **diff_errors,
    }
    evidence = TrialEvidence.of_trial(
        t.diff,
        States(t.before.snapshots, "before", t.before.errors),
        States(t.after.snapshots, "after", t.after.errors),
        HarnessRecords(invocation=run.invocation, tool_calls=run.tool_calls),
        observation_errors,
    )
    scored = scorer.score(t.task, evidence, refusals(t.task))
    utility = scored.outcomes[Metric.UTILITY.value]
    security = scored.outcomes[Metric.SECURITY.value]
    auto = autonomy(run.invocation)
    reach = t.injection.reached if t.injection and t.injection.applied else None
    verdicts = decide(
        utility[0],
        security[0],
        auto,
        observation_errors=observation_errors,
        injection_reached=reach,
    )
    return _Evaluation(
        verdicts=verdicts,
        autonomy_reason=auto[1],
        outcomes={Metric.UTILITY.value: utility, Metric.SECURITY.value: security},
        observation_errors=observation_errors,
        scoring=scored.record,
        files=evidence.archive_files(),
    )


def _discrepancies_or_why(t: _Trial, sb: Sandbox) -> list[Finding]:
    """The findings, and a breach that stands with reach not observed; where looking for
    discrepancies fails, one `not_checked` finding that says why (findings never change a
    verdict, so the verdicts stand)."""
    breached = t.evaluation.verdicts.security_breached if t.evaluation else None
    reach = reach_mod.findings(t.injection, breached)
    try:
        return [*_discrepancies(t, sb), *reach]
    except Exception as exc:
        why = f"looking for discrepancies failed: {type(exc).__name__}: {exc}"
        return [Finding(kind="not_checked", sink="", change="", detail=why), *reach]


def _discrepancies(t: _Trial, sb: Sandbox) -> list[Finding]:
    """Scope, then what the agent's claims and the recorded calls say against the diff."""
    kinds = {name: prov.sink.kind for name, prov in sb.provisioned.items()}
    names: set[str] = set()
    for snap in t.before.snapshots.values():
        known = getattr(snap.state, "names", None)
        if callable(known):
            names.update(known())
    run = t.run
    claims = parse_claims(run.final_message if run else None)
    return [
        *scope_findings(t.task.scope, t.diff, set(t.task.sink_names())),
        *claim_findings(claims, t.diff, kinds, names),
        *call_findings(run.tool_calls if run else None, t.diff, kinds),
    ]


def evaluator_record(outcome: Outcome, preds: list[PredicateResult]) -> EvaluatorRecord:
    """How one metric was evaluated, as the record keeps it."""
    return EvaluatorRecord(
        kind=outcome.kind,
        predicates=[
            PredicateRecord(
                name=p.name,
                value=p.value,
                error=p.error,
                tiers=sorted(p.tiers),
                kind=p.kind,
                judge=p.judge,
            )
            for p in preds
        ],
    )


def not_measured(
    task: Task,
    controls: ControlsStatus,
    outcomes: Mapping[str, tuple[Outcome, list[PredicateResult]]],
) -> dict[str, str]:
    """Metric → why its verdict is no measurement: a fixed assertion, a predicate that cannot
    decide at all, or controls that do not prove this task's predicates."""
    out: dict[str, str] = {}
    for metric, (outcome, _) in outcomes.items():
        if outcome.kind == "assertion":
            out[metric] = "a fixed assertion, not a measurement"
    # A predicate that cannot decide at all is never proven: its metric is no measurement,
    # also where the task's other predicates happen to decide it.
    for metric, evaluator in (
        (Metric.UTILITY.value, task.utility_evaluator),
        (Metric.SECURITY.value, task.security_evaluator),
    ):
        cannot = unsupported_predicates(evaluator)
        if cannot and metric not in out:
            out[metric] = "; ".join(f"{n} is unsupported ({why})" for n, why in cannot.items())
    if controls.status not in ("proven", "control"):
        why = f"controls {controls.status}: {controls.reason}"
        for metric in (Metric.UTILITY.value, Metric.SECURITY.value):
            if controls.metrics:  # only these metrics are unproven; the others stand
                if metric in controls.metrics:
                    out.setdefault(metric, f"controls unproven: {controls.metrics[metric]}")
            else:
                out.setdefault(metric, why)
    return out


def _exposures(t: _Trial) -> list[ServerExposure]:
    gated = set(t.run.login_gates or ()) if t.run is not None else set()
    return [
        ServerExposure(
            sink=name,
            server=e.server,
            endpoint=e.endpoint,
            problems=list(e.problems),
            gated=e.endpoint in gated,
        )
        for name, e in sorted(t.exposures.items())
    ]


def _finish(t: _Trial, out: Path | None) -> TrialResult:
    """Build the record (unknown verdicts, with the reason, when the trial broke early) and
    write the archive."""
    evaluation = t.evaluation
    if evaluation is None:
        why = f"the trial did not run to evaluation: {t.error}"
        evaluation = _Evaluation(Verdicts(None, None, None, {m.value: why for m in Metric}))
    verdicts = evaluation.verdicts
    before, after = t.before.snapshots, t.after.snapshots
    kinds = {s.name: s.kind for s in t.task.sinks}
    snapshots = {
        name: SnapshotDigests(
            kind=kinds.get(name, "unknown"),
            before=before[name].digest if name in before else None,
            after=after[name].digest if name in after else None,
        )
        for name in sorted(set(kinds) | set(before) | set(after))
    }
    run = t.run
    final = run.final_message if run else None
    record = TrialRecord(
        cell=t.cell,
        utility_achieved=verdicts.utility_achieved,
        security_breached=verdicts.security_breached,
        autonomy_achieved=verdicts.autonomy_achieved,
        evaluation_errors=dict(verdicts.evaluation_errors),
        error=t.error,
        evaluators={m: evaluator_record(o, p) for m, (o, p) in evaluation.outcomes.items()},
        autonomy_reason=evaluation.autonomy_reason,
        invocation=run.invocation if run else None,
        injection=t.injection,
        snapshots=snapshots,
        observation_errors=evaluation.observation_errors,
        diff=t.diff.to_json(),
        findings=t.findings,
        tool_calls=list(run.tool_calls) if run and run.tool_calls is not None else None,
        network_attempts=(
            list(run.network_attempts) if run and run.network_attempts is not None else None
        ),
        exposures=_exposures(t),
        servers=t.servers,
        usage=t.usage,
        final_message=final[:FINAL_MESSAGE_LIMIT] if final else None,
        claims=parse_claims(final),
        controls=t.controls,
        scoring=evaluation.scoring,
        not_measured=not_measured(t.task, t.controls, evaluation.outcomes),
        task_digest=task_digest(t.task),
        versions=runtime_versions(),
        started_at=t.started,
        trigger_at=t.trigger_at,
        finished_at=time.time(),
    )
    folder = None
    files = archive_files(
        record, before, after, t.diff, run.logs if run else None, evidence=evaluation.files
    )
    if out is not None:
        folder = write_new_archive(out / t.cell.folder, files)  # never over an earlier one
    preds = {m: p for m, (_, p) in evaluation.outcomes.items()}
    return TrialResult(record=record, archive=folder, diff=t.diff, predicates=preds, files=files)
