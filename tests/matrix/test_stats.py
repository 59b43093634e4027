"""Paired comparisons: exact McNemar, Holm, the task-cluster bootstrap."""

from __future__ import annotations

import math
import random

import pytest

from oracle.stats import Pair, compare_paired, holm, mcnemar_exact, paired_bootstrap_ci


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


def test_bootstrap_is_seeded_and_covers_the_difference():
    rng = random.Random(1)
    pairs = [
        Pair(f"t{i % 6}", rng.random() < 0.3 + 0.1 * (i % 6), rng.random() < 0.4)
        for i in range(120)
    ]
    a = paired_bootstrap_ci(pairs)
    assert a == paired_bootstrap_ci(pairs)
    res = compare_paired(pairs)
    assert a[0] - 1e-9 <= res.difference <= a[1] + 1e-9
    assert a[0] < a[1]


def test_identical_outcomes_within_tasks_give_a_degenerate_interval():
    pairs = [Pair(t, True, False) for t in "abcd" for _ in range(3)]
    res = compare_paired(pairs)
    assert res.ci == (1.0, 1.0) and res.difference == 1.0
    assert (res.a_only, res.b_only) == (12, 0)
    assert res.p_value == pytest.approx(2 * 0.5**12)


def test_no_pairs():
    res = compare_paired([])
    assert res.pairs == 0 and res.p_value == 1.0 and not math.isnan(res.difference)
