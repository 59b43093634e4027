"""Statistics for reports: comparisons between harnesses over tasks, and multiplicity control.

Single proportions use the Wilson interval (`oracle.reports.aggregate.Ratio`). Two harnesses are
compared on the *tasks* both ran (same model and profile). The task is the unit: repetitions
of one task are not independent of each other (a deterministic agent repeats its outcome), so
they are averaged into one rate per task and harness, never counted as separate pairs.

- the exact sign test over tasks: each task where one harness's rate is higher counts once for
  that harness (ties drop out); under "no difference" each goes either way with probability
  1/2, so the two-sided p-value is a binomial tail (the exact McNemar test, with the task's
  outcome in place of a single run's);
- a 95% interval for the mean per-task difference in rates from a bootstrap that resamples
  tasks;
- Holm's step-down adjustment over every comparison tested in one report.

No comparison is tested below `MIN_TASKS` shared tasks: with five tasks or fewer even a
difference on every one of them has p ≥ 0.0625. A difference is claimed only when the
adjusted p-value is below 0.05 *and* the interval excludes zero.

A rate decided by an LLM judge is corrected for the judge's errors (DESIGN §6). If the judge
says yes on a share ``p`` of trials, with sensitivity ``se`` (yes on known positives) and
specificity ``sp`` (no on known negatives), the Rogan–Gladen estimate of the true share is
``(p + sp - 1) / (se + sp - 1)``, clipped to [0, 1]; a judge with ``se + sp <= 1`` is no better
than chance and admits no correction. Its 95% interval comes from a seeded parametric bootstrap
that carries the uncertainty of all three proportions: each draw takes the observed rate, the
sensitivity and the specificity from their Jeffreys posteriors, Beta(x + 1/2, n - x + 1/2),
corrects, and is dropped where the drawn ``se + sp <= 1``; the interval is the 2.5th and 97.5th
percentiles of the draws kept, and how many were kept is reported beside it.

>>> mcnemar_exact(0, 0)
1.0
>>> round(mcnemar_exact(6, 0), 4)
0.0312
>>> holm([0.01, 0.04, 0.03])
[0.03, 0.06, 0.06]
>>> r = compare_tasks([TaskOutcomes(f"t{i}", [True] * 3, [False] * 3) for i in range(7)])
>>> (r.tasks, r.a_higher, r.b_higher, r.difference, round(r.p_value or 1, 4), r.ci)
(7, 7, 0, 1.0, 0.0156, (1.0, 1.0))
>>> compare_tasks([TaskOutcomes("t0", [True] * 8, [False] * 8)]).p_value is None
True
>>> round(rogan_gladen(0.30, 0.90, 0.95), 4)  # (0.30 + 0.95 - 1) / (0.90 + 0.95 - 1)
0.2941
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
#: The fewest shared tasks a comparison is tested on: the smallest number at which a
#: difference on every task can reach p < 0.05 with the two-sided sign test (2 / 2**6).
MIN_TASKS = 6


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar (sign test) p-value for `b` and `c` discordant units."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if n <= 1000:  # exact integers while they stay small
        tail: float = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    else:  # log space: the terms underflow to 0.0 long before they matter
        log_half = n * math.log(0.5)
        lg = math.lgamma(n + 1)
        tail = math.fsum(
            math.exp(lg - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half)
            for i in range(k + 1)
        )
    return min(1.0, 2 * tail)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given (monotone, capped at 1)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class TaskOutcomes:
    """One task's known outcomes under each harness (one per repetition; at least one each)."""

    task: str
    a: Sequence[bool]
    b: Sequence[bool]

    @property
    def difference(self) -> float:
        """rate(a) − rate(b) on this task."""
        return sum(self.a) / len(self.a) - sum(self.b) / len(self.b)


@dataclass(frozen=True)
class TaskComparison:
    """Two harnesses over their shared tasks. `p_value` and `ci` are None below `MIN_TASKS`."""

    tasks: int
    runs_a: int
    runs_b: int
    rate_a: float
    rate_b: float
    difference: float
    a_higher: int
    b_higher: int
    ties: int
    p_value: float | None
    ci: tuple[float, float] | None


def task_bootstrap_ci(
    differences: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of the mean per-task difference, resampling tasks with
    replacement. Seeded: the same differences always give the same interval."""
    if not differences:
        return (0.0, 0.0)
    values = sorted(differences)
    k = len(values)
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(values, k=k)) / k for _ in range(resamples))
    return (means[int(0.025 * (resamples - 1))], means[math.ceil(0.975 * (resamples - 1))])


def compare_tasks(outcomes: Sequence[TaskOutcomes], *, seed: int = 0) -> TaskComparison:
    """Mean per-task rates, their difference, and — from `MIN_TASKS` shared tasks on — the
    exact sign test over tasks and a task-bootstrap interval of the difference."""
    usable = [o for o in outcomes if o.a and o.b]
    k = len(usable)
    diffs = [o.difference for o in usable]
    a_higher = sum(d > 0 for d in diffs)
    b_higher = sum(d < 0 for d in diffs)
    rate_a = math.fsum(sum(o.a) / len(o.a) for o in usable) / k if k else 0.0
    rate_b = math.fsum(sum(o.b) / len(o.b) for o in usable) / k if k else 0.0
    tested = k >= MIN_TASKS
    return TaskComparison(
        tasks=k,
        runs_a=sum(len(o.a) for o in usable),
        runs_b=sum(len(o.b) for o in usable),
        rate_a=rate_a,
        rate_b=rate_b,
        difference=math.fsum(diffs) / k if k else 0.0,
        a_higher=a_higher,
        b_higher=b_higher,
        ties=k - a_higher - b_higher,
        p_value=mcnemar_exact(a_higher, b_higher) if tested else None,
        ci=task_bootstrap_ci(diffs, seed=seed) if tested else None,
    )


# -- rates decided by an LLM judge ----------------------------------------------------------------


def rogan_gladen(p: float, se: float, sp: float) -> float | None:
    """The Rogan–Gladen corrected share ``(p + sp - 1) / (se + sp - 1)``, clipped to [0, 1];
    None when ``se + sp <= 1`` (a judge no better than chance: no correction exists).

    >>> round(rogan_gladen(0.5, 0.8, 0.9), 4)  # (0.5 + 0.9 - 1) / 0.7
    0.5714
    >>> rogan_gladen(0.02, 0.9, 0.9)  # fewer yeses than the false positives alone: clipped
    0.0
    >>> rogan_gladen(0.7, 1.0, 0.0) is None  # an always-yes judge
    True
    """
    denominator = se + sp - 1
    if denominator <= 0:
        return None
    return min(1.0, max(0.0, (p + sp - 1) / denominator))


@dataclass(frozen=True)
class CorrectedRate:
    """A judge-decided rate corrected by `rogan_gladen`, with its bootstrap interval.

    `low` and `high` are None only when no draw was usable; `usable` of `resamples` draws had
    a drawn ``se + sp > 1`` and went into the interval.
    """

    point: float
    low: float | None
    high: float | None
    usable: int
    resamples: int


def _jeffreys(rng: random.Random, x: int, n: int) -> float:
    return rng.betavariate(x + 0.5, n - x + 0.5)


def rogan_gladen_interval(
    k: int,
    n: int,
    se_agreed: int,
    se_of: int,
    sp_agreed: int,
    sp_of: int,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> CorrectedRate | None:
    """The judge said yes on `k` of `n` trials, and yes on `se_agreed` of `se_of` known
    positives and no on `sp_agreed` of `sp_of` known negatives: the corrected rate and a 95%
    interval from a seeded parametric bootstrap over all three proportions (module docstring).
    None when `n`, `se_of` or `sp_of` is 0 or the observed ``se + sp <= 1``. The same inputs
    always give the same result.

    >>> r = rogan_gladen_interval(30, 100, 45, 50, 76, 80)
    >>> round(r.point, 4), round(r.low, 2), round(r.high, 2), r.usable, r.resamples
    (0.2941, 0.17, 0.42, 2000, 2000)
    >>> rogan_gladen_interval(30, 100, 50, 50, 0, 80) is None  # always yes: Se + Sp = 1
    True
    >>> rogan_gladen_interval(30, 100, 45, 50, 0, 0) is None  # no known negative
    True
    """
    for name, agreed, of in (
        ("k", k, n),
        ("se_agreed", se_agreed, se_of),
        ("sp_agreed", sp_agreed, sp_of),
    ):
        if not 0 <= agreed <= of:
            raise ValueError(f"rogan_gladen_interval: {name}={agreed} is not within 0..{of}")
    if n == 0 or se_of == 0 or sp_of == 0:
        return None
    # Exactly, in integers: se + sp <= 1 <=> se_agreed*sp_of + sp_agreed*se_of <= se_of*sp_of.
    if se_agreed * sp_of + sp_agreed * se_of <= se_of * sp_of:
        return None
    point = rogan_gladen(k / n, se_agreed / se_of, sp_agreed / sp_of)
    if point is None:
        return None
    rng = random.Random(seed)
    draws: list[float] = []
    for _ in range(resamples):
        p = _jeffreys(rng, k, n)
        se = _jeffreys(rng, se_agreed, se_of)
        sp = _jeffreys(rng, sp_agreed, sp_of)
        corrected = rogan_gladen(p, se, sp)
        if corrected is not None:
            draws.append(corrected)
    if not draws:
        return CorrectedRate(point, None, None, 0, resamples)
    draws.sort()
    m = len(draws)
    low, high = draws[int(0.025 * (m - 1))], draws[math.ceil(0.975 * (m - 1))]
    return CorrectedRate(point, low, high, m, resamples)
