"""oracle: decide what an agent did from the world it acted in, never from what it says.

The authoring surface, in one import::

    from oracle import Task, Injection, Scope, breach, clean, mirror, sqlite, folder, File, Link
    from oracle import Limits                                     # what the agent may use
    from oracle import egress, Canned, smtp, maildir, mbox, Mail, reply
    from oracle import postgres, mariadb, redis, rabbitmq        # sinks on real servers
    from oracle import github, Actor, Repo, Issue, PullRequest, IssueComment   # a GitHub world

See docs/authoring.md.
"""

from typing import TYPE_CHECKING

from oracle.authoring.limits import Limits
from oracle.authoring.loader import load_tasks
from oracle.authoring.sandbox_view import SandboxView
from oracle.authoring.task import Control, Injection, Scope, Task, TaskError, breach, clean, mirror
from oracle.base import moved as _moved
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
from oracle.trial.agent import Agent, CallableAgent, RunRecord, register_resolver
from oracle.trial.loop import run_trial

if TYPE_CHECKING:
    # The same class, seen with a typed accessor per built-in sink kind (ev.diff.sql(...)).
    from oracle.sinks.typed_evidence import Evidence
else:
    from oracle.evidence.evidence import Evidence


def _resolve_agent(spec: str) -> Agent:
    """`oracle.agents.spec.resolve_agent`, imported on first use: it loads the command and
    demo agents, which ``import oracle`` alone does not need."""
    from oracle.agents.spec import resolve_agent

    return resolve_agent(spec)


# The matrix (oracle.matrix.run) resolves each harness's agent through this, in every process
# that imports oracle: its own, a local worker, a Ray worker.
register_resolver(_resolve_agent)

# Old import paths (oracle.diff, oracle.trial…) keep working for one release, with a warning.
_moved.install()

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
