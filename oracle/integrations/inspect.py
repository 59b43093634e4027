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
- With ``sandbox="oracle"`` (`oracle.integrations.inspect_sandbox`) the trial is opened at
  sample init instead, Inspect's own tools run their commands in it, and `oracle_solver`
  runs the agent in that same trial; the commands are folded into its run when it finishes.

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

import re
import time
from pathlib import Path
from typing import Any

from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver

from oracle.authoring.loader import load_tasks
from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Task
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.record import TrialRecord
from oracle.evidence.tools import ToolCall
from oracle.integrations.inspect_trials import (
    OracleInspectError,
    adopt_trial,
    finish_trial,
    open_trial,
    open_trials,
    trial_cell,
    trial_of,
)
from oracle.trial.agent import RunRecord

__all__ = [
    "OracleInspectError",
    "open_trials",
    "oracle_autonomy",
    "oracle_sample",
    "oracle_scorers",
    "oracle_security",
    "oracle_solver",
    "oracle_utility",
    "oracle_view",
]

TASK_KEY = "oracle_task"
NAME_KEY = "oracle_task_name"
ENV_KEY = "oracle_env"
_STORE_KEY = "oracle:trial"
DEFAULT_OUT = Path("runs") / "inspect"


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
    opened = trial_of(state.uuid)
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
        opened = adopt_trial(state, task, out)
        if opened is None:
            the_task = _task_of(state, task)
            cell = trial_cell(the_task, harness, state.epoch, str(state.model), state.sample_id)
            opened = await open_trial(the_task, state.uuid, cell, archive, _solver_name(agent))
        sb = opened.sandbox
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
            await finish_trial(opened)
            raise
        opened.run = _run_record(state, agent, started, None)
        return state

    return solve


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
        key = state.store.get(_STORE_KEY) or state.uuid  # the oracle sandbox opens it itself
        opened = trial_of(str(key)) if key else None
        if opened is None:
            return Score.unscored(
                reason="scoring_failed",
                explanation=f"sample {state.sample_id!r} ran no oracle sandbox: wrap its "
                "solver in oracle_solver()",
            )
        result = await finish_trial(opened)
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
