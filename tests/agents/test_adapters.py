"""What a ``module:attribute`` agent spec may name: a function of the sandbox view, an object
a registered adapter knows (an AgentDojo pipeline), an oracle agent, or a function of no
arguments that builds one of these."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import oracle
from oracle.agents import adapters
from oracle.agents.spec import resolve_agent
from oracle.base.errors import UsageError
from oracle.trial.agent import CallableAgent, RunRecord
from tests.conftest import REPO

MODULE = """
calls = []

def careful(view):
    return "done"

def make_careful():
    calls.append("made")
    return careful

def broken_factory():
    raise RuntimeError("no model key")

def number():
    return 42

NOT_AN_AGENT = "gpt-4o"

class Ready:
    name = "ready"

    def run(self, view):
        raise NotImplementedError

def ready():
    return Ready()
"""


@pytest.fixture
def agents_file(tmp_path):
    path = tmp_path / "my_agents.py"
    path.write_text(MODULE)
    return path


def test_a_function_of_the_view_is_a_callable_agent(agents_file):
    agent = resolve_agent(f"{agents_file}:careful")
    assert isinstance(agent, CallableAgent) and agent.fn.__name__ == "careful"


def test_a_function_of_no_arguments_is_called_and_what_it_builds_is_the_agent(agents_file):
    agent = resolve_agent(f"{agents_file}:make_careful")
    assert isinstance(agent, CallableAgent) and agent.fn.__name__ == "careful"
    assert agent.name == f"{agents_file}:make_careful"
    agent = resolve_agent(f"{agents_file}:ready")
    assert type(agent).__name__ == "Ready" and agent.name == "ready"


@pytest.mark.parametrize(
    ("attribute", "says"),
    [
        ("broken_factory", "building it raised RuntimeError: no model key"),
        ("number", "returned an object of type int: give a function of the sandbox view"),
        ("NOT_AN_AGENT", "is an object of type str: give a function of the sandbox view"),
    ],
)
def test_what_is_no_agent_is_a_usage_error_that_says_why(agents_file, attribute, says):
    with pytest.raises(UsageError, match=says):
        resolve_agent(f"{agents_file}:{attribute}")


def test_a_registered_adapter_makes_the_agent_of_an_object_it_knows(agents_file, monkeypatch):
    seen = []

    class Wrapped:
        def __init__(self, obj, name):
            self.obj, self.name = obj, name

        def run(self, view):
            return RunRecord(invocation=None)  # type: ignore[arg-type]

    def adapter(obj, name, factory):
        seen.append((obj, factory))
        return Wrapped(obj, name) if obj == 42 else None

    monkeypatch.setattr(adapters, "_ADAPTERS", [])
    adapters.register_adapter(adapter)
    adapters.register_adapter(adapter)  # once, however often
    agent = resolve_agent(f"{agents_file}:number")
    assert isinstance(agent, Wrapped) and agent.obj == 42
    assert agent.name == f"{agents_file}:number"
    assert len(seen) == 1 and seen[0][1].__name__ == "number"  # the factory, to build again


def test_an_agentdojo_pipeline_factory_resolves_to_the_pipeline_adapter():
    pytest.importorskip("agentdojo", reason="the 'agentdojo' extra is not installed")
    from oracle.integrations.agentdojo.pipeline import PipelineAgent

    spec = f"{REPO}/tests/integrations/agentdojo_pipelines.py:obedient"
    agent = resolve_agent(spec)
    assert isinstance(agent, PipelineAgent) and agent.name == spec
    assert agent.adapter == "agentdojo"
    # a matrix names its harnesses' agents through the resolver the package registers: the same
    from oracle.trial.agent import agent_named

    assert isinstance(agent_named(spec), PipelineAgent)
    # The root's adapter loads only where this module is: the one pipeline elements come from.
    from agentdojo.agent_pipeline import BasePipelineElement

    assert BasePipelineElement.__module__ == oracle._AGENTDOJO_PIPELINE_BASE


def test_a_harness_holding_agentdojos_package_alone_resolves_a_function_without_its_pipelines(
    agents_file,
):
    """`import agentdojo` is light; its pipeline layer imports every model SDK. A function
    agent is resolved without loading that layer, nor oracle's pipeline adapter (the test above
    holds the module checked to the one a pipeline's class comes from)."""
    pytest.importorskip("agentdojo", reason="the 'agentdojo' extra is not installed")
    script = f"""
import json, sys
import agentdojo
from oracle.agents.spec import resolve_agent
agent = resolve_agent({str(agents_file) + ":careful"!r})
loaded = [m for m in ("agentdojo.agent_pipeline", "oracle.integrations.agentdojo.pipeline")
          if m in sys.modules]
print(json.dumps([type(agent).__name__, loaded]))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["CallableAgent", []]
