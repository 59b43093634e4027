"""Scorers: where a trial's predicates run, and what they are handed.

`Scorer` is the protocol: ``score(task, evidence, refused)`` judges utility and security and
says how (`ScoringRecord`). Two kinds:

- `oracle.scoring.sealed.SealedScorer` (the default): a separate process that never held the
  transcript, handed only the evidence bundle;
- `InProcessScorer`: in this process, for debugging (a breakpoint in a predicate); the record
  names it, and a predicate's time limit is not enforced here.

Example::

    scored = InProcessScorer().score(task, TrialEvidence.from_archive(files), refusals(task))
    scored.outcomes["security_breached"][0].value
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from oracle.evidence.archive import evidence_files
from oracle.evidence.diff import Diff
from oracle.evidence.evidence import Evidence, HarnessRecords
from oracle.evidence.record import ScoringRecord
from oracle.evidence.snapshot import States
from oracle.judging.evaluators import PredicateResult
from oracle.judging.verdict import Outcome
from oracle.scoring.bundle import HARNESS, EvidenceBundle, harness_file, open_evidence, task_facts
from oracle.scoring.judge import assemble, plan, run_step, steps_to_run

if TYPE_CHECKING:
    from oracle.authoring.task import Task

Outcomes = dict[str, tuple[Outcome, list[PredicateResult]]]


@dataclass
class TrialEvidence:
    """One trial's evidence, as a scorer takes it: the live objects of a trial that just ran
    (``live``), or an archived trial's files; the bundle is made once, when first asked for."""

    files: dict[str, bytes] | None = None
    live: tuple[Diff, States, States, HarnessRecords] | None = None
    observation_errors: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_trial(
        cls,
        diff: Diff,
        before: States,
        after: States,
        harness: HarnessRecords,
        observation_errors: Mapping[str, str],
    ) -> TrialEvidence:
        return cls(None, (diff, before, after, harness), dict(observation_errors))

    @classmethod
    def from_archive(cls, files: Mapping[str, bytes]) -> TrialEvidence:
        return cls(dict(EvidenceBundle.from_archive(files).files))

    @cached_property
    def bundle(self) -> EvidenceBundle:
        if self.files is not None:
            return EvidenceBundle(self.files)
        assert self.live is not None
        diff, before, after, harness = self.live
        files = evidence_files(before, after, diff)
        files[HARNESS] = harness_file(
            harness.invocation, harness.tool_calls, self.observation_errors
        )
        return EvidenceBundle(files)

    def evidence(self, task: Task) -> Evidence:
        """The evidence a predicate of `task` reads: the live objects, else rebuilt."""
        if self.live is None:
            return open_evidence(self.bundle, task)
        diff, before, after, harness = self.live
        return Evidence(
            diff=diff, before=before, after=after, harness=harness, task=task_facts(task)
        )

    def archive_files(self) -> dict[str, bytes] | None:
        """The evidence files the archive keeps (the bundle without ``harness.json``), where
        the bundle was made (a sealed scorer was handed it); None where it was not, so that
        nothing is serialised twice or for nothing."""
        if "bundle" not in vars(self):  # the cached property was never computed
            return None
        return {k: v for k, v in self.bundle.files.items() if k != HARNESS}


@dataclass
class Scored:
    """Utility's and security's outcomes with their predicates' results, and how they were
    judged."""

    outcomes: Outcomes
    record: ScoringRecord


class Scorer(Protocol):
    """Judges one trial's utility and security from its evidence."""

    def score(self, task: Task, evidence: TrialEvidence, refused: Mapping[str, str]) -> Scored:
        """The outcomes; `refused` names predicates `oracle check` refuses (never run)."""
        ...


class InProcessScorer:
    """Predicates run in this process, on the live evidence: for debugging only. A predicate
    that raises `SystemExit` is contained; one that loops is not (no time limit here)."""

    def __init__(self, note: str = "") -> None:
        self.note = (
            note or "in-process scoring, for debugging: predicates ran beside the transcript"
        )

    def score(self, task: Task, evidence: TrialEvidence, refused: Mapping[str, str]) -> Scored:
        plans = plan(task)
        todo = set(steps_to_run(plans, refused))
        contained: list[str] = []
        outcomes: Outcomes = {}
        try:
            ev = evidence.evidence(task)
        except Exception as exc:
            why = f"the evidence cannot be read: {type(exc).__name__}: {exc}"
            return Scored(unreadable(task, why, refused), self._record([]))
        for mp in plans:
            done = []
            for step in mp.steps:
                if step in todo:
                    result = run_step(task, ev, step, contain_interrupt=False)
                    if result.contained:
                        contained.append(result.contained)
                    done.append(result)
            outcomes[mp.metric] = assemble(mp, done, refused)
        return Scored(outcomes, self._record(contained))

    def _record(self, contained: list[str]) -> ScoringRecord:
        return ScoringRecord(
            mode="in-process", isolation="none", note=self.note, contained=contained
        )


def unreadable(task: Task, why: str, refused: Mapping[str, str]) -> Outcomes:
    """Every step of `task` failed with `why` (the evidence could not be handed over)."""
    from oracle.scoring.judge import StepResult

    outcomes: Outcomes = {}
    for mp in plan(task):
        done = [StepResult.failed(s, why, contained=False) for s in mp.steps]
        outcomes[mp.metric] = assemble(mp, done, refused)
    return outcomes
