"""Inspect tasks over oracle tasks, run by `inspect eval` in tests/integrations/test_inspect.py.

The agent is an Inspect solver: it asks the model (Inspect's mock provider, `mockllm/model`)
and then acts in the sandbox like one of the demo agents. The mock model is given its outputs
with token usage filled in: otherwise it counts tokens with a tokenizer whose data it would
download, and nothing is downloaded here.
"""

import atexit
import itertools
import json
import os
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.model import Model, ModelOutput, ModelUsage, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver

from oracle.agents.demo import careful, obedient
from oracle.integrations.inspect import (
    open_trials,
    oracle_sample,
    oracle_scorers,
    oracle_security,
    oracle_solver,
    oracle_view,
)

HERE = Path(__file__).resolve().parent
DEMO = HERE.parent.parent / "tasks" / "demo"


@atexit.register  # runs before the integration's own clean-up at exit (registered earlier)
def _report_open_trials() -> None:
    """Where the test asks: the trials the integration still holds once the eval is over."""
    where = os.environ.get("ORACLE_TEST_OPEN_TRIALS")
    if where:
        Path(where).write_text(json.dumps(sorted(open_trials())))


def mock_model() -> Model:
    output = ModelOutput.from_content(model="mockllm/model", content="On it.")
    output.usage = ModelUsage(input_tokens=10, output_tokens=2, total_tokens=12)
    return get_model("mockllm/model", custom_outputs=itertools.repeat(output))


@solver
def scripted(kind: str = "careful") -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state = await generate(state)
        act = careful if kind == "careful" else obedient
        act(oracle_view(state))
        return state

    return solve


@solver
def crashing() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        oracle_view(state).sql("app", "UPDATE users SET role = 'admin' WHERE name = 'mallory'")
        raise RuntimeError("the agent fell over")

    return solve


def demo(out: str, kind: str) -> Task:
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename"), oracle_sample(DEMO, "orders-cleanup")],
        solver=oracle_solver(scripted(kind), out=out),
        scorer=oracle_scorers(),
        model=mock_model(),
    )


@task
def careful_demo(out: str) -> Task:
    return demo(out, "careful")


@task
def obedient_demo(out: str) -> Task:
    return demo(out, "obedient")


@task
def broken(out: str) -> Task:
    return Task(
        dataset=[
            oracle_sample(HERE / "tasks" / "task_broken_seed.py"),
            oracle_sample(DEMO, "user-rename"),
        ],
        solver=oracle_solver(scripted("careful"), out=out),
        scorer=oracle_scorers(),
        model=mock_model(),
    )


@task
def crash(out: str) -> Task:
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename")],
        solver=oracle_solver(crashing(), out=out),
        scorer=oracle_scorers(),
        model=mock_model(),
    )


@task
def only_security(out: str) -> Task:
    """One oracle scorer of the three: the trial is still finished, and then let go."""
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename")],
        solver=oracle_solver(scripted("obedient"), out=out),
        scorer=oracle_security(),
        model=mock_model(),
    )


@task
def no_oracle_scorer(out: str) -> Task:
    """No oracle scorer: nothing finishes the trial, so it is abandoned when the sample ends."""
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename")],
        solver=oracle_solver(scripted("careful"), out=out),
        model=mock_model(),
    )
