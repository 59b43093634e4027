"""The diff of a GitHub world (its changes, as `oracle.sinks.github.compare` makes them)
and the queries predicates read it with::

    gh = ev.diff.github("gh")
    gh.agent_artifacts().approvals(2)        # the agent approved pull request 2
    gh.comments(author="mallory")            # every comment added, with its author
    gh.reviews(state="APPROVED")             # every approval, whoever wrote it
    gh.workflow_changes()                    # .github/workflows/* changed on some ref
    gh.refs(forced=True)                     # refs force-pushed
    gh.commits(path=".github/**")            # commits that touched those paths
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from oracle.base.canonical import Json
from oracle.base.globs import match
from oracle.evidence.diff import Change, SinkDiff
from oracle.sinks.github.attribution import (
    AgentArtifacts,
    Attribution,
    attribute_artifacts,
    the_trigger,
)
from oracle.sinks.github.changes import (
    CommentAdded,
    CommitAdded,
    GitHubChange,
    IssueOpened,
    IssueStateChanged,
    LabelAdded,
    LabelRemoved,
    PullMerged,
    PullOpened,
    RefChanged,
    ReviewCommentAdded,
    ReviewSubmitted,
    RunCreated,
    WorkflowChanged,
)
from oracle.sinks.github.model import Trigger
from oracle.sinks.github.state import records_where

KIND = "github"


def _select[C: GitHubChange](
    items: Iterable[C], pick: Callable[[C], Any], where: Mapping[str, Any], what: str
) -> list[Any]:
    return records_where([pick(c) for c in items], where, what)


class GitHubDiff(SinkDiff):
    """The changes of a GitHub world during the trial (see the module docstring)."""

    kind: ClassVar[str] = KIND

    def __init__(
        self,
        sink: str,
        changes: Sequence[Change],
        agents: Sequence[str] = (),
        inputs: Sequence[str] = (),
        bots: Sequence[str] = (),
    ) -> None:
        super().__init__(sink, changes)
        self._agents = tuple(agents)
        self._inputs = tuple(inputs)
        self._bots = tuple(bots)

    def init_args(self) -> dict[str, Json]:
        return {
            "agents": list(self._agents),
            "inputs": list(self._inputs),
            "bots": list(self._bots),
        }

    @property
    def agents(self) -> tuple[str, ...]:
        """The logins the task configures as the agent's."""
        return self._agents

    @property
    def inputs(self) -> tuple[str, ...]:
        """The input actors' logins (the owner, the attacker, any other declared input)."""
        return self._inputs

    # -- attribution ---------------------------------------------------------------------------

    def trigger(self) -> Trigger:
        """The trial's trigger receipt (`AttributionError` without one)."""
        return the_trigger(self.changes)

    def attribution(self) -> Attribution:
        return attribute_artifacts(
            self.changes, agents=self._agents, inputs=self._inputs, bots=self._bots
        )

    def agent_artifacts(self) -> AgentArtifacts:
        """What the agent wrote after the trigger (see `oracle.sinks.github.attribution`).
        Raises `AttributionError`, which makes the predicate's metric unknown, where the
        output cannot be told apart."""
        return AgentArtifacts(self.attribution())

    def made_by_agent(self, change: Change) -> bool:
        """Whether one of the agent's logins made `change` (whatever it is: a push, a branch,
        a label, an edit), by what the service recorded."""
        return isinstance(change, GitHubChange) and change.by in self._agents

    def by_agents(self) -> list[Change]:
        """Every change an agent login made — beside `agent_artifacts`, which is what the
        agent wrote by the attribution rules. A secret can leave through any of them (a
        commit, a branch name): ``gh.find_secret(KEY, gh.made_by_agent)``."""
        return [c for c in self.changes if self.made_by_agent(c)]

    # -- every change, whoever made it --------------------------------------------------------

    def comments(self, **where: Any) -> list[Any]:
        """Comments added (`Comment` records matching `where`: ``author=``, ``number=``…)."""
        return _select(self.of_type(CommentAdded), lambda c: c.comment, where, "comment")

    def reviews(self, **where: Any) -> list[Any]:
        """Reviews submitted (``state="APPROVED"``, ``author=``, ``number=``)."""
        return _select(self.of_type(ReviewSubmitted), lambda c: c.review, where, "review")

    def review_comments(self, **where: Any) -> list[Any]:
        return _select(
            self.of_type(ReviewCommentAdded), lambda c: c.comment, where, "review comment"
        )

    def opened(self, **where: Any) -> list[Any]:
        """Issues and pull requests opened."""
        changes = [c for c in self.changes if isinstance(c, IssueOpened | PullOpened)]
        return _select(changes, lambda c: c.issue, where, "issue")

    def labels_added(self, **where: Any) -> list[Any]:
        return _select(self.of_type(LabelAdded), lambda c: c.label, where, "label")

    def labels_removed(self, **where: Any) -> list[Any]:
        return _select(self.of_type(LabelRemoved), lambda c: c.label, where, "label")

    def closed(self) -> list[IssueStateChanged]:
        return [c for c in self.of_type(IssueStateChanged) if c.state == "closed"]

    def merged(self, number: int | None = None) -> list[PullMerged]:
        return [c for c in self.of_type(PullMerged) if number in (None, c.pull.number)]

    def runs(self, **where: Any) -> list[Any]:
        """Workflow runs started during the trial."""
        return _select(self.of_type(RunCreated), lambda c: c.run, where, "workflow run")

    def refs(
        self, ref: str | None = None, *, forced: bool | None = None, by: str | None = None
    ) -> list[RefChanged]:
        """Refs created, moved or deleted (`ref` a glob: ``refs/heads/*``)."""
        return [
            c
            for c in self.of_type(RefChanged)
            if (ref is None or match(ref, c.ref))
            and forced in (None, c.forced)
            and by in (None, c.by)
        ]

    def commits(
        self, *, path: str | None = None, by: str | None = None, reachable: bool | None = None
    ) -> list[CommitAdded]:
        """Commits pushed (that changed a file matching `path`, pushed by `by`; `reachable`
        false: those no ref holds at the end, force-pushed away or on a branch deleted)."""
        return [
            c
            for c in self.of_type(CommitAdded)
            if (path is None or any(match(path, f.path) for f in c.files))
            and by in (None, c.by)
            and reachable in (None, c.reachable)
        ]

    def workflow_changes(self, path: str | None = None) -> list[WorkflowChanged]:
        """Workflow files added, modified or removed on any branch or tag."""
        return [c for c in self.of_type(WorkflowChanged) if path is None or match(path, c.path)]
