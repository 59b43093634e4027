"""Calibrating a task's LLM judges on its controls and labelled examples (DESIGN §6).

A judge is proven like a predicate: it fires on every control that must make it fire and on no
control that must leave it silent. Its labelled examples are judged beside the controls, and
both together give its sensitivity and specificity as counts (`JudgeCalibration`), over the
controls on which its model was asked (not the no-op, whose empty output the judge says no to
without asking). A judge is proven only where it also does better than chance on them
(sensitivity + specificity > 1), so that the rates it decides can be corrected for its errors
(`oracle.reports.stats`): a judge that always says yes, or always no, is never proven.

A judge without a model (none configured) is *untested*, with that reason: its controls could
not ask it anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from oracle.controls.derived import MUTANT
from oracle.judging.llm.calibration import Agreement, JudgeCalibration
from oracle.judging.llm.run import judge_example, model_of
from oracle.judging.llm.spec import Judge
from oracle.judging.verdict import Metric

if TYPE_CHECKING:
    from oracle.authoring.task import Control, Task


class ControlRun(Protocol):
    """What calibration reads of one control's run (`oracle.controls.run.ControlRun`)."""

    control: Control
    fired: dict[str, bool | None]
    result: Any


def asked(run: ControlRun, metric: str, name: str) -> bool:
    """Whether judge `name` asked its model on `run` (it does not where the agent's output
    held nothing it reads: its "no" then says nothing about the model)."""
    for p in run.result.predicates.get(metric, ()):
        if p.name == name and p.judge is not None:
            return bool(p.judge.asked)
    return False


NO_MODEL = "no judge model configured"


def expected(run: ControlRun, metric: str, name: str) -> bool | None:
    """What judge `name` of `metric` must say on `run` (None: the control does not say)."""
    if metric == Metric.SECURITY.value:
        return run.control.expected_security(name)
    return run.control.utility


def calibrate(
    task: Task, metric: str, judge: Judge, runs: Sequence[ControlRun]
) -> tuple[JudgeCalibration, list[str]]:
    """The judge's agreement with its controls and examples, and what went wrong on the
    examples (each a line). A control on which the judge had nothing to read (the no-op) is
    not counted: the judge said no without asking. Each example gets the judge's time limit,
    as a trial does."""
    timeout = float(task.predicate_timeouts.get(judge.name, task.predicate_timeout))
    key = f"{metric}:{judge.name}"
    pairs: list[tuple[bool, bool | None]] = []  # (expected, said), where the model was asked
    for r in runs:
        if r.control.derived == MUTANT:
            continue  # a near miss promises nothing: it is no label for the judge
        want = expected(r, metric, judge.name)
        said = r.fired.get(key)
        if want is not None and (said is None or asked(r, metric, judge.name)):
            pairs.append((want, said))
    controls = _agreement(pairs)
    problems: list[str] = []
    example_pairs: list[tuple[bool, bool | None]] = []
    model = model_of(judge)
    injection = task.injection.text if task.injection is not None else None
    for i, ex in enumerate(judge.examples):
        if model is None:
            break
        value, error, _ = judge_example(judge, ex, injection, timeout=timeout)
        example_pairs.append((ex.expected, value))
        label = ex.name or f"examples[{i}]"
        if value is None:
            problems.append(f"{label}: {error}")
        elif value is not ex.expected:
            problems.append(
                f"{label}: said {str(value).lower()}, labelled {str(ex.expected).lower()}"
            )
    both = pairs + example_pairs
    cal = JudgeCalibration(
        task=task.name,
        metric=metric,
        judge=judge.name,
        model=model,
        sensitivity=_agreement([p for p in both if p[0] is True]),
        specificity=_agreement([p for p in both if p[0] is False]),
        controls=controls,
        examples=_agreement(example_pairs),
        unknown=sum(1 for _, said in both if said is None),
    )
    return cal, problems


def _agreement(pairs: Sequence[tuple[bool, bool | None]]) -> Agreement:
    known = [(w, s) for w, s in pairs if s is not None]
    return Agreement(agreed=sum(1 for w, s in known if w is s), of=len(known))


def better_than_chance(cal: JudgeCalibration) -> str | None:
    """Why `cal` does not show the judge beating chance, or None where it does."""
    se, sp = cal.sensitivity.rate(), cal.specificity.rate()
    if se is None or sp is None:
        missing = "positive" if se is None else "negative"
        return f"no known {missing} (control or example) was judged"
    if se + sp <= 1:
        return (
            f"sensitivity {cal.sensitivity.agreed}/{cal.sensitivity.of} and specificity "
            f"{cal.specificity.agreed}/{cal.specificity.of} are no better than chance"
        )
    return None


def no_model(errors: dict[str, Any], key: str) -> bool:
    """Whether judge `key`'s errors on the controls say no model was configured."""
    return any(NO_MODEL in str(e) for k, e in errors.items() if k == key)
