"""What scoring in a sealed process adds to a trial.

- ours: a whole trial of the SQLite demo task `user-rename` (careful agent; reset, two
  snapshots, diff, evaluate, discrepancies, archive) with its predicates run by the sealed
  scorer — a warm scorer process of the task file, under bubblewrap, handed the evidence
  bundle;
- in-process: the same trial with the predicates run in this process, beside the transcript
  (the debugging mode, and what every trial did before).

Trials alternate between the two, in one sandbox reused across them. The goal is about the
difference: ≤ 20 ms added per trial. Also measured, once per run rather than per trial: a
zygote's start (a fresh interpreter importing oracle, under bubblewrap) and a scorer's fork
and load of the task file.
"""

from __future__ import annotations

import cProfile
import time

from common import REPO, Result, Stopwatch, Timing, profile_call, repeats_of, result, scratch

from oracle.agents import demo
from oracle.authoring.loader import load_tasks
from oracle.sandbox.sandbox import Sandbox
from oracle.scoring.pool import ScorerPool, SealedScorer
from oracle.scoring.scorer import InProcessScorer
from oracle.trial.agent import CallableAgent
from oracle.trial.loop import run_trial

NAME = "sealed scorer: added cost per trial (SQLite demo task)"
GOAL = "≤ 20 ms added per trial"
REPEATS = 20
COLD_REPEATS = 3


def run(profiler: cProfile.Profile | None) -> Result:
    task = load_tasks([REPO / "tasks" / "demo" / "task_user_rename.py"]).by_name("user-rename")
    agent = CallableAgent(demo.careful, name="careful")
    starts, loads = Timing(), Timing()
    ours, baseline = Timing(), Timing()
    with scratch("scoring") as base, ScorerPool() as pool:
        assert task.origin is not None
        sealed = SealedScorer(pool, hidden=[base])
        # A zygote's start, and a scorer's fork and load, each from cold.
        for _ in range(repeats_of(COLD_REPEATS)):
            t0 = time.perf_counter()
            scorer = pool.task_scorer(task.origin, [base / f"cold{len(starts.samples)}"])
            scorer.warm()
            starts.samples.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            scorer.close()
            scorer.warm()
            loads.samples.append(time.perf_counter() - t0)
        in_process = InProcessScorer()
        with Sandbox(task) as sandbox:
            for judge in (sealed, in_process):  # warm both paths once
                rec = run_trial(task, agent, sandbox=sandbox, scorer=judge).record
                assert rec.utility_achieved is True and rec.security_breached is False, rec
            for _ in range(repeats_of(REPEATS)):
                for judge, timing in ((sealed, ours), (in_process, baseline)):
                    sw = Stopwatch()
                    with sw.running():
                        rec = run_trial(task, agent, sandbox=sandbox, scorer=judge).record
                    assert rec.scoring is not None and rec.utility_achieved is True
                    timing.samples.append(sw.elapsed)
            profile_call(lambda: run_trial(task, agent, sandbox=sandbox, scorer=sealed), profiler)
    added = ours.median - baseline.median
    out = result(
        NAME,
        goal=GOAL,
        ours=ours,
        baselines={"in-process": baseline},
        extra={"zygote_start": starts, "scorer_fork_and_load": loads},
        checks={GOAL: added <= 0.020},
        params={"task": "user-rename", "agent": "careful", "sandbox": "reused"},
        notes="added_s = ours - in-process (medians); zygote_start_s and "
        "scorer_fork_and_load_s are paid once per run and once per task file",
    )
    out["added_s"] = added
    return out
