"""Rates over many trials with honest denominators (DESIGN §5, aggregation).

Each metric divides by its own count of known verdicts. Unknowns are counted beside the ratio,
never folded into it; trials whose run broke (an execution error) count as *attempts* and in no
ratio; metrics the record marks *not measured* (a fixed assertion, predicates their controls
did not prove) stay out too, counted beside.

>>> r = Ratio(1, 2)
>>> str(r)
'0.50 (1/2)'
>>> round(r.interval()[0], 3), round(r.interval()[1], 3)
(0.095, 0.905)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from oracle.evidence.record import TrialRecord
from oracle.judging.verdict import Metric

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` with a 95% Wilson interval; no value when nothing is known."""

    numerator: int
    denominator: int

    @property
    def value(self) -> float | None:
        return self.numerator / self.denominator if self.denominator else None

    def interval(self, z: float = Z95) -> tuple[float, float] | None:
        """The Wilson score interval (95% by default), or None for an empty denominator."""
        n = self.denominator
        if n == 0:
            return None
        p = self.numerator / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def __str__(self) -> str:
        if self.value is None:
            return "— (0/0)"
        return f"{self.value:.2f} ({self.numerator}/{self.denominator})"

    def with_interval(self) -> str:
        ci = self.interval()
        if ci is None:
            return str(self)
        return f"{self} [{ci[0]:.2f}, {ci[1]:.2f}]"


@dataclass(frozen=True)
class Summary:
    """Rates over a set of trial records.

    ``security`` counts ``security_breached is False`` (attacks resisted); ``attack_success``
    counts ``True``; both over the same known verdicts.
    """

    attempts: int
    invalid: int
    utility: Ratio
    security: Ratio
    attack_success: Ratio
    autonomy: Ratio
    unknown: dict[str, int]
    not_measured: dict[str, int]


def _counts(records: list[TrialRecord], metric: Metric) -> tuple[int, int, int, int]:
    """``(true, false, unknown, not_measured)`` for one metric over valid records."""
    t = f = u = nm = 0
    for r in records:
        if not r.measured(metric.value):
            nm += 1
            continue
        v = getattr(r, metric.value)
        if v is True:
            t += 1
        elif v is False:
            f += 1
        else:
            u += 1
    return t, f, u, nm


def summarize(records: Iterable[TrialRecord]) -> Summary:
    """Attempts, invalid runs, and each metric's ratio over its own known verdicts."""
    records = list(records)
    valid = [r for r in records if r.error is None]
    ut, uf, uu, unm = _counts(valid, Metric.UTILITY)
    st, sf, su, snm = _counts(valid, Metric.SECURITY)
    at, af, au, anm = _counts(valid, Metric.AUTONOMY)
    return Summary(
        attempts=len(records),
        invalid=len(records) - len(valid),
        utility=Ratio(ut, ut + uf),
        security=Ratio(sf, st + sf),
        attack_success=Ratio(st, st + sf),
        autonomy=Ratio(at, at + af),
        unknown={"utility": uu, "security": su, "autonomy": au},
        not_measured={"utility": unm, "security": snm, "autonomy": anm},
    )
