"""Inspect AI integration: oracle's sandbox around an Inspect solver, its verdicts as scores.

- `oracle_solver(agent, out="runs/inspect")` wraps the solver that is the agent: before it
  runs, the sample's oracle task is put in a sandbox (reset, boundary, snapshot before) whose
  endpoints the agent finds through `oracle_view(state)` (``state.metadata["oracle_env"]``
  holds them with passwords masked, for the log); after it, what Inspect
  captured (the final completion, the tool calls in the messages, whether the solver raised)
  is kept for the scorer.
- `oracle_scorers()` is three scorers, one per metric: ``utility_achieved``,
  ``security_breached`` and ``autonomy_achieved``. The first one to run finishes the trial
  (snapshot after, diff, evaluate, archive); each maps its verdict to 1.0 or 0.0. An unknown
  verdict, or one that is not measured, is *unscored* (`Score.unscored`, left out of every
  metric), never 0 or 1. Every score's metadata holds the record's path and the reason.
- Each eval archives into a folder of its own, ``<out>/<Inspect task>-<parameters>-<eval id>``
  (the parameters as a digest of the task's arguments): two evals of one task, with other
  parameters or the same, never write the same archive, so a log's record path always leads
  to the record its score came from.
- When Inspect ends the sample (its ``on_sample_end`` hook, after every scorer ran), the
  sample's trial is let go; one that no scorer finished is recorded as abandoned then.

A sample names its oracle task with `oracle_sample(path, name)` (metadata ``oracle_task`` and
``oracle_task_name``)::

    from inspect_ai import Task, task
    from oracle.integrations.inspect import oracle_sample, oracle_scorers, oracle_solver

    @task
    def rename() -> Task:
        return Task(
            dataset=[oracle_sample("tasks/demo", "user-rename")],
            solver=oracle_solver(my_agent()),
            scorer=oracle_scorers(),
        )

A sample whose sandbox could not be prepared does not run its agent; its scores are unscored
with the reason. A solver that raises has its trial recorded as an execution error, and the
error is raised on to Inspect (which then scores nothing for the sample).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspect_ai.dataset import Sample
from inspect_ai.hooks import Hooks, SampleEnd, hooks
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver

from oracle.authoring.loader import load_tasks
from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.record import Cell, TrialRecord
from oracle.evidence.tools import ToolCall
from oracle.trial.agent import RunRecord
from oracle.trial.embed import EmbeddedSandbox, sandbox
from oracle.trial.loop import TrialResult

TASK_KEY = "oracle_task"
NAME_KEY = "oracle_task_name"
ENV_KEY = "oracle_env"
_STORE_KEY = "oracle:trial"
DEFAULT_OUT = Path("runs") / "inspect"


class OracleInspectError(RuntimeError):
    """A sample that names no oracle task, or one that cannot be loaded."""


@dataclass
class _Open:
    sandbox: EmbeddedSandbox
    run: RunRecord | None = None
    error: str | None = None
    result: TrialResult | None = None


# Trials live from the solver to the end of the sample (the scorers read them in between),
# keyed by the sample's uuid.
_OPEN: dict[str, _Open] = {}
_LOCK = threading.Lock()


def oracle_sample(path: str | Path, name: str | None = None, **fields: Any) -> Sample:
    """An Inspect sample for the oracle task `name` in the task file or folder `path`: its input
    is the task's prompt. Extra `fields` go to `Sample` (``id``, ``target``, ``metadata``…)."""
    task = _load(str(path), name)
    metadata = dict(fields.pop("metadata", None) or {})
    metadata.update({TASK_KEY: str(path), NAME_KEY: task.name})
    fields.setdefault("id", task.name)
    return Sample(input=task.prompt, metadata=metadata, **fields)


def _load(path: str, name: str | None) -> Task:
    loaded = load_tasks([path])
    if name is None:
        if len(loaded.tasks) == 1:
            return loaded.tasks[0]
        problems = "; ".join(str(e) for e in loaded.errors)
        raise OracleInspectError(
            f"{path} holds {len(loaded.tasks)} oracle tasks; name one"
            + (f" ({problems})" if problems else "")
        )
    try:
        return loaded.by_name(name)
    except KeyError as exc:
        problems = "; ".join(str(e) for e in loaded.errors)
        raise OracleInspectError(
            f"{exc.args[0]}" + (f"; load errors: {problems}" if problems else "")
        ) from None


def _task_of(state: TaskState, given: Task | None) -> Task:
    if given is not None:
        return given
    path = state.metadata.get(TASK_KEY)
    if not path:
        raise OracleInspectError(
            f"sample {state.sample_id!r} names no oracle task: put its path in the sample's "
            f"metadata under {TASK_KEY!r} (oracle_sample() does)"
        )
    return _load(str(path), state.metadata.get(NAME_KEY))


def _masked(value: str) -> str:
    """`value` with the password of a URL (``scheme://user:password@host``) masked."""
    return re.sub(r"(?<=://)([^:/@\s]+):[^@/\s]+@", r"\1:***@", value)


def oracle_view(state: TaskState) -> SandboxView:
    """The sandbox view of the sample's trial (prompt and endpoints), for agent code."""
    opened = _OPEN.get(state.uuid)
    if opened is None:
        raise OracleInspectError(f"sample {state.sample_id!r} has no oracle sandbox open")
    return opened.sandbox.view


@solver
def oracle_solver(
    agent: Solver, task: Task | None = None, out: str | None = None, harness: str = "inspect"
) -> Solver:
    """Run `agent` inside the sample's oracle sandbox (see the module docstring).

    `task` overrides the sample's ``oracle_task`` metadata; `out` is where the trial archives go
    (default ``runs/inspect``).
    """
    archive = Path(out) if out else DEFAULT_OUT

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        the_task = _task_of(state, task)
        cell = Cell(
            harness=harness,
            task=the_task.name,
            repetition=max(state.epoch - 1, 0),
            model=str(state.model),
            profile=_profile(state, the_task),
        )
        run = await _run_name()
        sb = sandbox(the_task, cell=cell, out=archive, run=run, agent=_solver_name(agent))
        await asyncio.to_thread(sb.__enter__)
        opened = _Open(sb)
        with _LOCK:
            earlier = _OPEN.pop(state.uuid, None)
            _OPEN[state.uuid] = opened
        if earlier is not None:  # an attempt Inspect retries: the one before never finished
            await asyncio.to_thread(_close, earlier, "Inspect ran the sample again")
        state.store.set(_STORE_KEY, state.uuid)
        if not sb.ready:
            return state  # the scorer records the failed sandbox: every score unscored
        # Inspect writes sample metadata into its logs: the endpoints go there with their
        # passwords masked; agent code gets the real ones from `oracle_view(state)`.
        state.metadata[ENV_KEY] = {k: _masked(v) for k, v in sb.env.items()}
        started = time.time()
        try:
            state = await agent(state, generate)
        except Exception as exc:
            opened.error = f"solver raised {type(exc).__name__}: {exc}"
            opened.run = _run_record(state, agent, started, opened.error)
            await _finish(opened)
            raise
        opened.run = _run_record(state, agent, started, None)
        return state

    return solve


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


def _profile(state: TaskState, task: Task) -> str:
    """The Inspect task's name (and the sample's id where it is not the oracle task's name),
    so that two Inspect tasks over one oracle task archive apart."""
    name = "inspect"
    with contextlib.suppress(Exception):  # the running sample's task, where Inspect tells it
        from inspect_ai.log._samples import sample_active

        active = sample_active()
        if active is not None and active.task:
            name = str(active.task)
    sample = str(state.sample_id)
    return name if sample == task.name else f"{name}:{sample}"


def _solver_name(agent: Solver) -> str:
    from inspect_ai._util.registry import is_registry_object, registry_info

    if is_registry_object(agent):
        return str(registry_info(agent).name)
    return str(getattr(agent, "__qualname__", type(agent).__name__))


def _run_record(state: TaskState, agent: Solver, started: float, error: str | None) -> RunRecord:
    """What Inspect captured: the final completion (reply and claim), the tool calls."""
    completion = state.output.completion if state.output else ""
    invocation = Invocation(
        adapter="inspect",
        agent=_solver_name(agent),
        started=True,
        steps=[Step(name="solver", outcome="failed" if error else "succeeded", error=error)],
        started_at=started,
        finished_at=time.time(),
    )
    return RunRecord(
        invocation,
        reply=completion.encode("utf-8") if completion is not None else None,
        final_message=completion or None,
        tool_calls=_tool_calls(state),
    )


#: Tools whose "call" is the agent handing in its answer (Inspect's ``submit``).
ANSWER_TOOLS = frozenset({"submit"})


def _tool_calls(state: TaskState) -> tuple[ToolCall, ...] | None:
    """The tool calls in the conversation, with their results (harness tier); None when the
    agent had no tools."""
    results: dict[str, ChatMessageTool] = {
        m.tool_call_id: m
        for m in state.messages
        if isinstance(m, ChatMessageTool) and m.tool_call_id
    }
    calls: list[ToolCall] = []
    now = time.time()
    for m in state.messages:
        if not isinstance(m, ChatMessageAssistant):
            continue
        for call in m.tool_calls or ():
            if call.function in ANSWER_TOOLS:
                continue  # the agent's answer is its final message: a claim, not a call
            res = results.get(call.id)
            error = res.error.message if res is not None and res.error is not None else None
            calls.append(
                ToolCall(
                    name=call.function,
                    arguments=dict(call.arguments),
                    effects=[],
                    effects_known=False,  # Inspect's tools declare no sinks
                    ok=res is not None and error is None,
                    result=res.text if res is not None else None,
                    error=error if res is not None else "no result in the conversation",
                    started_at=now,
                    finished_at=now,
                )
            )
    return tuple(calls) if calls else None


async def _finish(opened: _Open) -> TrialResult:
    """Finish the trial once (the first scorer does it) and close the sandbox."""
    if opened.result is None:
        sb = opened.sandbox
        if sb.ready:
            opened.result = await sb.afinish(opened.run, error=opened.error)
        else:
            opened.result = sb.finish()
        await asyncio.to_thread(sb.__exit__, None, None, None)
    return opened.result


def _score(record: TrialRecord, metric: str, archive: Path | None) -> Score:
    value: bool | None = getattr(record, metric)
    meta: dict[str, Any] = {
        "record": str(archive / "record.json") if archive else None,
        "cell": record.cell.id,
        "error": record.error,
    }
    why = record.evaluation_errors.get(metric) or record.error
    if value is None:
        return Score.unscored(
            reason="scoring_failed" if record.error else "unknown",
            explanation=f"{metric} is unknown: {why or 'no reason recorded'}",
            metadata=meta,
        )
    if metric in record.not_measured:
        return Score.unscored(
            reason="not_measured",
            explanation=f"{metric} is {value} but not measured: {record.not_measured[metric]}",
            metadata={**meta, "verdict": value},
        )
    return Score(
        value=1.0 if value else 0.0,
        answer=str(value).lower(),
        explanation=_explain(record, metric),
        metadata={**meta, "verdict": value},
    )


def _explain(record: TrialRecord, metric: str) -> str:
    if metric == "autonomy_achieved":
        return record.autonomy_reason
    ev = record.evaluators.get(metric)
    if ev is None:
        return ""
    return ", ".join(f"{p.name}={p.value}" for p in ev.predicates) or ev.kind


def _metric_scorer(metric: str) -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        key = state.store.get(_STORE_KEY)
        opened = _OPEN.get(str(key)) if key else None
        if opened is None:
            return Score.unscored(
                reason="scoring_failed",
                explanation=f"sample {state.sample_id!r} ran no oracle sandbox: wrap its "
                "solver in oracle_solver()",
            )
        result = await _finish(opened)
        return _score(result.record, metric, result.archive)

    return score


@scorer(metrics=[mean(), stderr()], name="utility_achieved")
def oracle_utility() -> Scorer:
    """1.0 when the task was achieved, 0.0 when not; unscored when unknown or not measured."""
    return _metric_scorer("utility_achieved")


@scorer(metrics=[mean(), stderr()], name="security_breached")
def oracle_security() -> Scorer:
    """1.0 when the attack succeeded (a breach), 0.0 when not; unscored when unknown."""
    return _metric_scorer("security_breached")


@scorer(metrics=[mean(), stderr()], name="autonomy_achieved")
def oracle_autonomy() -> Scorer:
    """1.0 when an agent step verifiably ran, 0.0 when none did; unscored when unknown."""
    return _metric_scorer("autonomy_achieved")


def oracle_scorers() -> list[Scorer]:
    """The three oracle scorers, one per metric (each metric its own score)."""
    return [oracle_utility(), oracle_security(), oracle_autonomy()]


def open_trials() -> Mapping[str, Any]:
    """Trials of samples Inspect has not ended yet (their scorers may still read them), by
    sample uuid."""
    return dict(_OPEN)


def _close(opened: _Open, why: str) -> None:
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
            await asyncio.to_thread(_close, opened, why)


@atexit.register
def _abandon_leftovers() -> None:
    """A sample Inspect never ended: tear its sandbox down, recorded as abandoned."""
    with _LOCK:
        left = list(_OPEN.values())
        _OPEN.clear()
    for opened in left:
        _close(opened, "the process exited before Inspect ended the sample")
