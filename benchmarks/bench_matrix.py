"""A 1,000-cell matrix of scripted trials on the embedded defaults, side by side vs serially.

The demo suite (4 tasks: SQLite databases and folders) × the careful and obedient demo agents
× 125 repetitions = 1,000 cells, each in a fresh sandbox, archived, signed and written
atomically; every task's controls run once first (12 control trials) in both modes.

- ours: ``run_matrix(jobs=2)``: two local worker processes, the driver signs and writes;
- serial: ``run_matrix(jobs=1)``: the same cells one after the other in one process.
"""

from __future__ import annotations

import cProfile
import os
import shutil
from collections.abc import Callable

from common import HERE, Result, Stopwatch, Timing, measure, repeats_of, result, scratch, sized

from oracle.base.signing import new_key
from oracle.matrix.run import run_matrix
from oracle.matrix.spec import load_matrix

NAME = "matrix of 1,000 cells, --jobs 2 vs serial"
GOAL = "≤ 5 min and ≥ 1.7× faster than serial"
REPETITIONS = 125
QUICK_REPETITIONS = 8  # a quick run: 64 cells
REPEATS = 3
DEMO = HERE.parent / "tasks" / "demo"
# The four demo tasks on SQLite and folders: the figures do not depend on which servers are up.
EMBEDDED = ", ".join(
    f'"{DEMO}/task_{n}.py"' for n in ("log_level", "orders_cleanup", "release_notes", "user_rename")
)


def run(profiler: cProfile.Profile | None = None) -> Result:
    repetitions = sized(REPETITIONS, QUICK_REPETITIONS)
    cells = 4 * 2 * repetitions
    with scratch("matrix") as work:
        path = work / "m.toml"
        path.write_text(
            f'name = "bench"\ntasks = [{EMBEDDED}]\nrepetitions = {repetitions}\n'
            '[harnesses]\ncareful = {agent = "careful"}\nobedient = {agent = "obedient"}\n'
        )
        matrix = load_matrix(path)
        key = new_key()
        load_before = os.getloadavg()

        def once(jobs: int) -> Callable[[Stopwatch], None]:
            def go(sw: Stopwatch) -> None:
                out = work / f"run{jobs}"
                shutil.rmtree(out, ignore_errors=True)
                with sw.running():
                    s = run_matrix(matrix, out, key, jobs=jobs)
                assert len(s.written) == cells and not s.invalid, "a cell did not run cleanly"

            return go

        # Alternate the two so that other load on the machine falls on both alike.
        ours_t, serial_t = Timing(), Timing()
        for _ in range(repeats_of(REPEATS)):
            ours_t.samples += measure(once(2), 1).samples
            serial_t.samples += measure(once(1), 1).samples
        if profiler is not None:
            profiler.enable()
            run_matrix(matrix, work / "prof", key, jobs=1)
            profiler.disable()
    speedup = serial_t.median / ours_t.median
    return result(
        NAME,
        goal=GOAL,
        ours=ours_t,
        baselines={"serial": serial_t},
        checks={"≤ 300 s": ours_t.median <= 300.0, "≥ 1.7× faster than serial": speedup >= 1.7},
        params={
            "cells": cells,
            "tasks": 4,
            "harnesses": 2,
            "repetitions": repetitions,
            "jobs": 2,
            # Other work on the machine changes both figures: the 1-minute load before and after.
            "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        notes=(
            "each cell: fresh sandbox (SQLite file and folder copied from cached templates), "
            "trial, archive packed, signed and written with fsync; controls run once per task "
            "in both modes; the two modes alternate, one sample each per round."
        ),
    )
