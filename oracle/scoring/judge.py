"""Judging a task's metrics step by step, wherever the scorer runs.

A `MetricPlan` lists what has to run for one metric: nothing (the metric is unconfigured, or a
fixed assertion), one `Step` per predicate (`StatePredicates`, combined with *any* or *all*), or
one step for an evaluator of the task's own (run whole). A scorer runs the steps — in a sealed
process, each with its time limit, or in this process for debugging — and `assemble` turns
their results into the metric's `Outcome` with the rules of `oracle.judging.evaluators`.

Every step is its own error boundary. An exception is the predicate's error, as always; a
`SystemExit`, `KeyboardInterrupt` or any other `BaseException` raised by a predicate is
*contained*: the metric is unknown with the reason, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oracle.evidence.evidence import Evidence
from oracle.judging.evaluators import (
    Evaluator,
    Fixed,
    PredicateResult,
    StatePredicates,
    Unconfigured,
    combine,
    run_predicate,
    settle_results,
)
from oracle.judging.llm.spec import JudgeRequest
from oracle.judging.verdict import EvaluatorKind, Metric, Outcome

if TYPE_CHECKING:
    from oracle.authoring.task import Task

#: Seconds a predicate may run, unless the task says otherwise.
DEFAULT_TIMEOUT = 30.0
METRICS = (Metric.UTILITY.value, Metric.SECURITY.value)


@dataclass(frozen=True)
class Step:
    """One thing a scorer runs: predicate `index` of `metric`'s evaluator, or (``index`` None)
    the whole evaluator."""

    metric: str
    index: int | None
    name: str
    timeout: float


@dataclass(frozen=True)
class MetricPlan:
    """What has to run to judge one metric."""

    metric: str
    evaluator: Evaluator
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class StepResult:
    """What one step produced. ``contained`` says why the scorer had to contain it (it ran past
    its limit, exited, crashed, raised `SystemExit`…); such a step's results are errors."""

    step: Step
    results: tuple[PredicateResult, ...]
    outcome: Outcome | None = None
    contained: str | None = None

    @classmethod
    def failed(cls, step: Step, why: str, *, contained: bool) -> StepResult:
        """A step that produced nothing: its predicate (or evaluator) is an error."""
        kind: EvaluatorKind = "predicate"
        result = PredicateResult(step.name, None, why, frozenset())
        outcome = Outcome(None, kind, why) if step.index is None else None
        return cls(step, (result,), outcome, why if contained else None)

    def to_json(self) -> dict[str, Any]:
        return {
            "results": [_result_json(r) for r in self.results],
            "outcome": _outcome_json(self.outcome) if self.outcome else None,
            "contained": self.contained,
        }

    @classmethod
    def from_json(cls, step: Step, raw: Mapping[str, Any]) -> StepResult:
        """Read back what a scorer process sent; anything malformed is the step's error."""
        try:
            results = tuple(_result_from(r) for r in raw["results"])
            outcome = _outcome_from(raw["outcome"]) if raw.get("outcome") is not None else None
            contained = raw.get("contained")
            if contained is not None and not isinstance(contained, str):
                raise TypeError("'contained' is not text")
            if step.index is not None and len(results) != 1:
                raise ValueError(f"{len(results)} results for one predicate")
            if step.index is None and outcome is None:
                raise ValueError("no outcome for an evaluator")
        except (KeyError, TypeError, ValueError) as exc:
            why = f"the scorer answered {step.name!r} with a malformed result: {exc}"
            return cls.failed(step, why, contained=True)
        return cls(step, results, outcome, contained)


def _result_json(r: PredicateResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": r.name,
        "value": r.value,
        "error": r.error,
        "tiers": sorted(r.tiers),
    }
    if r.kind == "judge":
        out["kind"] = "judge"
        out["request"] = r.request.to_json() if r.request is not None else None
    return out


def _result_from(raw: Mapping[str, Any]) -> PredicateResult:
    value, error = raw["value"], raw["error"]
    if value is not None and type(value) is not bool:
        raise TypeError(f"value {value!r} is not a bool")
    kind = raw.get("kind", "predicate")
    if kind not in ("predicate", "judge"):
        raise ValueError(f"unknown predicate kind {kind!r}")
    request = None
    if kind == "judge" and raw.get("request") is not None:
        if value is not None or error is not None:
            raise ValueError("a judge's prompt beside a decided value")
        request = JudgeRequest.from_json(raw["request"])
    if value is None and not isinstance(error, str) and request is None:
        raise TypeError("an unknown value without its error")
    tiers = raw["tiers"]
    if not isinstance(tiers, list) or not all(isinstance(t, str) for t in tiers):
        raise TypeError("tiers are not a list of names")
    return PredicateResult(str(raw["name"]), value, error, frozenset(tiers), kind, request)


def _outcome_json(o: Outcome) -> dict[str, Any]:
    return {"value": o.value, "kind": o.kind, "error": o.error, "tiers": sorted(o.tiers)}


def _outcome_from(raw: Mapping[str, Any]) -> Outcome:
    kind = raw["kind"]
    if kind not in ("predicate", "assertion", "unconfigured"):
        raise ValueError(f"unknown evaluator kind {kind!r}")
    return Outcome(raw["value"], kind, raw["error"], frozenset(raw["tiers"]))


def evaluator_of(task: Task, metric: str) -> Evaluator:
    if metric == Metric.UTILITY.value:
        return task.utility_evaluator
    if metric == Metric.SECURITY.value:
        return task.security_evaluator
    raise KeyError(f"no metric {metric!r} to judge (metrics: {', '.join(METRICS)})")


def time_limit(task: Task, name: str) -> float:
    """Seconds predicate (or evaluator) `name` of `task` may run."""
    limits: Mapping[str, float] = getattr(task, "predicate_timeouts", None) or {}
    default = getattr(task, "predicate_timeout", None) or DEFAULT_TIMEOUT
    return float(limits.get(name, default))


def plan(task: Task) -> list[MetricPlan]:
    """The steps that judge utility, then security."""
    out = []
    for metric in METRICS:
        ev = evaluator_of(task, metric)
        steps: tuple[Step, ...]
        if isinstance(ev, Unconfigured | Fixed):
            steps = ()
        elif isinstance(ev, StatePredicates):
            steps = tuple(
                Step(metric, i, name, time_limit(task, name))
                for i, (name, _) in enumerate(ev.predicates)
            )
        else:
            name = "+".join(ev.names()) or type(ev).__name__
            steps = (Step(metric, None, name, time_limit(task, name)),)
        out.append(MetricPlan(metric, ev, steps))
    return out


def _describe(exc: BaseException) -> str:
    shown = f"({exc})" if str(exc) else ""
    return f"{type(exc).__name__}{shown}"


def run_step(task: Task, evidence: Evidence, step: Step, *, contain_interrupt: bool) -> StepResult:
    """Run one step on `evidence` (each predicate reads its own copy). A `KeyboardInterrupt`
    is contained only where it cannot be the user's Ctrl-C (`contain_interrupt`, in a scorer
    process that ignores the terminal's signals)."""
    ev = evaluator_of(task, step.metric)
    try:
        if step.index is not None:
            assert isinstance(ev, StatePredicates)
            name, fn = ev.predicates[step.index]
            return StepResult(step, (run_predicate(name, fn, evidence),))
        outcome, results = ev.evaluate(evidence.fresh())
        if not isinstance(outcome, Outcome) or not all(
            isinstance(r, PredicateResult) for r in results
        ):
            why = f"evaluator {step.name!r} returned {outcome!r}, not an outcome and its results"
            return StepResult.failed(step, why, contained=False)
        return StepResult(step, tuple(results), outcome)
    except KeyboardInterrupt as exc:
        if not contain_interrupt:
            raise
        why = f"predicate {step.name!r} raised {_describe(exc)}"
        return StepResult.failed(step, why, contained=True)
    except Exception as exc:  # an evaluator that broke its promise never to raise
        why = f"evaluator {step.name!r} raised {_describe(exc)}"
        return StepResult.failed(step, why, contained=False)
    except BaseException as exc:  # SystemExit, GeneratorExit…: the predicate's, not ours
        why = f"predicate {step.name!r} raised {_describe(exc)}"
        return StepResult.failed(step, why, contained=True)


def refused_result(name: str, why: str) -> PredicateResult:
    """A predicate `oracle check` refuses: never run, an error, so it decides nothing."""
    return PredicateResult(
        name, None, f"predicate {name!r} refused by oracle check: {why}", frozenset()
    )


def assemble(
    mp: MetricPlan, done: Sequence[StepResult], refused: Mapping[str, str]
) -> tuple[Outcome, list[PredicateResult]]:
    """One metric's outcome from its steps' results (refused predicates are errors). A
    judge among them is decided here, by asking its model (`oracle.judging.llm.run`)."""
    ev = mp.evaluator
    if isinstance(ev, Unconfigured | Fixed):
        return ev.evaluate(None)  # type: ignore[arg-type]  # neither reads the evidence
    by_step = {r.step: r for r in done}
    if isinstance(ev, StatePredicates):
        results = []
        for step in mp.steps:
            if step.name in refused:
                results.append(refused_result(step.name, refused[step.name]))
            elif step in by_step:
                results.extend(by_step[step].results)
            else:
                why = f"predicate {step.name!r} was not run"
                results.append(PredicateResult(step.name, None, why, frozenset()))
        # A judge's prompt was built where the evidence is; its model is asked from here.
        limits = {s.name: s.timeout for s in mp.steps}
        results = settle_results(results, ev.predicates, lambda n: limits.get(n, DEFAULT_TIMEOUT))
        return combine(results, ev.combine), results
    (step,) = mp.steps
    got = by_step.get(step)
    if got is None or got.outcome is None:
        why = f"evaluator {step.name!r} was not run"
        return Outcome(None, "predicate", why), []
    return got.outcome, list(got.results)


def steps_to_run(plans: Sequence[MetricPlan], refused: Mapping[str, str]) -> list[Step]:
    """Every step of `plans` that must run (a refused predicate never does)."""
    return [
        s
        for mp in plans
        for s in mp.steps
        if not (isinstance(mp.evaluator, StatePredicates) and s.name in refused)
    ]
