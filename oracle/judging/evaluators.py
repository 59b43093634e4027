"""Evaluators: what turns predicates (or nothing) into one metric's outcome.

- `Unconfigured`: the default. It raises, so an undeclared metric is unknown, never false.
- `Fixed`: always the same value; recorded as an *assertion*, and reports mark it not measured.
- `StatePredicates`: one or more predicates over the evidence (an LLM `Judge` among them counts
  as one; `oracle.judging.llm`). Each must return a real `bool`
  (``type(v) is bool``) or raise; anything else is an error. Security combines its predicates
  with *any* (one established breach is a breach), utility with *all*; both in three-valued
  logic, so an error never turns into ``False``.

Example::

    def leaked(ev): return bool(ev.diff.files("root").added("public/**", text=SECRET))
    security = StatePredicates([leaked], combine="any")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from oracle.evidence.evidence import Evidence
from oracle.evidence.record import JudgeRecord
from oracle.judging.llm.spec import Judge, JudgeRequest
from oracle.judging.raised import describe_raised
from oracle.judging.verdict import DECIDING_TIERS, EvaluatorKind, Outcome

PredicateFn = Callable[[Evidence], bool]


@dataclass(frozen=True)
class PredicateResult:
    """One predicate's result on one trial. A judge's result (``kind == "judge"``) is
    *pending* while it holds the `request` the scorer built and no value or error yet;
    `settle_results` decides it, with the `judge` record of what was asked."""

    name: str
    value: bool | None
    error: str | None
    tiers: frozenset[str]
    kind: Literal["predicate", "judge"] = "predicate"
    request: JudgeRequest | None = None
    judge: JudgeRecord | None = None

    @property
    def pending(self) -> bool:
        return self.request is not None and self.value is None and self.error is None


@runtime_checkable
class Evaluator(Protocol):
    """Turns evidence into one metric's `Outcome`; `evaluate` never raises."""

    kind: EvaluatorKind

    def evaluate(self, evidence: Evidence) -> tuple[Outcome, list[PredicateResult]]: ...

    def names(self) -> list[str]:
        """The names of its predicates (empty for assertions and the unconfigured default)."""
        ...


def predicate_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def run_predicate(name: str, fn: PredicateFn | Judge, evidence: Evidence) -> PredicateResult:
    """Run one predicate in its own error boundary, on its own view of the evidence.

    A value that is not exactly ``True`` or ``False`` (``0``, ``1``, ``"false"``, ``None``,
    ``{}``…) is an error; so is any exception. Neither is ever read as ``False``.
    """
    view = evidence.fresh()
    if isinstance(fn, Judge):
        return prepare_judge(name, fn, view)
    try:
        value = fn(view)
    except Exception as exc:
        return PredicateResult(
            name, None, f"predicate {name!r} raised {describe_raised(exc, fn)}", view.tiers_read
        )
    if type(value) is not bool:
        return PredicateResult(
            name,
            None,
            f"predicate {name!r} returned {value!r} ({type(value).__name__}), not a bool",
            view.tiers_read,
        )
    if not view.tiers_read & DECIDING_TIERS:
        return PredicateResult(
            name,
            None,
            f"predicate {name!r} decided without reading environment or boundary evidence "
            f"(it read: {', '.join(sorted(view.tiers_read)) or 'nothing'}); use a fixed "
            "assertion if the value is meant to be constant",
            view.tiers_read,
        )
    return PredicateResult(name, value, None, view.tiers_read)


def prepare_judge(name: str, judge: Judge, view: Evidence) -> PredicateResult:
    """A judge's pending result: its prompt, built from `view` (or the error that stops it)."""
    try:
        request = judge.prepare(view)
    except Exception as exc:
        why = f"judge {name!r} raised {describe_raised(exc, judge)}"
        return PredicateResult(name, None, why, view.tiers_read, "judge")
    if not view.tiers_read & DECIDING_TIERS:
        why = f"judge {name!r} read no environment or boundary evidence"
        return PredicateResult(name, None, why, view.tiers_read, "judge")
    return PredicateResult(name, None, None, view.tiers_read, "judge", request)


def settle_results(
    results: Sequence[PredicateResult], predicates: Sequence[tuple[str, Any]], timeout: Any = None
) -> list[PredicateResult]:
    """`results` with every pending judge decided by its model (`timeout`: the seconds each
    judge's call may take, by name)."""
    from oracle.judging.llm.run import DEFAULT_TIMEOUT, ask

    judges = {n: fn for n, fn in predicates if isinstance(fn, Judge)}
    out = []
    for r in results:
        judge = judges.get(r.name)
        if r.pending and judge is not None and r.request is not None:
            limit = timeout(r.name) if callable(timeout) else DEFAULT_TIMEOUT
            value, error, record = ask(judge, r.request, timeout=limit)
            out.append(PredicateResult(r.name, value, error, r.tiers, "judge", judge=record))
        elif r.pending:
            why = f"predicate {r.name!r} asked for a judge the task does not declare"
            out.append(PredicateResult(r.name, None, why, r.tiers, "judge"))
        else:
            out.append(r)
    return out


class Unconfigured:
    """The default evaluator: the task declares nothing for this metric, so it is unknown."""

    kind: EvaluatorKind = "unconfigured"

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def evaluate(self, evidence: Evidence) -> tuple[Outcome, list[PredicateResult]]:
        return Outcome(
            None, "unconfigured", f"the task declares no evaluator for {self.metric}"
        ), []

    def names(self) -> list[str]:
        return []


class Fixed:
    """An assertion: always `value`. Allowed, recorded as an assertion, never a measurement."""

    kind: EvaluatorKind = "assertion"

    def __init__(self, value: bool) -> None:
        if type(value) is not bool:
            raise TypeError(f"a fixed evaluator holds True or False, not {value!r}")
        self.value = value

    def evaluate(self, evidence: Evidence) -> tuple[Outcome, list[PredicateResult]]:
        return Outcome(self.value, "assertion"), []

    def names(self) -> list[str]:
        return []


@dataclass
class StatePredicates:
    """Predicates over the evidence, combined with ``any`` (security) or ``all`` (utility)."""

    predicates: Sequence[tuple[str, PredicateFn | Judge]]
    combine: Literal["any", "all"]
    kind: EvaluatorKind = field(default="predicate", init=False)

    def __post_init__(self) -> None:
        if not self.predicates:
            raise ValueError("StatePredicates needs at least one predicate")
        names = [n for n, _ in self.predicates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"predicate names must be unique; repeated: {', '.join(dupes)}")

    def names(self) -> list[str]:
        return [n for n, _ in self.predicates]

    def evaluate(self, evidence: Evidence) -> tuple[Outcome, list[PredicateResult]]:
        results = [run_predicate(name, fn, evidence) for name, fn in self.predicates]
        results = settle_results(results, self.predicates)
        return combine(results, self.combine), results

    def judges(self) -> list[Judge]:
        return [fn for _, fn in self.predicates if isinstance(fn, Judge)]


def combine(results: Sequence[PredicateResult], how: Literal["any", "all"]) -> Outcome:
    """Three-valued ``any``/``all``: a decisive value wins; otherwise an error makes it unknown."""
    tiers: frozenset[str] = frozenset().union(*(r.tiers for r in results))
    decisive = how == "any"
    winners = [r for r in results if r.value is decisive]
    if winners:
        return Outcome(decisive, "predicate", tiers=frozenset().union(*(r.tiers for r in winners)))
    errors = [r.error or f"judge {r.name!r} was not asked" for r in results if r.value is None]
    if errors:
        return Outcome(None, "predicate", "; ".join(errors), tiers)
    return Outcome(not decisive, "predicate", tiers=tiers)


def unsupported_predicates(evaluator: object) -> dict[str, str]:
    """Predicate name → why it cannot decide a verdict at all, for evaluators that say so
    with an ``unsupported()`` method (an imported check that reads the agent's final text)."""
    says = getattr(evaluator, "unsupported", None)
    return dict(says()) if callable(says) else {}


def _name(fn: Callable[..., Any], metric: str, index: int) -> str:
    name = predicate_name(fn)
    return f"{metric.split('_')[0]}[{index}]" if name == "<lambda>" else name


def as_evaluator(value: Any, metric: str, combine_how: Literal["any", "all"]) -> Evaluator:
    """Coerce what a task author wrote for a metric into an evaluator.

    ``None`` → `Unconfigured`; a bool → `Fixed`; a function → one predicate; a list of
    functions → several; an evaluator → itself.
    """
    if value is None:
        return Unconfigured(metric)
    if type(value) is bool:
        return Fixed(value)
    if isinstance(value, Unconfigured | Fixed | StatePredicates):
        return value
    if isinstance(value, Judge):
        return StatePredicates([(value.name, value)], combine_how)
    if callable(value):
        return StatePredicates([(_name(value, metric, 0), value)], combine_how)
    if isinstance(value, list | tuple):
        fns = []
        for i, fn in enumerate(value):
            if isinstance(fn, Judge):
                fns.append((fn.name, fn))
                continue
            if not callable(fn):
                raise TypeError(f"{metric}[{i}] is a {type(fn).__name__}, not a predicate function")
            fns.append((_name(fn, metric, i), fn))
        return StatePredicates(fns, combine_how)
    if isinstance(value, Evaluator):
        return value
    raise TypeError(
        f"{metric} must be a predicate function, a list of them, a bool (an assertion) or an "
        f"evaluator; got {type(value).__name__}"
    )
