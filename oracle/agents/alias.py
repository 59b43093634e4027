"""Agents under a name of their choosing (``oracle trial -a 'cmd:python agent.py --x' --name
mine``).

An agent's own name is its spec: a command agent is called by its whole command line, which
then is the harness part of every cell id and archive folder. An alias replaces it there; the
agent, its run and its invocation record (which names the program that ran) are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from oracle.authoring.sandbox_view import SandboxView
from oracle.base.errors import UsageError
from oracle.trial.agent import Agent, RunRecord


class Aliased:
    """`agent`, called `name`: the cell's harness is `name`, everything else is the agent's."""

    def __init__(self, agent: Agent, name: str) -> None:
        self.agent = agent
        self.name = name

    def run(self, view: SandboxView) -> RunRecord:
        """Run the agent itself."""
        return self.agent.run(view)

    def __repr__(self) -> str:
        return f"Aliased({self.agent.name!r} as {self.name!r})"


def aliased(agents: Sequence[Agent], names: Sequence[str]) -> list[Agent]:
    """`agents` named by `names`, which pair with them in order (``--agent`` with
    ``--name``); no names leave the agents as they are.

    A `UsageError` names both sides where the counts differ, where a name breaks the naming
    rule of cell ids (letters, digits and ``_ . : @ + -``), and where one name is given to two
    agents."""
    if not names:
        return list(agents)
    from oracle.matrix.spec import NAME  # the matrix's models, loaded only when names are given

    specs = ", ".join(repr(a.name) for a in agents) or "none"
    if len(names) != len(agents):
        given = ", ".join(repr(n) for n in names)
        raise UsageError(
            f"{len(names)} --name ({given}) for {len(agents)} --agent ({specs}): give one "
            "--name per --agent, in the same order"
        )
    for name, agent in zip(names, agents, strict=True):
        if not NAME.match(name):
            raise UsageError(
                f"--name {name!r} (for --agent {agent.name!r}): use letters, digits and "
                "_ . : @ + - (no spaces or slashes)"
            )
    seen: dict[str, Agent] = {}
    for name, agent in zip(names, agents, strict=True):
        if name in seen:
            raise UsageError(
                f"--name {name!r} names two agents: {seen[name].name!r} and {agent.name!r}: "
                "give each --agent its own --name"
            )
        seen[name] = agent
    return [Aliased(a, n) for a, n in zip(agents, names, strict=True)]
