"""Shared helpers for the benchmarks: timing, medians, result records, scratch folders.

Every timed repeat starts with ``gc.collect()`` and is measured with ``time.perf_counter``.
The garbage collector stays enabled while a repeat runs: its cost is part of the real cost.

Quick mode (``make bench-quick``, ``run.py --quick``): every benchmark runs each contender once
at a reduced size (`quick`, `repeats_of`, `sized`), a regression check in a minute or two whose
figures go to results-quick.json, never into results.json.
"""

from __future__ import annotations

import cProfile
import gc
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / ".work"

type Result = dict[str, Any]

QUICK_ENV = "ORACLE_BENCH_QUICK"


def quick() -> bool:
    """Whether this is a quick run (reduced sizes, one repeat each)."""
    return os.environ.get(QUICK_ENV) == "1"


def repeats_of(n: int) -> int:
    """`n` repeats, or one in a quick run."""
    return 1 if quick() else n


def sized(full: int, reduced: int) -> int:
    """`full`, or `reduced` in a quick run."""
    return reduced if quick() else full


@dataclass
class Stopwatch:
    """Adds up the timed segments of one repeat (work between segments is not counted)."""

    elapsed: float = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        gc.collect()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.elapsed += time.perf_counter() - t0


@dataclass
class Timing:
    """The samples of one measured thing, in seconds."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def repeats(self) -> int:
        return len(self.samples)


def measure(repeat: Callable[[Stopwatch], object], repeats: int) -> Timing:
    """Run `repeat` `repeats` times; it times its own segments with the stopwatch it is given,
    so that per-repeat preparation stays out of the measurement."""
    timing = Timing()
    for _ in range(repeats):
        sw = Stopwatch()
        repeat(sw)
        timing.samples.append(sw.elapsed)
    return timing


def measure_call(fn: Callable[[], object], repeats: int) -> Timing:
    """Time `fn()` as a whole, `repeats` times."""

    def once(sw: Stopwatch) -> None:
        with sw.running():
            fn()

    return measure(once, repeats)


def profile_call(fn: Callable[[], object], profiler: cProfile.Profile | None) -> None:
    """Run `fn` once more under `profiler` (after the measurements, so they are not skewed)."""
    if profiler is None:
        return
    gc.collect()
    profiler.enable()
    try:
        fn()
    finally:
        profiler.disable()


@contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A fresh folder ``benchmarks/.work/<name>-<pid>``, removed afterwards (and .work, once
    empty)."""
    path = WORK / f"{name}-{os.getpid()}"  # two runs at once keep apart
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        with suppress(OSError):
            WORK.rmdir()


def result(
    name: str,
    *,
    goal: str,
    ours: Timing,
    baselines: dict[str, Timing],
    checks: dict[str, bool],
    extra: dict[str, Timing] | None = None,
    params: dict[str, Any] | None = None,
    notes: str | None = None,
) -> Result:
    """One entry of results.json. ``ratio_vs_<b>`` is ours / baseline (below 1: ours is
    faster); ``speedup_vs_<b>`` is its inverse. ``meets_goal`` holds when every check does."""
    out: Result = {
        "name": name,
        "ours_s": ours.median,
        "baselines": {b: t.median for b, t in baselines.items()},
        "goal": goal,
    }
    for key, t in (extra or {}).items():
        out[f"{key}_s"] = t.median
    for b, t in baselines.items():
        out[f"ratio_vs_{b}"] = ours.median / t.median
        out[f"speedup_vs_{b}"] = t.median / ours.median
    out["goal_checks"] = checks
    out["meets_goal"] = all(checks.values())
    out["repeats"] = {
        "ours": ours.repeats,
        **{k: t.repeats for k, t in (extra or {}).items()},
        **{b: t.repeats for b, t in baselines.items()},
    }
    out["samples_s"] = {
        "ours": ours.samples,
        **{k: t.samples for k, t in (extra or {}).items()},
        **{b: t.samples for b, t in baselines.items()},
    }
    if params:
        out["params"] = params
    if notes:
        out["notes"] = notes
    return out
