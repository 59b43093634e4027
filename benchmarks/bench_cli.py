"""Start-up of the command line: ``oracle --help`` and ``import oracle``, each a fresh process.

- ours: ``oracle --help`` (the installed console script, output discarded);
- import_oracle (extra): ``python -c "import oracle"``;
- bare_python: ``python -c pass``, the interpreter's own start, which every command pays.

The goal is on what oracle adds to a bare interpreter: ``oracle --help`` within 0.3 s of it
(the package root and the CLI import their heavy libraries only when a command needs them).
Repeats alternate the three so that a slow moment of the machine hits them alike.
"""

from __future__ import annotations

import cProfile
import subprocess
import sys
from pathlib import Path

from common import REPO, Result, Stopwatch, Timing, repeats_of, result

NAME = "oracle --help and import oracle, against a bare interpreter"
GOAL = "oracle --help ≤ 0.3 s above python -c pass"
REPEATS = 15
ORACLE = str(Path(sys.executable).parent / "oracle")


def _once(argv: list[str], timing: Timing) -> None:
    sw = Stopwatch()
    with sw.running():
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, cwd=REPO)
    timing.samples.append(sw.elapsed)


def run(profiler: cProfile.Profile | None = None) -> Result:
    # Not profiled in-process: what is measured is other processes' start.
    del profiler
    help_, import_, bare = Timing(), Timing(), Timing()
    commands = (
        ([ORACLE, "--help"], help_),
        ([sys.executable, "-c", "import oracle"], import_),
        ([sys.executable, "-c", "pass"], bare),
    )
    for argv, _ in commands:  # warm the page cache once
        _once(argv, Timing())
    repeats = repeats_of(REPEATS)
    for _ in range(repeats):
        for argv, timing in commands:
            _once(argv, timing)
    added_help = help_.median - bare.median
    added_import = import_.median - bare.median
    return result(
        NAME,
        goal=GOAL,
        ours=help_,
        baselines={"bare_python": bare},
        extra={"import_oracle": import_},
        checks={
            "oracle --help ≤ 0.3 s above python -c pass": added_help <= 0.3,
            "import oracle ≤ 0.3 s above python -c pass": added_import <= 0.3,
        },
        params={"repeats": repeats},
        notes=(
            f"oracle --help adds {added_help * 1000:.0f} ms and import oracle "
            f"{added_import * 1000:.0f} ms to a bare interpreter's start (medians)"
        ),
    )
