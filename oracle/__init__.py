"""oracle: decide what an agent did from the world it acted in, never from what it says.

The authoring surface, in one import::

    from oracle import Task, Injection, Scope, breach, clean, mirror, sqlite, folder, File, Link
    from oracle import Limits                                     # what the agent may use
    from oracle import egress, Canned, smtp, maildir, mbox, Mail, reply
    from oracle import postgres, mariadb, redis, rabbitmq        # sinks on real servers
    from oracle import github, Actor, Repo, Issue, PullRequest, IssueComment   # a GitHub world

See docs/authoring.md.

Each name is imported on first use (PEP 562), so that ``import oracle`` and ``oracle --help``
cost little: the servers' clients, pydantic and the proxies load only when a name that needs
them is asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import oracle.evidence.kinds as _kinds
import oracle.trial.defaults as _defaults
from oracle.agents import adapters as _adapters
from oracle.base import moved as _moved
from oracle.base.lazy import lazy_names
from oracle.scoring import preload as _preload

if TYPE_CHECKING:
    from oracle.authoring.limits import Limits
    from oracle.authoring.loader import load_tasks
    from oracle.authoring.sandbox_view import SandboxView
    from oracle.authoring.task import (
        Control,
        Injection,
        Scope,
        Task,
        TaskError,
        breach,
        clean,
        mirror,
    )
    from oracle.evidence.record import Cell, TrialRecord
    from oracle.fixtures import (
        Canned,
        Dir,
        File,
        Link,
        Mail,
        Sorted,
        egress,
        folder,
        maildir,
        mariadb,
        mbox,
        postgres,
        rabbitmq,
        redis,
        reply,
        smtp,
        sqlite,
    )
    from oracle.fixtures.github import (
        Actor,
        Comment,
        Dispatch,
        GitHubClient,
        Issue,
        IssueComment,
        IssueOpened,
        Labeled,
        PastRun,
        PullRequest,
        PullRequestOpened,
        Repo,
        Review,
        github,
    )
    from oracle.judging.llm import Example, Judge
    from oracle.sandbox.sandbox import Sandbox
    from oracle.sinks.sql_diff import ABSENT

    # The same class, seen with a typed accessor per built-in sink kind (ev.diff.sql(...)).
    from oracle.sinks.typed_evidence import Evidence
    from oracle.trial.agent import Agent, CallableAgent, RunRecord
    from oracle.trial.loop import run_trial

#: Each public name → the module that defines it (imported when the name is first asked for).
_SOURCES: dict[str, str] = {
    "ABSENT": "oracle.sinks.sql_diff",
    "Actor": "oracle.fixtures.github",
    "Agent": "oracle.trial.agent",
    "CallableAgent": "oracle.trial.agent",
    "Canned": "oracle.fixtures",
    "Cell": "oracle.evidence.record",
    "Comment": "oracle.fixtures.github",
    "Control": "oracle.authoring.task",
    "Dir": "oracle.fixtures",
    "Dispatch": "oracle.fixtures.github",
    "Evidence": "oracle.evidence.evidence",
    "Example": "oracle.judging.llm",
    "File": "oracle.fixtures",
    "GitHubClient": "oracle.fixtures.github",
    "Injection": "oracle.authoring.task",
    "Issue": "oracle.fixtures.github",
    "IssueComment": "oracle.fixtures.github",
    "IssueOpened": "oracle.fixtures.github",
    "Judge": "oracle.judging.llm",
    "Labeled": "oracle.fixtures.github",
    "Limits": "oracle.authoring.limits",
    "Link": "oracle.fixtures",
    "Mail": "oracle.fixtures",
    "PastRun": "oracle.fixtures.github",
    "PullRequest": "oracle.fixtures.github",
    "PullRequestOpened": "oracle.fixtures.github",
    "Repo": "oracle.fixtures.github",
    "Review": "oracle.fixtures.github",
    "RunRecord": "oracle.trial.agent",
    "Sandbox": "oracle.sandbox.sandbox",
    "SandboxView": "oracle.authoring.sandbox_view",
    "Scope": "oracle.authoring.task",
    "Sorted": "oracle.fixtures",
    "Task": "oracle.authoring.task",
    "TaskError": "oracle.authoring.task",
    "TrialRecord": "oracle.evidence.record",
    "breach": "oracle.authoring.task",
    "clean": "oracle.authoring.task",
    "egress": "oracle.fixtures",
    "folder": "oracle.fixtures",
    "github": "oracle.fixtures.github",
    "load_tasks": "oracle.authoring.loader",
    "maildir": "oracle.fixtures",
    "mariadb": "oracle.fixtures",
    "mbox": "oracle.fixtures",
    "mirror": "oracle.authoring.task",
    "postgres": "oracle.fixtures",
    "rabbitmq": "oracle.fixtures",
    "redis": "oracle.fixtures",
    "reply": "oracle.fixtures",
    "run_trial": "oracle.trial.loop",
    "smtp": "oracle.fixtures",
    "sqlite": "oracle.fixtures",
}

__all__ = [
    "ABSENT",
    "Actor",
    "Agent",
    "CallableAgent",
    "Canned",
    "Cell",
    "Comment",
    "Control",
    "Dir",
    "Dispatch",
    "Evidence",
    "Example",
    "File",
    "GitHubClient",
    "Injection",
    "Issue",
    "IssueComment",
    "IssueOpened",
    "Judge",
    "Labeled",
    "Limits",
    "Link",
    "Mail",
    "PastRun",
    "PullRequest",
    "PullRequestOpened",
    "Repo",
    "Review",
    "RunRecord",
    "Sandbox",
    "SandboxView",
    "Scope",
    "Sorted",
    "Task",
    "TaskError",
    "TrialRecord",
    "breach",
    "clean",
    "egress",
    "folder",
    "github",
    "load_tasks",
    "maildir",
    "mariadb",
    "mbox",
    "mirror",
    "postgres",
    "rabbitmq",
    "redis",
    "reply",
    "run_trial",
    "smtp",
    "sqlite",
]


__getattr__, __dir__ = lazy_names(__name__, _SOURCES)


def _resolve_agent(spec: str) -> Agent:
    """`oracle.agents.spec.resolve_agent`, imported on first use: it loads the command and
    demo agents, which ``import oracle`` alone does not need."""
    from oracle.agents.spec import resolve_agent

    return resolve_agent(spec)


# The matrix (oracle.matrix.run) resolves each harness's agent through this, in every process
# that imports oracle: its own, a local worker, a Ray worker.
_defaults.register("agents", _resolve_agent)


def _sandbox(task: Task, **options: Any) -> Any:
    """The built-in sandbox (`oracle.sandbox.sandbox.Sandbox`), imported on first use. Once
    imported, it registers itself with `oracle.trial.sandboxing` in place of this."""
    from oracle.sandbox.sandbox import Sandbox

    return Sandbox(task, **options)


# Trials, controls and the matrix open sandboxes through this unless another is registered.
_defaults.register("sandbox", _sandbox)
# Scorer zygotes import, before they fork, what task files use of the layers they import
# from: the modules of those layers that the harness has loaded for its tasks.
_preload.register(__name__)
for _layer in (
    "oracle.authoring",
    "oracle.evidence",
    "oracle.judging",
    "oracle.sinks",
    "oracle.fixtures",
):
    _preload.register_layer(_layer)


#: The module of AgentDojo's ``BasePipelineElement``: no object is one unless it is loaded.
_AGENTDOJO_PIPELINE_BASE = "agentdojo.agent_pipeline.base_pipeline_element"


def _agentdojo_pipeline(
    obj: object, name: str, factory: Callable[[], object] | None
) -> Agent | None:
    """An AgentDojo pipeline an agent spec names, as an agent (None for anything else).
    Whoever built the object imported AgentDojo's pipeline layer: for any other object nothing
    is imported. Its package alone is not enough, since AgentDojo's ``agent_pipeline`` imports
    every model SDK it supports (4 s of CPU, measured) and a harness may hold ``agentdojo``
    for its task suites' names only."""
    if _AGENTDOJO_PIPELINE_BASE not in sys.modules:
        return None
    from oracle.integrations.agentdojo.pipeline import adapt_pipeline

    return adapt_pipeline(obj, name, factory)


# `oracle trial -a module:function` and matrices may name an AgentDojo pipeline (or a function
# that builds one); the adapter lives above the agents' layer, so it is registered from here.
_adapters.register_adapter(_agentdojo_pipeline)


# Reading an archive, a boundary query or a typed accessor sees every built-in kind, whatever
# was imported before: each kind's module loads on the first lookup of that kind (and all of
# them where every kind is listed), not on ``import oracle``.
#: The built-in sink kinds: (name, the module that declares it, boundary evidence or not).
_BUILTIN_KINDS = (
    ("sql", "oracle.sinks.sql_diff", False),
    ("files", "oracle.sinks.files", False),
    ("redis", "oracle.sinks.redis", False),
    ("amqp", "oracle.sinks.amqp", False),
    ("inbox", "oracle.sinks.inbox", False),
    ("github", "oracle.sinks.github", False),
    ("mail", "oracle.sinks.mail", True),
    ("reply", "oracle.sinks.reply", True),
    ("egress", "oracle.sinks.egress", True),
)
for _name, _module, _boundary in _BUILTIN_KINDS:
    _kinds.declare_builtin(_name, _module, boundary=_boundary)

# Old import paths (oracle.diff, oracle.trial…) keep working for one release, with a warning.
_moved.install()
