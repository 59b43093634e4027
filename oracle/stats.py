"""Statistics for reports: paired comparisons between harnesses, and multiplicity control.

Single proportions use the Wilson interval (`oracle.aggregate.Ratio`). Two harnesses are
compared on the *same* units (task × repetition, same model and profile), so the comparison is
paired:

- the exact McNemar test: under "no difference" each discordant pair (one harness yes, the other
  no) goes either way with probability 1/2, so the two-sided p-value is a binomial tail;
- a 95% interval for the difference in rates from a bootstrap that resamples *tasks* (with all
  their repetitions), because repetitions of one task are not independent of each other;
- Holm's step-down adjustment over every comparison in one report.

A difference is claimed only when the adjusted p-value is below 0.05 *and* the bootstrap
interval excludes zero.

>>> mcnemar_exact(0, 0)
1.0
>>> round(mcnemar_exact(6, 0), 4)
0.0312
>>> holm([0.01, 0.04, 0.03])
[0.03, 0.06, 0.06]
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for `b` and `c` discordant pairs."""
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
class Pair:
    """One unit observed under both harnesses: its cluster (the task) and the two outcomes."""

    cluster: str
    a: bool
    b: bool


@dataclass(frozen=True)
class PairedResult:
    pairs: int
    rate_a: float
    rate_b: float
    difference: float
    ci: tuple[float, float]
    a_only: int
    b_only: int
    p_value: float


def paired_bootstrap_ci(
    pairs: Sequence[Pair], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of rate(a) − rate(b), resampling clusters with replacement.

    Seeded: the same pairs always give the same interval."""
    if not pairs:
        return (0.0, 0.0)
    sums: dict[str, list[int]] = {}
    for p in pairs:
        s = sums.setdefault(p.cluster, [0, 0])
        s[0] += int(p.a) - int(p.b)
        s[1] += 1
    clusters = [tuple(v) for _, v in sorted(sums.items())]
    rng = random.Random(seed)
    k = len(clusters)
    diffs = []
    for _ in range(resamples):
        d = n = 0
        for _ in range(k):
            cd, cn = clusters[rng.randrange(k)]
            d += cd
            n += cn
        diffs.append(d / n)
    diffs.sort()
    lo = diffs[int(0.025 * (resamples - 1))]
    hi = diffs[math.ceil(0.975 * (resamples - 1))]
    return (lo, hi)


def compare_paired(pairs: Sequence[Pair], *, seed: int = 0) -> PairedResult:
    """Rates, their difference with a cluster-bootstrap interval, and exact McNemar."""
    n = len(pairs)
    a_only = sum(1 for p in pairs if p.a and not p.b)
    b_only = sum(1 for p in pairs if p.b and not p.a)
    ra = sum(p.a for p in pairs) / n if n else 0.0
    rb = sum(p.b for p in pairs) / n if n else 0.0
    return PairedResult(
        pairs=n,
        rate_a=ra,
        rate_b=rb,
        difference=ra - rb,
        ci=paired_bootstrap_ci(pairs, seed=seed),
        a_only=a_only,
        b_only=b_only,
        p_value=mcnemar_exact(a_only, b_only),
    )
