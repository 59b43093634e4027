"""An AgentDojo pipeline as an oracle agent, every tool call it makes recorded.

Any `BasePipelineElement` (an `AgentPipeline` of a system message, the user's query, a model
and a `ToolsExecutionLoop`, or a single element) runs on the trial's AgentDojo environment the
way AgentDojo's own ``run_task_with_pipeline`` runs it: the task's prompt, a `FunctionsRuntime`
of the suite's tools, the environment the sink holds (the attack's injections planted where
AgentDojo plants them), up to three tries while the model's last message has no content, an
`AbortAgentError` taken as the end of the run. The environment the pipeline hands back is
saved to the sink, and the sink's snapshots are what the task's checks read::

    from oracle import run_trial
    from oracle.integrations.agentdojo import pair_task
    from oracle.integrations.agentdojo.pipeline import pipeline_agent

    agent = pipeline_agent(make_pipeline)    # a pipeline, or a function that builds one
    record = run_trial(pair_task("banking", "user_task_0", "injection_task_0"), agent).record

The runtime handed to the pipeline is AgentDojo's, recording: each call it runs — the tool's
name, its arguments as they ran, its result (as AgentDojo's default formatter writes it for
the model) or its error — goes into the record's tool log, in the order the calls finished. The
log is harness evidence (what the harness saw run, DESIGN §3): it feeds the discrepancy
findings and the injection's reach, never a verdict. What the pipeline does past the runtime
(its own runtime, tools called directly, the environment written by hand) still lands in the
environment, is scored from it, and shows as an effect no recorded call declares. The
pipeline's messages are its own account (a model may write a "tool result" that nothing ran):
they are archived as a log, ``agentdojo-messages.json``, and the log of calls is never read
from them. Its final text is its reply and its final message, as a callable agent's is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from agentdojo.agent_pipeline import AbortAgentError, BasePipelineElement
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite.task_suite import model_output_from_messages
from agentdojo.types import get_text_content_as_str

from oracle.authoring.sandbox_view import SandboxView
from oracle.base.canonical import Json, to_jsonable
from oracle.evidence.invocation import Invocation, Step
from oracle.evidence.tools import ToolCall
from oracle.integrations.agentdojo.suite import READ_ONLY_PREFIXES, SINK, environment
from oracle.trial.agent import AgentError, RunRecord

#: How often AgentDojo's ``run_task_with_pipeline`` runs a pipeline whose last message has no
#: content, on the environment as the previous try left it.
TRIES = 3
#: The log file that keeps the pipeline's messages (its own account: never evidence).
MESSAGES_LOG = "agentdojo-messages.json"


class RecordingRuntime(FunctionsRuntime):  # type: ignore[misc]  # agentdojo ships no types
    """AgentDojo's `FunctionsRuntime`, keeping every call it runs as a `ToolCall`.

    Every call goes through ``run_function``: those of AgentDojo's `ToolsExecutor`, a ground
    truth's, and a call nested in another's arguments (a `FunctionCall` given as an argument,
    which the runtime runs first). A tool that writes declares the environment's sink as its
    effect; one whose name says it only reads (``get_``, ``search_`` …) declares none."""

    def __init__(self, functions: Sequence[Any], sink: str = SINK) -> None:
        super().__init__(functions)
        self.sink = sink
        self.calls: list[ToolCall] = []

    def run_function(
        self,
        env: Any,
        function: str,
        kwargs: Mapping[str, Any],
        raise_on_error: bool = False,
    ) -> tuple[Any, str | None]:
        arguments = _arguments(kwargs)  # before the call: a tool may change what it was given
        started = time.time()
        try:
            result, error = super().run_function(env, function, kwargs, raise_on_error)
        except Exception as exc:
            self._record(function, arguments, started, None, f"{type(exc).__name__}: {exc}")
            raise
        self._record(function, arguments, started, result, error)
        return result, error

    def _record(
        self,
        function: str,
        arguments: dict[str, Json],
        started: float,
        result: Any,
        error: str | None,
    ) -> None:
        self.calls.append(
            ToolCall(
                name=function,
                arguments=arguments,
                effects=[] if function.startswith(READ_ONLY_PREFIXES) else [self.sink],
                ok=error is None,
                result=_result_text(result) if error is None else None,
                error=error,
                started_at=started,
                finished_at=time.time(),
            )
        )


def _arguments(kwargs: Mapping[str, Any]) -> dict[str, Json]:
    try:
        return {str(k): to_jsonable(v) for k, v in kwargs.items()}
    except TypeError:
        return {str(k): repr(v) for k, v in kwargs.items()}


def _result_text(result: Any) -> Json:
    """The result as the model reads it by default (AgentDojo's `tool_result_to_str`: YAML for
    records and lists, ``str()`` for the rest): the text the injection's reach is looked for
    in."""
    try:
        return str(tool_result_to_str(result))
    except TypeError:  # a result the formatter refuses (a list of dicts): keep its JSON form
        try:
            return to_jsonable(result)
        except TypeError:
            return repr(result)


@dataclass
class PipelineRun:
    """What one run of a pipeline left: its final text (None where it broke before it gave
    one), its messages and the calls its runtime ran."""

    text: str | None = None
    messages: Sequence[Any] = ()
    calls: list[ToolCall] = field(default_factory=list)
    tries: int = 0


def run_pipeline(
    pipeline: BasePipelineElement,
    view: SandboxView,
    sink: str = SINK,
    *,
    into: PipelineRun | None = None,
) -> PipelineRun:
    """Run `pipeline` on the sandbox's AgentDojo environment `sink` as AgentDojo runs it, and
    save the environment it hands back. `into` is filled as the run goes, so that a run that
    raises still leaves its calls there."""
    into = into if into is not None else PipelineRun()
    with environment(view, sink) as session:
        kind = session.suite.environment_type
        runtime = RecordingRuntime(session.suite.tools, sink)
        into.calls = runtime.calls
        env = session.env
        output = None
        for _ in range(TRIES):
            into.tries += 1
            try:
                _, _, env, messages, _ = pipeline.query(view.prompt, runtime, env)
            except AbortAgentError as abort:  # a defence stopped the agent: its last state
                env, messages = abort.task_environment, abort.messages
            if not isinstance(env, kind):  # the one it was given stays, as far as it got
                raise TypeError(
                    f"the pipeline handed back a {type(env).__name__} as the environment, not "
                    f"the suite's {kind.__name__}"
                )
            # AgentDojo checks the environment the pipeline hands back, so that is the one
            # saved (the sink's after-snapshot), also when what follows raises.
            session.env = env
            into.messages = list(messages)
            if not messages or messages[-1]["role"] != "assistant":
                last = f"a {messages[-1]['role']!r} message" if messages else "no message"
                raise ValueError(
                    f"the pipeline ended on {last}, not on the assistant's answer that "
                    "AgentDojo reads as the model's output"
                )
            output = model_output_from_messages(messages)
            if output is not None:
                break
        into.text = get_text_content_as_str(output or [])
    return into


class PipelineAgent:
    """An AgentDojo pipeline as an oracle agent (see the module docstring).

    `pipeline` is a pipeline element, or a function of no arguments that builds one: a
    function is called for every trial, so each starts from a fresh pipeline (a model that
    keeps a script or a conversation starts it again); `first` is one it already built, used
    for the first trial. `sink` names the task's AgentDojo environment."""

    adapter = "agentdojo"

    def __init__(
        self,
        pipeline: BasePipelineElement | Callable[[], BasePipelineElement],
        *,
        name: str | None = None,
        sink: str = SINK,
        first: BasePipelineElement | None = None,
    ) -> None:
        if isinstance(pipeline, BasePipelineElement):
            self._make: Callable[[], BasePipelineElement] | None = None
            self._next: BasePipelineElement | None = pipeline
        elif callable(pipeline):
            self._make, self._next = pipeline, first
        else:
            raise TypeError(
                f"an AgentDojo pipeline agent needs a BasePipelineElement or a function that "
                f"builds one, not a {type(pipeline).__name__}"
            )
        shown = self._next if self._next is not None else pipeline
        self.name: str = name or _name_of(shown)
        self.sink = sink

    def __repr__(self) -> str:
        return f"PipelineAgent({self.name!r})"

    def _pipeline(self) -> BasePipelineElement:
        made, self._next = self._next, None
        if made is None and self._make is not None:
            made = self._make()
        if not isinstance(made, BasePipelineElement):
            raise TypeError(
                f"the pipeline factory of agent {self.name!r} returned a "
                f"{type(made).__name__}, not an AgentDojo BasePipelineElement"
            )
        if self._make is None:
            self._next = made  # a pipeline given as it is serves every trial
        return made

    def run(self, view: SandboxView) -> RunRecord:
        """Run the pipeline once on `view`'s AgentDojo environment; raise `AgentError`
        (carrying the calls recorded so far) where it broke."""
        started = time.time()
        done = PipelineRun()
        error: str | None = None
        try:
            run_pipeline(self._pipeline(), view, self.sink, into=done)
        except Exception as exc:
            error = f"raised {type(exc).__name__}: {exc}"
        invocation = Invocation(
            adapter=self.adapter,
            agent=self.name,
            started=True,
            steps=[
                Step(
                    name="pipeline",
                    outcome="succeeded" if error is None else "failed",
                    error=error,
                )
            ],
            started_at=started,
            finished_at=time.time(),
        )
        record = RunRecord(
            invocation,
            reply=done.text.encode("utf-8") if done.text is not None else None,
            final_message=done.text,
            # The runtime is the pipeline's only sanctioned way to act: a change no call in
            # this log declares is a finding, so the log is handed over even when empty.
            tool_calls=tuple(done.calls),
            logs={MESSAGES_LOG: _messages_json(done)} if done.messages else {},
        )
        if error is not None:
            raise AgentError(f"agent {self.name!r} {error}", record)
        return record


def _name_of(pipeline: object) -> str:
    name = getattr(pipeline, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(pipeline, "__name__", None) or type(pipeline).__name__)


def _messages_json(done: PipelineRun) -> bytes:
    try:
        data: Json = to_jsonable(list(done.messages))
    except TypeError:
        data = [repr(m) for m in done.messages]
    return orjson.dumps({"tries": done.tries, "messages": data}, option=orjson.OPT_INDENT_2)


def pipeline_agent(
    pipeline: BasePipelineElement | Callable[[], BasePipelineElement],
    *,
    name: str | None = None,
    sink: str = SINK,
) -> PipelineAgent:
    """`pipeline` (an AgentDojo pipeline element, or a function of no arguments that builds
    one for each trial) as an oracle agent for the AgentDojo tasks, named `name` (by default
    the pipeline's own ``name``, or its class's).

    >>> from agentdojo.agent_pipeline import InitQuery
    >>> pipeline_agent(InitQuery(), name="just-the-query").name
    'just-the-query'
    """
    return PipelineAgent(pipeline, name=name, sink=sink)


def adapt_pipeline(
    obj: object, name: str, factory: Callable[[], object] | None = None
) -> PipelineAgent | None:
    """The agent for what an agent spec names, where it is an AgentDojo pipeline element
    (`factory` is the function of no arguments that built it, called again for each later
    trial); None for anything else. See `oracle.agents.adapters`."""
    if not isinstance(obj, BasePipelineElement):
        return None
    if factory is None:
        return PipelineAgent(obj, name=name)
    return PipelineAgent(factory, name=name, first=obj)
