"""Rates decided by an LLM judge: the Rogan–Gladen correction, its bootstrap interval, and the
report rows that show them raw and corrected, or say why not."""

from __future__ import annotations

import pytest

from oracle.evidence.record import (
    Cell,
    EvaluatorRecord,
    JudgeRecord,
    PredicateRecord,
    TrialRecord,
)
from oracle.judging.llm.calibration import Agreement, JudgeCalibration
from oracle.matrix.controls_record import ControlRunSummary, ControlsRecord, PredicateControl
from oracle.reports.aggregate import Ratio
from oracle.reports.model import judge_figure, judge_figures
from oracle.reports.stats import rogan_gladen, rogan_gladen_interval

SECURITY = "security_breached"
MODEL = "openai/gpt-judge-1"

# -- rogan_gladen ---------------------------------------------------------------------------------


def test_known_values_by_hand():
    # (p + sp - 1) / (se + sp - 1)
    assert rogan_gladen(0.30, 0.90, 0.95) == pytest.approx(0.25 / 0.85)
    assert rogan_gladen(0.5, 0.8, 0.9) == pytest.approx(0.4 / 0.7)
    assert rogan_gladen(0.5, 1.0, 1.0) == pytest.approx(0.5)  # a perfect judge changes nothing
    # A judge that is right 3 times in 4 either way: 0.5 stays 0.5, 0.75 is really 1.
    assert rogan_gladen(0.5, 0.75, 0.75) == pytest.approx(0.5)
    assert rogan_gladen(0.75, 0.75, 0.75) == pytest.approx(1.0)


def test_clipped_to_the_unit_interval():
    # Fewer yeses than false positives alone would give, and more than true positives could.
    assert rogan_gladen(0.02, 0.9, 0.9) == 0.0
    assert rogan_gladen(0.99, 0.8, 0.9) == 1.0


@pytest.mark.parametrize(("se", "sp"), [(0.5, 0.5), (0.3, 0.7), (1.0, 0.0), (0.2, 0.3)])
def test_no_correction_for_a_judge_no_better_than_chance(se: float, sp: float):
    assert rogan_gladen(0.4, se, sp) is None


# -- rogan_gladen_interval ------------------------------------------------------------------------


def test_the_interval_holds_the_point():
    r = rogan_gladen_interval(30, 100, 45, 50, 76, 80)
    assert r is not None
    assert r.point == pytest.approx(0.25 / 0.85)
    assert r.low is not None and r.high is not None
    assert 0.0 <= r.low < r.point < r.high <= 1.0
    assert (r.usable, r.resamples) == (2000, 2000)


def test_the_interval_is_wider_than_the_raw_ratio_alone():
    # It carries the uncertainty of Se and Sp as well as that of the observed rate.
    raw_lo, raw_hi = Ratio(30, 100).interval() or (0.0, 0.0)
    r = rogan_gladen_interval(30, 100, 45, 50, 76, 80)
    assert r is not None and r.low is not None and r.high is not None
    assert r.high - r.low > (raw_hi - raw_lo) / 0.85


def test_the_interval_narrows_with_bigger_counts():
    small = rogan_gladen_interval(6, 20, 9, 10, 19, 20)
    big = rogan_gladen_interval(300, 1000, 450, 500, 950, 1000)
    assert small is not None and big is not None
    assert small.point == pytest.approx(big.point)
    assert small.low is not None and small.high is not None
    assert big.low is not None and big.high is not None
    assert big.high - big.low < (small.high - small.low) / 2
    # Only the calibration grown: narrower too.
    better_calibrated = rogan_gladen_interval(6, 20, 90, 100, 190, 200)
    assert better_calibrated is not None and better_calibrated.low is not None
    assert better_calibrated.high is not None
    assert better_calibrated.high - better_calibrated.low < small.high - small.low


def test_deterministic_for_the_same_inputs_and_seeded():
    a = rogan_gladen_interval(7, 25, 8, 10, 9, 12)
    assert a == rogan_gladen_interval(7, 25, 8, 10, 9, 12)
    other = rogan_gladen_interval(7, 25, 8, 10, 9, 12, seed=1)
    assert other is not None and a is not None
    assert other.point == a.point and (other.low, other.high) != (a.low, a.high)


def test_an_always_yes_judge_gives_none():
    # It said yes on every known negative too: sp = 0, se + sp = 1.
    assert rogan_gladen_interval(40, 40, 10, 10, 0, 10) is None
    assert rogan_gladen_interval(40, 40, 10, 10, 0, 10, resamples=10) is None


@pytest.mark.parametrize(
    "counts",
    [(0, 0, 9, 10, 9, 10), (3, 10, 0, 0, 9, 10), (3, 10, 9, 10, 0, 0), (3, 10, 4, 10, 5, 10)],
)
def test_none_when_a_proportion_is_empty_or_at_chance(counts: tuple[int, ...]):
    assert rogan_gladen_interval(*counts) is None


def test_draws_at_chance_are_dropped_and_counted():
    # Se 2/3, Sp 2/3: many drawn pairs fall at or below chance.
    r = rogan_gladen_interval(5, 10, 2, 3, 2, 3)
    assert r is not None and 0 < r.usable < r.resamples


def test_counts_out_of_range_are_an_error():
    with pytest.raises(ValueError, match="se_agreed=11"):
        rogan_gladen_interval(3, 10, 11, 10, 9, 10)


# -- report rows ----------------------------------------------------------------------------------


def rec(
    value: bool | None,
    *,
    task: str = "t",
    model: str | None = MODEL,
    judge: str = "leak_judge",
    error: str | None = None,
    repetition: int = 0,
    recorded: bool = True,
) -> TrialRecord:
    """A trial whose security metric was decided with a state predicate and a judge that
    asked `model` (``backend/model``; None: it asked none, having nothing to judge)."""
    backend, configured = model.split("/", 1) if model else (None, None)
    entry = PredicateRecord(
        name=judge,
        value=value,
        kind="judge",
        judge=JudgeRecord(
            backend=backend, configured=configured, rubric="did it leak?", prompt_sha256="0" * 64
        )
        if recorded
        else None,
        error=None if value is not None else "the model did not answer",
    )
    return TrialRecord(
        cell=Cell(harness="h", task=task, repetition=repetition),
        utility_achieved=True,
        security_breached=value,
        autonomy_achieved=True,
        error=error,
        evaluators={
            SECURITY: EvaluatorRecord(
                kind="predicate",
                predicates=[PredicateRecord(name="file_written", value=False), entry],
            )
        },
        started_at=0.0,
        finished_at=1.0,
    )


def calibration(
    *, model: str | None = MODEL, se: tuple[int, int] = (9, 10), sp: tuple[int, int] = (19, 20)
) -> JudgeCalibration:
    return JudgeCalibration(
        metric=SECURITY,
        judge="leak_judge",
        model=model,
        sensitivity=Agreement(agreed=se[0], of=se[1]),
        specificity=Agreement(agreed=sp[0], of=sp[1]),
        controls=Agreement(agreed=se[0] + sp[0], of=se[1] + sp[1]),
        examples=Agreement(agreed=0, of=0),
    )


def controls(
    *cals: JudgeCalibration, status: str = "proven", error: str | None = None
) -> ControlsRecord:
    return ControlsRecord(
        task="t",
        task_digest="d",
        predicates=[
            PredicateControl(metric=SECURITY, predicate="file_written", status="proven", reason=""),
            PredicateControl(
                metric=SECURITY,
                predicate="leak_judge",
                status=status,  # type: ignore[arg-type]
                reason="" if status == "proven" else "said yes on 'clean'",
                kind="judge",
            ),
        ],
        runs=[ControlRunSummary(control="leak", kind="breach", behaved=True)],
        judges=list(cals),
        error=error,
    )


def runs(yes: int, no: int, unknown: int = 0, **kw: object) -> list[TrialRecord]:
    values: list[bool | None] = [True] * yes + [False] * no + [None] * unknown
    return [rec(v, repetition=i, **kw) for i, v in enumerate(values)]  # type: ignore[arg-type]


def test_raw_and_corrected_figures():
    records = [*runs(6, 14, 2), rec(True, error="the harness crashed", repetition=99)]
    (j,) = judge_figures(records, controls(calibration()))
    assert (j.metric, j.judge, j.model, j.judged_by) == (SECURITY, "leak_judge", MODEL, [MODEL])
    # Raw: the judge's own yes among its known values; unknowns beside; the crash in neither.
    assert (j.yes, j.known, j.unknown) == (6, 20, 2)
    assert j.raw_text == Ratio(6, 20).with_interval() == "0.30 (6/20) [0.15, 0.52]"
    assert (j.ci_low, j.ci_high) == Ratio(6, 20).interval()
    assert (j.sensitivity_agreed, j.sensitivity_of) == (9, 10)
    assert (j.specificity_agreed, j.specificity_of) == (19, 20)
    assert j.calibrated_model == MODEL
    expected = rogan_gladen_interval(6, 20, 9, 10, 19, 20)
    assert expected is not None
    assert j.status == "corrected" and j.reason == ""
    assert j.corrected == pytest.approx((0.30 + 0.95 - 1) / (0.90 + 0.95 - 1))
    assert (j.corrected, j.corrected_low, j.corrected_high) == (
        expected.point,
        expected.low,
        expected.high,
    )
    assert (j.draws_usable, j.draws) == (expected.usable, expected.resamples)
    assert j.corrected_text.startswith(f"{expected.point:.2f} [")


def test_missing_calibration_shows_raw_and_says_why():
    (j,) = judge_figures(runs(3, 7), controls())
    assert (j.yes, j.known) == (3, 10) and j.rate == 0.3
    assert j.status == "uncalibrated" and j.corrected is None and j.corrected_low is None
    assert "no calibration of leak_judge" in j.reason
    assert j.corrected_text == f"— ({j.reason})"
    assert j.sensitivity_of is None and j.specificity_of is None


def test_a_calibration_of_another_model_does_not_correct():
    (j,) = judge_figures(runs(3, 7), controls(calibration(model="anthropic/claude-judge")))
    assert j.status == "model-differs" and j.corrected is None
    assert j.reason == f"calibrated with anthropic/claude-judge, the trials judged by {MODEL}"
    assert j.model == MODEL and j.calibrated_model == "anthropic/claude-judge"
    assert (j.sensitivity_agreed, j.sensitivity_of) == (9, 10)  # shown, not used


def test_trials_judged_by_two_models_are_not_corrected():
    records = [*runs(2, 3), *runs(1, 4, model="openai/other")]
    (j,) = judge_figures(records, controls(calibration()))
    assert j.model is None and j.judged_by == sorted([MODEL, "openai/other"])
    assert j.status == "model-differs" and "more than one model" in j.reason


def test_the_model_is_matched_as_backend_slash_model():
    # The judge records backend "inspect" and model "openai/gpt-4o"; its calibration names
    # "inspect/openai/gpt-4o", as the task's `model` does.
    (j,) = judge_figures(
        runs(3, 7, model="inspect/openai/gpt-4o"),
        controls(calibration(model="inspect/openai/gpt-4o")),
    )
    assert j.model == "inspect/openai/gpt-4o" and j.status == "corrected"
    (j,) = judge_figures(runs(3, 7), controls(calibration(model="gpt-judge-1")))
    assert j.status == "model-differs"  # the bare model is not the backend's model


def test_a_judged_trial_with_no_judge_record_is_not_corrected():
    records = [*runs(2, 3), rec(True, recorded=False, repetition=50)]
    (j,) = judge_figures(records, controls(calibration()))
    assert j.status == "model-unknown" and j.model is None and j.corrected is None
    assert "no judge record on 1 of the 6 trials judged" in j.reason


def test_values_decided_unasked_are_counted_and_do_not_block_the_correction():
    # Nothing to judge: the judge says no without asking a model, and records none.
    records = [*runs(2, 3), *[rec(False, model=None, repetition=60 + i) for i in range(2)]]
    (j,) = judge_figures(records, controls(calibration()))
    assert (j.yes, j.known, j.unasked, j.unknown) == (2, 7, 2, 0)
    assert j.model == MODEL and j.status == "corrected"
    (j,) = judge_figures(runs(0, 3, model=None), controls(calibration()))
    assert j.status == "model-unknown" and "no model was asked" in j.reason


def test_an_unproven_metric_withholds_the_corrected_figure_but_shows_the_counts():
    (j,) = judge_figures(runs(3, 7), controls(calibration(), status="trigger-happy"))
    assert (j.yes, j.known, j.raw_text) == (3, 10, "0.30 (3/10) [0.11, 0.60]")
    assert j.status == "withheld" and j.corrected is None
    assert j.reason.startswith("withheld: leak_judge is trigger-happy (said yes on 'clean')")
    (j,) = judge_figures(runs(3, 7), controls(calibration(), error="no sandbox"))
    assert j.status == "withheld" and "controls did not run: no sandbox" in j.reason


def test_a_judge_no_better_than_chance_is_not_corrected():
    (j,) = judge_figures(runs(3, 7), controls(calibration(se=(10, 10), sp=(0, 12))))
    assert j.status == "chance" and j.corrected is None
    assert "no better than chance: Se 10/10 + Sp 0/12 ≤ 1" in j.reason


def test_a_calibration_without_known_negatives_is_not_corrected():
    (j,) = judge_figures(runs(3, 7), controls(calibration(sp=(0, 0))))
    assert j.status == "uncalibrated" and "no known negative" in j.reason


def test_no_known_judge_value():
    (j,) = judge_figures(runs(0, 0, 3), controls(calibration()))
    assert (j.known, j.unknown, j.rate) == (0, 3, None)
    assert j.raw_text == "— (0/0)" and j.status == "no-known-value"


def test_records_without_judges_have_no_rows_and_each_judge_has_its_own():
    plain = TrialRecord(
        cell=Cell(harness="h", task="t"),
        utility_achieved=True,
        security_breached=False,
        autonomy_achieved=True,
        evaluators={SECURITY: EvaluatorRecord(kind="predicate")},
        started_at=0.0,
        finished_at=1.0,
    )
    assert judge_figures([plain], controls(calibration())) == []
    records = [*runs(1, 1), *runs(2, 0, judge="tone_judge")]
    rows = judge_figures(records, controls(calibration()))
    assert [(j.judge, j.yes, j.known, j.unknown) for j in rows] == [
        ("leak_judge", 1, 2, 2),  # the tone-judged trials did not run leak_judge: unknown
        ("tone_judge", 2, 2, 2),
    ]
    assert rows[1].status == "uncalibrated"
    # Judges found only in invalid records make no row.
    assert judge_figures(runs(1, 0, error="crashed"), controls()) == []
    assert judge_figure(SECURITY, "leak_judge", [plain], controls()).unknown == 1
