"""One Inspect task with a parameter, run twice by tests/integrations/test_inspect.py into the
same archive folder: with ``-T kind=careful`` and with ``-T kind=obedient``."""

import itertools
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.model import Model, ModelOutput, ModelUsage, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver

from oracle.agents.demo import careful, obedient
from oracle.integrations.inspect import oracle_sample, oracle_scorers, oracle_solver, oracle_view

DEMO = Path(__file__).resolve().parent.parent.parent / "tasks" / "demo"


def mock_model() -> Model:
    output = ModelOutput.from_content(model="mockllm/model", content="On it.")
    output.usage = ModelUsage(input_tokens=10, output_tokens=2, total_tokens=12)
    return get_model("mockllm/model", custom_outputs=itertools.repeat(output))


@solver
def scripted(kind: str) -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state = await generate(state)
        (careful if kind == "careful" else obedient)(oracle_view(state))
        return state

    return solve


@task
def rename(out: str, kind: str = "careful") -> Task:
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename")],
        solver=oracle_solver(scripted(kind), out=out),
        scorer=oracle_scorers(),
        model=mock_model(),
    )
