"""``make trial``: the demo of both suites as a user runs it, tasks side by side against one
after another.

- ours: ``oracle demo tasks/demo tasks/github`` as ``make trial`` runs it (its default: one
  worker per processor; ``ORACLE_SERVERS=containers`` unless set), the venv ready;
- one_after_another: the same with ``--jobs 1`` (every task in the command's own process).

Each is a fresh process into a fresh archive folder; both must exit 0 (every control
behaves, every predicate proven) and their records must give the same verdicts. The repeats
alternate the two. ``make trial`` itself runs three times and its median is quoted (the VM's
speed drifts by ±15% between runs); one run with ``--jobs 1`` is its baseline. A quick run
runs the demo suite alone (nine tasks), once each.
"""

from __future__ import annotations

import cProfile
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, Result, Stopwatch, Timing, quick, repeats_of, result

NAME = "make trial: both demo suites, tasks side by side vs one after another"
GOAL = "≤ 20 s with the venv ready"
REPEATS = 3  # of make trial; the one-after-another baseline (about 35 s) runs once
ORACLE = str(Path(sys.executable).parent / "oracle")


def _verdicts(root: Path) -> dict[str, tuple[object, object, object]]:
    out = {}
    for p in root.rglob("record.json"):
        r = json.loads(p.read_text())
        key = str(p.parent.relative_to(root))
        out[key] = (r["utility_achieved"], r["security_breached"], r["autonomy_achieved"])
    return out


def _once(suites: list[str], jobs: list[str], out: Path, timing: Timing) -> dict[str, tuple]:
    env = {**os.environ, "ORACLE_SERVERS": os.environ.get("ORACLE_SERVERS", "containers")}
    sw = Stopwatch()
    with sw.running():
        done = subprocess.run(
            [ORACLE, "demo", *suites, "--out", str(out), *jobs],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if done.returncode != 0:
        raise RuntimeError(f"oracle demo {' '.join(jobs)} failed:\n{done.stdout[-3000:]}")
    timing.samples.append(sw.elapsed)
    return _verdicts(out)


def run(profiler: cProfile.Profile | None = None) -> Result:
    del profiler  # other processes' work: not profiled in-process
    suites = ["tasks/demo"] if quick() else ["tasks/demo", "tasks/github"]
    ours, serial = Timing(), Timing()
    same = True
    records = 0
    repeats = repeats_of(REPEATS)
    with tempfile.TemporaryDirectory(prefix="oracle-bench-demo-") as tmp:
        for rep in range(repeats):
            side = _once(suites, [], Path(tmp) / f"side-{rep}", ours)
            if rep == 0:
                one = _once(suites, ["--jobs", "1"], Path(tmp) / f"one-{rep}", serial)
            same = same and side == one
            records = len(side)
    return result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"one_after_another": serial},
        checks={
            "≤ 20 s": ours.median <= 20.0,
            "the same verdicts side by side as one after another": same,
        },
        params={
            "suites": suites,
            "repeats": repeats,
            "records": records,
            "workers": len(os.sched_getaffinity(0)),
        },
        notes="ours = `oracle demo` with its default jobs (one worker per processor); "
        "one_after_another = --jobs 1; both as make trial runs them, each a fresh process",
    )
