"""Run the benchmarks and write benchmarks/results.json (``make bench``).

    python benchmarks/run.py                 # every benchmark; results.json is rewritten
    python benchmarks/run.py sqlite          # those whose name contains "sqlite"; their entries
                                             # replace the old ones, the others are kept
    python benchmarks/run.py --profile files # also cProfile one run of ours, print hot spots
    python benchmarks/run.py --quick         # each benchmark once at a reduced size (a quick
                                             # regression check): results-quick.json

To add a benchmark, write a module here with ``NAME`` and ``run(profiler) -> dict`` (see
common.result for the entry's shape) and list it in BENCHMARKS below.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import platform
import pstats
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import bench_agentdojo
import bench_cli
import bench_containers
import bench_demo
import bench_egress
import bench_files
import bench_github
import bench_isolation
import bench_mariadb
import bench_matrix
import bench_postgres
import bench_reduce
import bench_scaling
import bench_scoring
import bench_smtp
import bench_sqlite
import bench_trial
from common import HERE, QUICK_ENV, Result

RESULTS = HERE / "results.json"
QUICK_RESULTS = HERE / "results-quick.json"


@dataclass(frozen=True)
class Benchmark:
    name: str
    run: Callable[[cProfile.Profile | None], Result]


BENCHMARKS: list[Benchmark] = [
    Benchmark(bench_sqlite.NAME, bench_sqlite.run),
    Benchmark(bench_files.NAME, bench_files.run),
    Benchmark(bench_isolation.NAME, bench_isolation.run),
    Benchmark(bench_scoring.NAME, bench_scoring.run),
    Benchmark(bench_egress.NAME, bench_egress.run),
    Benchmark(bench_smtp.NAME, bench_smtp.run),
    Benchmark(bench_github.NAME, bench_github.run),
    Benchmark(bench_agentdojo.NAME, bench_agentdojo.run),
    Benchmark(bench_postgres.NAME_100K, bench_postgres.run_100k),
    Benchmark(bench_postgres.NAME_1M, bench_postgres.run_1m),
    Benchmark(bench_postgres.NAME_RESET, bench_postgres.run_reset),
    Benchmark(bench_mariadb.NAME, bench_mariadb.run),
    Benchmark(bench_reduce.NAME, bench_reduce.run),
    Benchmark(bench_matrix.NAME, bench_matrix.run),
    Benchmark(bench_cli.NAME, bench_cli.run),
    *(Benchmark(case.title, bench_trial.runner(case)) for case in bench_trial.CASES),
    Benchmark(bench_scaling.NAME, bench_scaling.run),
    *(
        Benchmark(
            f"{bench_containers.containers.KINDS[k].title} in a container: start-up",
            bench_containers.runner(k),
        )
        for k in bench_containers.GOALS
    ),
    Benchmark(bench_containers.NAME, bench_containers.run),
    Benchmark(bench_demo.NAME, bench_demo.run),
]


def machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "sqlite": sqlite3.sqlite_version,
        "versions": {p: version(p) for p in ("oracle", "sqlalchemy", "deepdiff", "orjson")},
    }


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def table(results: list[Result], *, quick: bool = False) -> str:
    """One line per (benchmark, baseline): medians, the speedup and the goal (for a quick run,
    headed by a warning that its sizes are reduced)."""
    head = ("benchmark", "ours", "ours_full", "baseline", "baseline s", "speedup", "goal met")
    rows: list[tuple[str, ...]] = []
    for r in results:
        first = True
        for b, s in r["baselines"].items():
            rows.append(
                (
                    r["name"] if first else "",
                    _seconds(r["ours_s"]) if first else "",
                    _seconds(r.get("ours_full_s")) if first else "",
                    f"{b} (×{r['repeats'].get(b, '?')})",
                    _seconds(s),
                    f"{s / r['ours_s']:.2f}×",
                    ("yes" if r["meets_goal"] else "NO") if first else "",
                )
            )
            first = False
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = []
    if quick:
        out += [
            "QUICK RUN: reduced sizes, one repeat each; goals are judged only by a full run",
            "(`make bench`), the goal checks below are not meaningful.",
            "",
        ]
    out += [line(head), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    out.append("")
    out.append("speedup = baseline median / ours median (above 1: ours is faster)")
    for r in results:
        checks = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in r["goal_checks"].items())
        out.append(f"{r['name']}: goal “{r['goal']}” — {checks}")
    return "\n".join(out)


def merge(old: list[Result], new: list[Result]) -> list[Result]:
    """Entries of `new` replace those of `old` with the same name; registry order first."""
    by_name = {r["name"]: r for r in old} | {r["name"]: r for r in new}
    order = [b.name for b in BENCHMARKS]
    known = [by_name[n] for n in order if n in by_name]
    return known + [r for n, r in by_name.items() if n not in order]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("filter", nargs="?", default="", help="run benchmarks whose name has this")
    ap.add_argument("--profile", action="store_true", help="cProfile one run of ours as well")
    ap.add_argument("--top", type=int, default=25, help="hot spots to print with --profile")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="each contender once at a reduced size; writes results-quick.json (goals are "
        "checked at the full sizes only)",
    )
    args = ap.parse_args(argv)
    global RESULTS
    if args.quick:
        os.environ[QUICK_ENV] = "1"
        RESULTS = QUICK_RESULTS

    chosen = [b for b in BENCHMARKS if args.filter.lower() in b.name.lower()]
    if not chosen:
        names = "\n  ".join(b.name for b in BENCHMARKS)
        print(f"no benchmark name contains {args.filter!r}; there are:\n  {names}", file=sys.stderr)
        return 2

    started = time.perf_counter()
    results: list[Result] = []
    failed: list[str] = []
    old = (
        json.loads(RESULTS.read_text(encoding="utf-8")).get("benchmarks", [])
        if (args.filter and RESULTS.exists())
        else []
    )
    for b in chosen:
        print(f"running: {b.name} …", flush=True)
        t0 = time.perf_counter()
        profiler = cProfile.Profile() if args.profile else None
        try:
            r = b.run(profiler)
        except Exception as exc:  # one broken benchmark must not cost the others' figures
            print(f"  FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(b.name)
            continue
        r["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
        _write(merge(old, results))  # after every benchmark: a later failure loses nothing
        print(f"  done in {r['wall_s']:.1f} s", flush=True)
        if profiler is not None:
            buf = io.StringIO()
            stats = pstats.Stats(profiler, stream=buf).strip_dirs()
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
            print(buf.getvalue())

    entries = merge(old, results)
    _write(entries)
    print()
    print(table(entries, quick=args.quick))
    print(f"\nwrote {RESULTS.relative_to(HERE.parent)} in {time.perf_counter() - started:.1f} s")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _write(entries: list[Result]) -> None:
    doc = {
        "quick": RESULTS == QUICK_RESULTS,
        "benchmarks": entries,
        "machine": machine(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(RESULTS)


if __name__ == "__main__":
    sys.exit(main())
