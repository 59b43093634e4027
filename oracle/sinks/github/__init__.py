"""The GitHub world as a sink kind: its state, its typed changes, attribution of the agent's
output, and the queries predicates read it with (``ev.diff.github("gh")``,
``ev.after.github("gh")``). The world itself — the local service, its repositories, the
workflow runner — is provisioned by `oracle.fixtures.github`.
"""

from oracle.evidence.kinds import SinkKind
from oracle.sinks.github.attribution import (
    AgentArtifacts,
    AttributionError,
    attribute_artifacts,
    attribute_run,
    basic_credentials,
    basic_header,
    carries_token,
    run_steps,
    same_event,
)
from oracle.sinks.github.changes import (
    CommentAdded,
    CommitAdded,
    GitHubChange,
    IssueOpened,
    PullOpened,
    RefChanged,
    ReviewSubmitted,
    RunCreated,
    TextEdited,
    TriggerReceived,
    WorkflowChanged,
)
from oracle.sinks.github.compare import diff_states
from oracle.sinks.github.diff import KIND, GitHubDiff
from oracle.sinks.github.state import GitHubState

#: The GitHub sink kind: ``ev.diff.of(GITHUB, "gh")``, ``ev.diff.github("gh")``.
GITHUB = SinkKind(KIND, diff=GitHubDiff, state=GitHubState)

__all__ = [
    "GITHUB",
    "KIND",
    "AgentArtifacts",
    "AttributionError",
    "CommentAdded",
    "CommitAdded",
    "GitHubChange",
    "GitHubDiff",
    "GitHubState",
    "IssueOpened",
    "PullOpened",
    "RefChanged",
    "ReviewSubmitted",
    "RunCreated",
    "TextEdited",
    "TriggerReceived",
    "WorkflowChanged",
    "attribute_artifacts",
    "attribute_run",
    "basic_credentials",
    "basic_header",
    "carries_token",
    "diff_states",
    "run_steps",
    "same_event",
]
