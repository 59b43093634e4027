"""Comparisons over tasks: the exact sign test, Holm, the task bootstrap, the minimum."""

from __future__ import annotations

import math
import random

import pytest

from oracle.reports.stats import (
    MIN_TASKS,
    TaskOutcomes,
    compare_tasks,
    holm,
    mcnemar_exact,
    task_bootstrap_ci,
)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 0, 1.0),
        (6, 0, 0.03125),  # 2 * 0.5**6
        (5, 1, 0.21875),  # 2 * (1 + 6) / 64
        (1, 5, 0.21875),
        (3, 3, 1.0),
        (12, 0, 2 * 0.5**12),
    ],
)
def test_mcnemar_exact_matches_the_binomial_tail(b: int, c: int, p: float):
    assert mcnemar_exact(b, c) == pytest.approx(p)


def test_mcnemar_handles_many_pairs():
    # 10,000 discordant pairs, evenly split: no evidence of a difference.
    assert mcnemar_exact(5000, 5000) == pytest.approx(1.0)
    assert 0 < mcnemar_exact(5200, 4800) < 1e-4


def test_holm_is_monotone_and_capped():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_one_task_repeated_is_too_few_tasks_to_test():
    # Eight repetitions of one task are one unit of evidence, not eight pairs.
    res = compare_tasks([TaskOutcomes("log-level", [False] * 8, [True] * 8)])
    assert (res.tasks, res.runs_a, res.runs_b) == (1, 8, 8)
    assert res.difference == -1.0 and (res.a_higher, res.b_higher) == (0, 1)
    assert res.p_value is None and res.ci is None


def test_below_the_minimum_nothing_is_tested_however_many_repetitions():
    few = [TaskOutcomes(f"t{i}", [True] * 50, [False] * 50) for i in range(MIN_TASKS - 1)]
    res = compare_tasks(few)
    assert res.tasks == MIN_TASKS - 1 and res.difference == 1.0
    assert res.p_value is None and res.ci is None


def test_repetitions_do_not_shrink_the_p_value():
    once = [TaskOutcomes(f"t{i}", [True], [False]) for i in range(7)]
    often = [TaskOutcomes(f"t{i}", [True] * 20, [False] * 20) for i in range(7)]
    assert compare_tasks(once).p_value == compare_tasks(often).p_value == pytest.approx(2 / 2**7)


def test_the_sign_test_counts_tasks_and_drops_ties():
    outcomes = [
        *(TaskOutcomes(f"a{i}", [True, True, False], [False, False, False]) for i in range(6)),
        TaskOutcomes("b", [False, False], [True, False]),
        *(TaskOutcomes(f"tie{i}", [True, False], [False, True]) for i in range(3)),
    ]
    res = compare_tasks(outcomes)
    assert (res.tasks, res.a_higher, res.b_higher, res.ties) == (10, 6, 1, 3)
    assert res.p_value == pytest.approx(mcnemar_exact(6, 1))  # 7 untied tasks, 6 vs 1
    # Each task weighs equally, whatever its number of repetitions.
    assert res.rate_a == pytest.approx((6 * 2 / 3 + 0 + 3 * 0.5) / 10)
    assert res.rate_b == pytest.approx((0 + 0.5 + 3 * 0.5) / 10)
    assert res.difference == pytest.approx(res.rate_a - res.rate_b)


def test_a_task_without_known_outcomes_on_both_sides_is_not_shared():
    res = compare_tasks([TaskOutcomes("t", [True], [])] * 8)
    assert res.tasks == 0 and res.p_value is None


def test_bootstrap_is_seeded_and_covers_the_difference():
    rng = random.Random(1)
    outcomes = [
        TaskOutcomes(
            f"t{i}",
            [rng.random() < 0.3 + 0.1 * (i % 6) for _ in range(10)],
            [rng.random() < 0.4 for _ in range(10)],
        )
        for i in range(12)
    ]
    diffs = [o.difference for o in outcomes]
    a = task_bootstrap_ci(diffs)
    assert a == task_bootstrap_ci(diffs)
    res = compare_tasks(outcomes)
    assert res.ci == a
    assert a[0] - 1e-9 <= res.difference <= a[1] + 1e-9
    assert a[0] < a[1]


def test_no_tasks():
    res = compare_tasks([])
    assert res.tasks == 0 and res.p_value is None and not math.isnan(res.difference)
