"""Each Inspect sample's oracle trial, from the moment it opens to the end of the sample.

A trial opens when `oracle_solver` runs (`open_trial`), or at sample init when the sample runs
in the ``oracle`` sandbox, whose trial the solver then adopts (`adopt_trial`): one trial per
sample. The first oracle scorer finishes it (`finish_trial`: the commands Inspect's tools ran
in the sandbox are folded into its run first). When Inspect ends the sample, its
``on_sample_end`` hook lets the trial go; one that no scorer finished is recorded as abandoned
(`close_trial`), as is any trial left when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspect_ai.hooks import Hooks, SampleEnd, hooks
from inspect_ai.solver import TaskState

from oracle.authoring.task import Task
from oracle.evidence.record import Cell
from oracle.integrations.sandbox_exec import ExecRun, merge_execs
from oracle.trial.agent import RunRecord
from oracle.trial.embed import EmbeddedSandbox, sandbox
from oracle.trial.loop import TrialResult


class OracleInspectError(RuntimeError):
    """A sample that names no oracle task, or one that cannot be loaded."""


@dataclass
class OpenTrial:
    """One sample's trial while the sample runs: its sandbox, what the solver captured, and
    the result once a scorer finished it."""

    sandbox: EmbeddedSandbox
    run: RunRecord | None = None
    error: str | None = None
    result: TrialResult | None = None
    #: Opened by the ``oracle`` sandbox provider (`oracle.integrations.inspect_sandbox`), at
    #: sample init; `adopted` once `oracle_solver` runs its agent in it.
    provider: bool = False
    adopted: bool = False
    #: The commands Inspect's tools ran in the sandbox, folded into the run when it finishes.
    execs: list[ExecRun] = field(default_factory=list)


# Trials live from the solver to the end of the sample (the scorers read them in between),
# keyed by the sample's uuid.
_OPEN: dict[str, OpenTrial] = {}
_LOCK = threading.Lock()


def adopt_trial(state: TaskState, task: Task | None, out: str | None) -> OpenTrial | None:
    """The trial the ``oracle`` sandbox provider opened for this sample, if it did: the
    agent runs in it (one sandbox per sample). A solver that names another task or archive
    folder than the sandbox's config is refused rather than silently ignored."""
    with _LOCK:
        opened = _OPEN.get(state.uuid)
    if opened is None or not opened.provider or opened.adopted:
        return None
    given = opened.sandbox.task
    if task is not None and task.name != given.name:
        raise OracleInspectError(
            f"sample {state.sample_id!r}: oracle_solver(task={task.name!r}) but its oracle "
            f"sandbox runs task {given.name!r}; name the task in one place"
        )
    if out is not None:
        raise OracleInspectError(
            f"sample {state.sample_id!r} runs in the oracle sandbox, whose config says where "
            "archives go: give `out` to the sandbox config, not to oracle_solver()"
        )
    opened.adopted = True
    return opened


def trial_cell(task: Task, harness: str, epoch: int, model: str, sample_id: object) -> Cell:
    """The cell of a sample's trial: its epoch as the repetition, Inspect's model, and the
    Inspect task (and sample) as the profile."""
    return Cell(
        harness=harness,
        task=task.name,
        repetition=max(epoch - 1, 0),
        model=model,
        profile=_profile(sample_id, task),
    )


async def open_trial(
    task: Task, uuid: str, cell: Cell, out: Path, agent: str, *, provider: bool = False
) -> OpenTrial:
    """Open the sample `uuid`'s trial of `task` (steps 1–3), kept until the sample ends."""
    sb = sandbox(task, cell=cell, out=out, run=await _run_name(), agent=agent)
    await asyncio.to_thread(sb.__enter__)
    opened = OpenTrial(sb, provider=provider)
    with _LOCK:
        earlier = _OPEN.pop(uuid, None)
        _OPEN[uuid] = opened
    if earlier is not None:  # an attempt Inspect retries: the one before never finished
        await asyncio.to_thread(close_trial, earlier, "Inspect ran the sample again")
    return opened


# The name of each eval's run folder, by eval id (reading the eval's parameters costs a read
# of its log's header: once per eval).
_RUNS: dict[str, str] = {}


async def _run_name() -> str | None:
    """The folder of this eval's archives: ``<Inspect task>-<parameters>-<eval id>``, where
    the parameters are ``args-`` and a digest of the task's arguments (as the eval log
    records them), or ``noargs``. Two evals never share it, whatever their parameters; None
    outside a running sample (each trial is then a run of its own)."""
    try:
        from inspect_ai.log._samples import sample_active

        active = sample_active()
    except Exception:  # Inspect moved it: a run per trial still keeps archives apart
        return None
    if active is None or not active.eval_id:
        return None
    with _LOCK:
        known = _RUNS.get(active.eval_id)
    if known is not None:
        return known
    tag = await _args_tag(active.log_location)
    name = f"{_slug(str(active.task))}-{tag}-{active.eval_id}"
    with _LOCK:
        return _RUNS.setdefault(active.eval_id, name)


async def _args_tag(log_location: str) -> str:
    """``args-<digest>`` of the eval's task arguments, ``noargs``, or ``args-unknown`` when
    the log's header cannot be read."""
    try:
        from inspect_ai.log import read_eval_log_async

        args = (await read_eval_log_async(log_location, header_only=True)).eval.task_args
    except Exception:
        return "args-unknown"
    if not args:
        return "noargs"
    text = json.dumps(args, sort_keys=True, default=str, separators=(",", ":"))
    return "args-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "inspect"


def _profile(sample_id: object, task: Task) -> str:
    """The Inspect task's name (and the sample's id where it is not the oracle task's name),
    so that two Inspect tasks over one oracle task archive apart."""
    name = "inspect"
    with contextlib.suppress(Exception):  # the running sample's task, where Inspect tells it
        from inspect_ai.log._samples import sample_active

        active = sample_active()
        if active is not None and active.task:
            name = str(active.task)
    sample = str(sample_id)
    return name if sample == task.name else f"{name}:{sample}"


async def finish_trial(opened: OpenTrial) -> TrialResult:
    """Finish the trial once (the first scorer does it) and close the sandbox."""
    if opened.result is None:
        sb = opened.sandbox
        if sb.ready:
            run = opened.run
            if opened.execs:  # the commands Inspect's tools ran in the oracle sandbox
                run = merge_execs(run, list(opened.execs), agent=_agent_name(run))
            opened.result = await sb.afinish(run, error=opened.error)
        else:
            opened.result = sb.finish()
        await asyncio.to_thread(sb.__exit__, None, None, None)
    return opened.result


def _agent_name(run: RunRecord | None) -> str:
    return run.invocation.agent if run is not None else "inspect"


def open_trials() -> Mapping[str, Any]:
    """Trials of samples Inspect has not ended yet (their scorers may still read them), by
    sample uuid."""
    return dict(_OPEN)


def close_trial(opened: OpenTrial, why: str) -> None:
    """Tear down a trial that no scorer finished, recorded as abandoned (`why`)."""
    if opened.result is not None:
        return  # finished: its sandbox is already closed
    with contextlib.suppress(Exception):
        opened.result = opened.sandbox.abandon(why)
    with contextlib.suppress(Exception):
        opened.sandbox.__exit__(None, None, None)


@hooks(name="oracle_trials", description="Lets go of each sample's oracle trial when it ends.")
class OracleSampleEnd(Hooks):
    """Drops the sample's trial once Inspect ends the sample: every scorer has run by then,
    whichever of them were configured and in whatever order. A trial that none finished (no
    oracle scorer, or scoring skipped) is recorded as abandoned."""

    async def on_sample_end(self, data: SampleEnd) -> None:
        with _LOCK:
            opened = _OPEN.pop(data.sample_id, None)
        if opened is not None and opened.result is None:
            why = "Inspect ended the sample before an oracle scorer finished its trial"
            await asyncio.to_thread(close_trial, opened, why)


@atexit.register
def _abandon_leftovers() -> None:
    """A sample Inspect never ended: tear its sandbox down, recorded as abandoned."""
    with _LOCK:
        left = list(_OPEN.values())
        _OPEN.clear()
    for opened in left:
        close_trial(opened, "the process exited before Inspect ended the sample")


def trial_of(uuid: str) -> OpenTrial | None:
    """The open trial of the sample `uuid`, or None."""
    with _LOCK:
        return _OPEN.get(uuid)
