"""Tasks side by side: `oracle demo` and `oracle controls --jobs N` hand each task to one of N
worker processes, which runs its controls (and, for the demo, the demo agents' trials) as the
command would in one process, then hands the results back.

A task's runs stay together in one worker: its controls and the demo agents' trials share one
sandbox (reset before each) and follow one another, and its proof is written by that worker
alone. Tasks are independent of each other
(each has its own sandbox, databases, recorders, archive folders), so running two at once
changes no verdict; the report lists them in the order the command was given them, whatever
order they finish in. The longest tasks are handed out first: by the seconds each took the
last time it ran side by side (kept in ``$XDG_CACHE_HOME/oracle/task-seconds.json``), else by a
guess from its controls.

Workers are started by a fork server, a fresh process with nothing of the command's running:
no scorer processes, egress recorders or server threads to inherit. Each loads the task files
itself and starts its own scorer processes. A task defined in code, with no file to load, runs
in the command's own process.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oracle.authoring.sandbox_view import SandboxView
    from oracle.authoring.task import Task
    from oracle.controls.run import ControlsReport
    from oracle.evidence.record import TrialRecord


def default_jobs(tasks: int) -> int:
    """As many workers as this machine has processors for us, at most one per task."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, tasks))


@dataclass(frozen=True)
class Plan:
    """What every worker is handed once: where the tasks come from and how to run them."""

    files: tuple[Path, ...]
    scorer: str
    hidden: tuple[Path, ...]
    controls_out: Path | None
    timeout: float
    #: The demo agents whose trials follow each task's controls (none: controls only).
    agents: tuple[str, ...] = ()
    trials_out: Path | None = None
    #: The command's pid: a worker whose command is gone exits as it starts.
    command: int = field(default_factory=os.getpid)


@dataclass
class TaskResult:
    """One task's part of the run, as the worker hands it back."""

    task: str
    report: ControlsReport
    records: list[TrialRecord] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    #: How long the worker took over it (the next run hands the longest tasks out first).
    seconds: float = 0.0


def ran_elsewhere(view: SandboxView) -> object:
    """What a control handed back by a worker runs as: it ran there, and cannot run again."""
    raise RuntimeError("this control ran in a worker process and is not runnable here")


def portable(report: ControlsReport) -> ControlsReport:
    """`report` without what cannot cross to another process: each control's function (a
    task's own, or a closure of a derived control) is replaced by `ran_elsewhere`."""
    report.runs = [replace(r, control=replace(r.control, run=ran_elsewhere)) for r in report.runs]
    return report


_WORKER: dict[str, Any] = {}


def _start_worker(plan: Plan) -> None:
    from oracle.base.interrupts import StopOnce
    from oracle.base.lifeline import tie_to_driver

    # A worker dies with the fork server, which dies with the command; a SIGINT (a terminal's
    # Ctrl-C, or the command's own when it alone got one) stops the task it runs, once.
    tie_to_driver(plan.command)
    StopOnce.install(busy=False)

    from oracle.agents.spec import resolve_agent
    from oracle.authoring.loader import load_tasks
    from oracle.cli.running import make_scorer

    loaded = load_tasks(list(plan.files))
    _WORKER["plan"] = plan
    _WORKER["tasks"] = {t.name: t for t in loaded.tasks}
    # Not warmed for every task: each worker starts the scorers of the tasks it is handed.
    _WORKER["scorer"] = make_scorer(plan.scorer, list(plan.hidden))
    _WORKER["agents"] = [resolve_agent(a) for a in plan.agents]


def _run_task(name: str) -> TaskResult:
    from oracle.base.interrupts import StopOnce
    from oracle.cli.running import trial_or_broken
    from oracle.controls.run import prove
    from oracle.evidence.archive import deferred_sync

    plan: Plan = _WORKER["plan"]
    task = _WORKER["tasks"][name]
    scorer = _WORKER["scorer"]
    started = time.monotonic()
    with StopOnce.task(), _task_sandbox(task) as sandbox:
        report = prove(
            task, out=plan.controls_out, timeout=plan.timeout, scorer=scorer, sandbox=sandbox
        )
        out = TaskResult(name, report)
        if plan.agents and plan.trials_out is not None:
            with deferred_sync():
                for agent in _WORKER["agents"]:
                    record, why = trial_or_broken(
                        task, agent, plan.trials_out, 0, scorer, sandbox=sandbox
                    )
                    if record is not None:
                        out.records.append(record)
                    if why is not None:
                        out.broken.append(why)
    out.report = portable(out.report)
    out.seconds = time.monotonic() - started
    return out


@contextlib.contextmanager
def _task_sandbox(task: Task) -> Iterator[Any]:
    """One open sandbox for all of a task's runs (each resets it first, as a trial in a
    sandbox of its own starts from the seed), closed after the last: opening a GitHub world
    or an egress recorder for each took a quarter of a second. None where it cannot be
    opened: the controls and each trial then try their own, and record why they could not."""
    from oracle.trial.sandboxing import new_sandbox

    try:
        sandbox = new_sandbox(task)
        sandbox.open()
    except Exception:
        yield None
        return
    try:
        yield sandbox
    finally:
        sandbox.close()


def _longest_first(tasks: Sequence[Task], seconds: Mapping[str, float], mode: str) -> list[Task]:
    """`tasks`, the longest first: by the seconds each took in the last run like this one
    (`seconds`, by `_time_key`), else by a guess from its controls (a task that starts a
    workflow takes about a second and a half a control, any other about a third)."""

    def cost(t: Task) -> float:
        known = seconds.get(_time_key(t, mode))
        if known is not None:
            return known
        launches = any(s.kind == "github" for s in t.sinks)
        return (1.5 if launches else 0.3) * (len(t.controls) + 1)

    return sorted(tasks, key=cost, reverse=True)


#: The seconds each task took in the last runs side by side (an ordering hint, nothing else).
TIMES_FILE = "task-seconds.json"


def _times_path() -> Path:
    from oracle.base.fsops import user_cache_dir

    return user_cache_dir() / TIMES_FILE


def _time_key(task: Task, mode: str) -> str:
    return f"{task.origin}::{task.name}::{mode}"


def _load_times() -> dict[str, float]:
    """The seconds kept by earlier runs (none where the file is missing or unreadable)."""
    try:
        data = json.loads(_times_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _gone(key: str) -> bool:
    """Whether the task file a kept time is of no longer exists (a deleted checkout's, a test's
    temporary folder's): its time is dropped rather than kept for ever."""
    origin = key.split("::", 1)[0]
    return os.path.isabs(origin) and not os.path.exists(origin)


def _save_times(update: Mapping[str, float]) -> None:
    """Keep `update` with what earlier runs kept (the newest wins; written whole, then put in
    place), less the times of task files that are gone. A file that cannot be written is left
    as it is: the next run only guesses."""
    from oracle.base.fsops import write_atomic

    merged = {k: v for k, v in {**_load_times(), **update}.items() if not _gone(k)}
    with contextlib.suppress(OSError):
        write_atomic(_times_path(), json.dumps(merged, indent=0, sort_keys=True).encode())


def side_by_side(
    tasks: Sequence[Task],
    plan: Plan,
    jobs: int,
    done: Callable[[TaskResult], None],
) -> list[TaskResult]:
    """Run `tasks` in `jobs` workers by `plan`; `done` is called in this process as each task
    finishes. Returns the results in the order of `tasks`. A worker that breaks (a bug of
    ours, a worker killed) is named in its task's report, and the others still run."""
    from oracle.base.interrupts import stop_pool
    from oracle.controls.run import ControlsReport

    ctx = multiprocessing.get_context("forkserver")
    # Preload only what a worker needs, never the command's own __main__ (a script that
    # would run the command again); the first ties the fork server to the command.
    ctx.set_forkserver_preload(["oracle.matrix.forkserver", "oracle.cli.parallel"])
    results: dict[str, TaskResult] = {}
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_start_worker, initargs=(plan,)
    ) as pool:
        mode = "demo" if plan.agents else "controls"
        order = _longest_first(tasks, _load_times(), mode)
        futures: dict[Future[TaskResult], str] = {
            pool.submit(_run_task, t.name): t.name for t in order
        }
        try:
            for future in as_completed(futures):
                name = futures[future]
                try:
                    result = future.result()
                except Exception as exc:
                    why = f"task {name!r}: its worker failed: {type(exc).__name__}: {exc}"
                    result = TaskResult(name, ControlsReport(errors=[why]))
                results[name] = result
                done(result)
        except BaseException:
            # Ctrl-C (or a bug here): no task waiting starts, and each worker closes the
            # sandbox it has open and kills the control it runs.
            stop_pool(pool)
            raise
    by_name = {t.name: t for t in tasks}
    _save_times(
        {_time_key(by_name[n], mode): r.seconds for n, r in results.items() if r.seconds > 0}
    )
    return [results[t.name] for t in tasks]
