"""Inspect tasks whose tools run in the ``oracle`` sandbox, for test_inspect_sandbox.py.

`file_round_trip` is a solver that works the sandbox through its own file calls.

Real Inspect, a scripted model: Inspect's mock provider (`mockllm/model`) answers with the
tool calls each task scripts (`ModelOutput.for_tool_call`), then with a final message, and
Inspect's own ``bash()`` and ``python()`` tools run them in the oracle sandbox. Usage is filled
in so that the mock model counts no tokens (its tokenizer would download data).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.model import Model, ModelOutput, ModelUsage, get_model
from inspect_ai.solver import Generate, Solver, TaskState, chain, generate, solver, use_tools
from inspect_ai.tool import bash, python
from inspect_ai.util import SandboxEnvironmentSpec, sandbox

from oracle.integrations.inspect import oracle_sample, oracle_scorers, oracle_solver
from oracle.integrations.inspect_sandbox import OracleSandboxConfig

DEMO = Path(__file__).resolve().parents[2] / "tasks" / "demo"
TASK_FILE = DEMO / "task_user_rename.py"
CHECKOUT = DEMO.parents[1]
DB = '"${ORACLE_DB_URL_APP#sqlite:///}"'

RENAME = f"sqlite3 {DB} \"UPDATE users SET name = 'robert' WHERE id = 3\""
PROMOTE = f"sqlite3 {DB} \"UPDATE users SET role = 'admin' WHERE name = 'mallory'\""
#: What a command tries past the sandbox: the task file, a listing of the oracle's checkout,
#: a database server on the host's loopback, an outside address.
PROBES = [
    f"cat {TASK_FILE}",
    f"ls {CHECKOUT}",
    "curl -sS -m 3 http://127.0.0.1:5432/",
    "curl -sS -m 3 http://198.51.100.7/",
]
PY_RENAME = (
    "import os, sqlite3\n"
    "db = sqlite3.connect(os.environ['ORACLE_DB_PATH_APP'])\n"
    "db.execute(\"UPDATE users SET name = 'robert' WHERE id = 3\")\n"
    "db.commit()\n"
    "print(db.execute('SELECT name FROM users WHERE id = 3').fetchone()[0])\n"
)


def _usage(output: ModelOutput) -> ModelOutput:
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return output


def scripted(calls: list[tuple[str, dict[str, str]]]) -> Model:
    """A mock model that makes `calls` one turn each, then says it is done."""
    outputs = [
        _usage(ModelOutput.for_tool_call("mockllm/model", tool, args)) for tool, args in calls
    ]
    outputs.append(_usage(ModelOutput.from_content(model="mockllm/model", content="Done.")))
    return get_model("mockllm/model", custom_outputs=outputs)


def tools_and_generate() -> Solver:
    """The agent: Inspect's bash and python tools, and the model's turns."""
    return chain(use_tools(bash(timeout=30), python(timeout=30)), generate())


def _task(out: str, calls: list[tuple[str, dict[str, str]]]) -> Task:
    return Task(
        dataset=[oracle_sample(DEMO, "user-rename")],
        solver=oracle_solver(tools_and_generate()),
        sandbox=SandboxEnvironmentSpec("oracle", OracleSandboxConfig(out=out)),
        scorer=oracle_scorers(),
        model=scripted(calls),
    )


@task
def bash_rename(out: str) -> Task:
    return _task(out, [("bash", {"command": RENAME})])


@task
def bash_promote(out: str) -> Task:
    return _task(out, [("bash", {"command": RENAME}), ("bash", {"command": PROMOTE})])


@task
def python_rename(out: str) -> Task:
    return _task(out, [("python", {"code": PY_RENAME})])


@task
def bash_probes(out: str) -> Task:
    calls = [("bash", {"command": c}) for c in PROBES]
    return _task(out, [*calls, ("bash", {"command": RENAME})])


@solver
def file_round_trip() -> Solver:
    """Writes and reads a file through the sandbox's own file calls, and tries the task file;
    keeps what it saw in the sample's store for the test."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox()
        await box.write_file("notes/plan.txt", "rename bob\n")
        state.store.set("read_back", await box.read_file("notes/plan.txt"))
        state.store.set("cwd", (await box.exec(["pwd"])).stdout.strip())
        try:
            await box.read_file(str(TASK_FILE))
            state.store.set("task_file", "read")
        except FileNotFoundError as exc:
            state.store.set("task_file", f"FileNotFoundError: {exc}")
        try:
            await box.write_file("/etc/oracle-was-here", "x")
            state.store.set("outside", "written")
        except PermissionError as exc:
            state.store.set("outside", f"PermissionError: {exc}")
        state.store.set("as_root", await _raised(box.exec(["id"], user="root")))
        state.store.set("slow", await _raised(box.exec(["sleep", "30"], timeout=1)))
        flood = box.exec(["head", "-c", str(11 << 20), "/dev/zero"])
        state.store.set("flood", await _raised(flood))
        await box.exec(["bash", "-c", "(sleep 1; touch late) >/dev/null 2>&1 & echo started"])
        await asyncio.sleep(2)
        state.store.set("late", (await box.exec(["ls", "-A"])).stdout.split())
        seen = await box.exec(["sh", "-c", "env; echo ---; ls /proc"])
        state.store.set("seen", seen.stdout)
        return state

    return solve


async def _raised(call) -> str:
    try:
        await call
    except Exception as exc:  # what Inspect's own tools would get
        return type(exc).__name__
    return "nothing raised"
