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
