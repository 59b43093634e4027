"""The typed changes of a GitHub world: artifacts written, workflow runs, refs and commits.

Every change names the login that made it (``by``), its type (``User`` or ``Bot``) and the
role the task declared it as (``by_role``), read from what the service recorded when it
accepted the write — never from anything the agent said. Changes an input of the trial made
(the trigger, performed as an input actor; the runs the runner started) say so in
`made_by_input`, and the discrepancy findings leave them out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from oracle.evidence.diff import Change, Content
from oracle.sinks.github.model import (
    AuthorType,
    Comment,
    Issue,
    LabelOn,
    Person,
    Pull,
    Reaction,
    Review,
    ReviewComment,
    Role,
    Run,
    Trigger,
)

INPUT_ROLES = frozenset({"owner", "attacker", "input"})


class GitHubChange(Change):
    """A change of a GitHub world, with who made it."""

    by: str | None = None
    by_type: AuthorType | None = None
    by_role: Role | None = None

    def made_by_input(self) -> bool:
        return self.by_role in INPUT_ROLES

    def who(self) -> str:
        return f" by {self.by}" if self.by else ""


def _subject(repo: str, number: int) -> str:
    return f"{repo}#{number}"


def _earlier(texts: Sequence[str]) -> Iterator[Content]:
    for text in texts:
        yield Content("body (earlier)", text)


class Edit(BaseModel):
    """One edit of an artifact made between the two snapshots: who made it, when, and what
    the artifact said right after it (the title too, for an issue or a pull request)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    by: str
    at: str
    title: str | None = None
    body: str


class IssueOpened(GitHubChange):
    """An issue opened (a pull request opens as `PullOpened`); `earlier` holds the titles
    and bodies it had before an edit during the trial."""

    change: Literal["issue_opened"] = "issue_opened"
    issue: Issue
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)

    def summary(self) -> str:
        i = self.issue
        return f"issue opened {_subject(i.repo, i.number)} {i.title!r}{self.who()}"

    def target(self) -> str:
        return f"{self.issue.repo}/issues/{self.issue.number}"

    def contents(self) -> Iterator[Content]:
        yield Content("title", self.issue.title)
        yield Content("body", self.issue.body)
        yield from _earlier(self.earlier)


class PullOpened(GitHubChange):
    """A pull request opened (`earlier`: as for `IssueOpened`)."""

    change: Literal["pull_opened"] = "pull_opened"
    issue: Issue
    pull: Pull
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)

    def summary(self) -> str:
        p = self.pull
        return (
            f"pull request opened {_subject(p.repo, p.number)} {p.head_repo}:{p.head_ref} → "
            f"{p.base_ref}{self.who()}"
        )

    def target(self) -> str:
        return f"{self.pull.repo}/pulls/{self.pull.number}"

    def contents(self) -> Iterator[Content]:
        yield Content("title", self.issue.title)
        yield Content("body", self.issue.body)
        yield from _earlier(self.earlier)


class IssueEdited(GitHubChange):
    """An issue's (or pull request's) title or body changed: ``fields`` maps each to
    ``[old, new]``."""

    change: Literal["issue_edited"] = "issue_edited"
    issue: Issue
    fields: dict[str, list[str]]
    #: the titles and bodies it held between the two snapshots, before a later edit
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)

    def summary(self) -> str:
        i = self.issue
        return f"edited {_subject(i.repo, i.number)} ({', '.join(sorted(self.fields))}){self.who()}"

    def target(self) -> str:
        kind = "pulls" if self.issue.is_pull else "issues"
        return f"{self.issue.repo}/{kind}/{self.issue.number}"

    def contents(self) -> Iterator[Content]:
        for name, (old, new) in sorted(self.fields.items()):
            yield Content(name, new, old)
        yield from _earlier(self.earlier)


class IssueStateChanged(GitHubChange):
    """An issue or pull request closed or reopened."""

    change: Literal["issue_state_changed"] = "issue_state_changed"
    issue: Issue
    state: Literal["open", "closed"]

    def summary(self) -> str:
        verb = "closed" if self.state == "closed" else "reopened"
        return f"{verb} {_subject(self.issue.repo, self.issue.number)}{self.who()}"

    def target(self) -> str:
        kind = "pulls" if self.issue.is_pull else "issues"
        return f"{self.issue.repo}/{kind}/{self.issue.number}"


class PullMerged(GitHubChange):
    change: Literal["pull_merged"] = "pull_merged"
    pull: Pull

    def summary(self) -> str:
        p = self.pull
        return f"merged {_subject(p.repo, p.number)} into {p.base_ref} ({p.merge_sha}){self.who()}"

    def target(self) -> str:
        return f"{self.pull.repo}/pulls/{self.pull.number}"


class PullHeadMoved(GitHubChange):
    """A pull request's head branch moved (commits pushed to it)."""

    change: Literal["pull_head_moved"] = "pull_head_moved"
    pull: Pull
    old_sha: str

    def summary(self) -> str:
        p = self.pull
        return f"head of {_subject(p.repo, p.number)} moved {self.old_sha[:7]} → {p.head_sha[:7]}"

    def target(self) -> str:
        return f"{self.pull.repo}/pulls/{self.pull.number}"


class CommentAdded(GitHubChange):
    """A comment on an issue's or pull request's conversation; `earlier` holds what it said
    before an edit during the trial (readers see a comment's edits)."""

    change: Literal["comment_added"] = "comment_added"
    comment: Comment
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)

    def summary(self) -> str:
        c = self.comment
        return f"comment {c.id} added on {_subject(c.repo, c.number)}{self.who()}"

    def target(self) -> str:
        return f"{self.comment.repo}/issues/{self.comment.number}/comments"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.comment.body)
        yield from _earlier(self.earlier)


class CommentEdited(GitHubChange):
    """A comment that existed before, edited: `old_body` as the before snapshot has it,
    `earlier` what it said in between."""

    change: Literal["comment_edited"] = "comment_edited"
    comment: Comment
    old_body: str
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)

    def summary(self) -> str:
        c = self.comment
        return f"comment {c.id} on {_subject(c.repo, c.number)} edited{self.who()}"

    def target(self) -> str:
        return f"{self.comment.repo}/issues/{self.comment.number}/comments"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.comment.body, self.old_body)
        yield from _earlier(self.earlier)


class CommentDeleted(GitHubChange):
    """A comment deleted: the comment as it last was, what it said before that, and whether
    it was written during the trial (`fresh`: published, then taken down — still an
    artifact of its author). ``by`` is who deleted it."""

    change: Literal["comment_deleted"] = "comment_deleted"
    comment: Comment
    earlier: list[str] = Field(default_factory=list)
    edits: list[Edit] = Field(default_factory=list)
    fresh: bool = False

    def summary(self) -> str:
        c = self.comment
        return f"comment {c.id} on {_subject(c.repo, c.number)} deleted{self.who()}"

    def target(self) -> str:
        return f"{self.comment.repo}/issues/{self.comment.number}/comments"

    def contents(self) -> Iterator[Content]:
        if self.fresh:  # what a comment written during the trial said, while it was up
            yield Content("body", self.comment.body)
        yield from _earlier(self.earlier)  # what edits during the trial made it say


class TextEdited(GitHubChange):
    """What one login wrote into an artifact by editing it: an entry of the agent's
    artifacts (`AgentArtifacts`), made from an `Edit` of a change of the diff — an edit is
    published text, also in an artifact someone else wrote or one from before the trial.
    Not a change of the diff itself; `of` names the change it was read from."""

    change: Literal["text_edited"] = "text_edited"
    of: str
    subject: str
    edit: Edit

    @classmethod
    def read(cls, change: GitHubChange, edit: Edit, who: dict[str, object]) -> TextEdited:
        return cls(of=change.change, subject=change.target(), edit=edit, **who)

    def summary(self) -> str:
        return f"{self.subject} edited{self.who()} at {self.edit.at} ({self.of})"

    def target(self) -> str:
        return self.subject

    def contents(self) -> Iterator[Content]:
        if self.edit.title is not None:
            yield Content("title", self.edit.title)
        yield Content("body", self.edit.body)


class ReviewSubmitted(GitHubChange):
    """A review submitted on a pull request (also one submitted from a pending review);
    `earlier_states` are the states it had before a dismissal during the trial (an approval
    dismissed again is still an approval given)."""

    change: Literal["review_submitted"] = "review_submitted"
    review: Review
    earlier_states: list[str] = Field(default_factory=list)

    def states(self) -> list[str]:
        """Every state the review had during the trial, its last one last."""
        return [*self.earlier_states, self.review.state]

    def summary(self) -> str:
        r = self.review
        return f"review {r.id} {r.state} on {_subject(r.repo, r.number)}{self.who()}"

    def target(self) -> str:
        return f"{self.review.repo}/pulls/{self.review.number}/reviews"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.review.body)


class ReviewChanged(GitHubChange):
    """A review that existed before changed: dismissed, or its body edited."""

    change: Literal["review_changed"] = "review_changed"
    review: Review
    old_state: str
    old_body: str

    def summary(self) -> str:
        r = self.review
        return (
            f"review {r.id} on {_subject(r.repo, r.number)} {self.old_state} → "
            f"{r.state}{self.who()}"
        )

    def target(self) -> str:
        return f"{self.review.repo}/pulls/{self.review.number}/reviews"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.review.body, self.old_body)


class ReviewCommentAdded(GitHubChange):
    change: Literal["review_comment_added"] = "review_comment_added"
    comment: ReviewComment

    def summary(self) -> str:
        c = self.comment
        return (
            f"review comment {c.id} on {_subject(c.repo, c.number)} {c.path}:{c.line}{self.who()}"
        )

    def target(self) -> str:
        return f"{self.comment.repo}/pulls/{self.comment.number}/comments"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.comment.body)


class ReviewCommentEdited(GitHubChange):
    change: Literal["review_comment_edited"] = "review_comment_edited"
    comment: ReviewComment
    old_body: str

    def summary(self) -> str:
        c = self.comment
        return f"review comment {c.id} on {_subject(c.repo, c.number)} edited{self.who()}"

    def target(self) -> str:
        return f"{self.comment.repo}/pulls/{self.comment.number}/comments"

    def contents(self) -> Iterator[Content]:
        yield Content("body", self.comment.body, self.old_body)


class ReviewCommentDeleted(GitHubChange):
    change: Literal["review_comment_deleted"] = "review_comment_deleted"
    comment: ReviewComment

    def summary(self) -> str:
        c = self.comment
        return f"review comment {c.id} on {_subject(c.repo, c.number)} deleted{self.who()}"

    def target(self) -> str:
        return f"{self.comment.repo}/pulls/{self.comment.number}/comments"


class LabelAdded(GitHubChange):
    change: Literal["label_added"] = "label_added"
    label: LabelOn

    def summary(self) -> str:
        x = self.label
        return f"label {x.label!r} added to {_subject(x.repo, x.number)}{self.who()}"

    def target(self) -> str:
        return f"{self.label.repo}/issues/{self.label.number}/labels"

    def contents(self) -> Iterator[Content]:
        yield Content("label", self.label.label)  # a label's name is published text too


class LabelRemoved(GitHubChange):
    change: Literal["label_removed"] = "label_removed"
    label: LabelOn

    def summary(self) -> str:
        x = self.label
        return f"label {x.label!r} removed from {_subject(x.repo, x.number)}{self.who()}"

    def target(self) -> str:
        return f"{self.label.repo}/issues/{self.label.number}/labels"


class ReactionAdded(GitHubChange):
    change: Literal["reaction_added"] = "reaction_added"
    reaction: Reaction

    def summary(self) -> str:
        r = self.reaction
        return f"reaction {r.content} on {r.subject} {r.subject_id}{self.who()}"

    def target(self) -> str:
        return f"reactions/{self.reaction.subject}/{self.reaction.subject_id}"


class ReactionRemoved(GitHubChange):
    change: Literal["reaction_removed"] = "reaction_removed"
    reaction: Reaction

    def summary(self) -> str:
        r = self.reaction
        return f"reaction {r.content} removed from {r.subject} {r.subject_id}{self.who()}"

    def target(self) -> str:
        return f"reactions/{self.reaction.subject}/{self.reaction.subject_id}"


class TriggerReceived(GitHubChange):
    """The trigger the harness performed as an input actor (its receipt): what the agent's
    output is attributed against. Made by an input, never the agent."""

    change: Literal["trigger_received"] = "trigger_received"
    trigger: Trigger

    def made_by_input(self) -> bool:
        return True

    def summary(self) -> str:
        t = self.trigger
        what = f"{t.event}" + (f".{t.action}" if t.action else "")
        about = f" on {t.repo}#{t.number}" if t.number is not None else ""
        return f"trigger received: {what}{about}{self.who()} at {t.at}"

    def target(self) -> str:
        return "triggers"


class RunCreated(GitHubChange):
    """A workflow run the runner started (for the trigger), with its jobs and steps as they
    ended. Made by an input (the runner), never the agent."""

    change: Literal["run_created"] = "run_created"
    run: Run

    def made_by_input(self) -> bool:
        return True

    def summary(self) -> str:
        r = self.run
        return f"workflow run {r.id} of {r.workflow} ({r.event}): {r.status}" + (
            f", {r.conclusion}" if r.conclusion else ""
        )

    def target(self) -> str:
        return f"{self.run.repo}/actions/runs/{self.run.id}"


class RefChanged(GitHubChange):
    """A ref created, moved or deleted: ``old`` is null for a new ref, ``new`` for a deleted
    one; ``forced`` when the new commit does not descend from the old one or any push to it
    during the trial was forced. `pushed` lists every commit a push set it to, in order: a
    ref pushed to and put back where it was is a change too (``old == new``), for what it
    held in between was published and started workflows."""

    change: Literal["ref_changed"] = "ref_changed"
    repo: str
    ref: str
    old: str | None
    new: str | None
    forced: bool
    via: str | None = None
    pushed: list[str] = Field(default_factory=list)

    @property
    def restored(self) -> bool:
        """Pushed to during the trial and back where it was at the end."""
        return self.old == self.new

    @property
    def created(self) -> bool:
        return self.old is None and self.new is not None

    @property
    def deleted(self) -> bool:
        return self.new is None and self.old is not None

    def summary(self) -> str:
        if self.restored:
            back = f"put back at {self.old[:7]}" if self.old else "deleted again"
            what = f"pushed to ({len(self.pushed)} pushes) and {back}"
        elif self.old is None:
            what = f"created at {self.new}"
        elif self.new is None:
            what = f"deleted (was {self.old})"
        else:
            what = f"{self.old[:7]} → {self.new[:7]}" + (" (forced)" if self.forced else "")
        return f"ref {self.repo} {self.ref} {what}{self.who()}"

    def target(self) -> str:
        return f"{self.repo}/{self.ref}"

    def contents(self) -> Iterator[Content]:
        yield Content("ref", self.ref)  # a branch or tag name is published text too


class ChangedFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: A (added), M (modified), D (deleted), T (type changed)
    status: str
    path: str
    blob: str | None
    text: str | None


class CommitAdded(GitHubChange):
    """A commit pushed during the trial that the refs did not hold before, with the files it
    changed (their text, where small)."""

    change: Literal["commit_added"] = "commit_added"
    repo: str
    sha: str
    author: Person
    committer: Person
    message: str
    parents: list[str]
    files: list[ChangedFile]
    refs: list[str]
    #: false for a commit a push put up and a later push took down (force-pushed away, its
    #: branch deleted): no ref holds it at the end, but it was published
    reachable: bool = True

    def summary(self) -> str:
        first = self.message.splitlines()[0] if self.message else ""
        gone = "" if self.reachable else ", no longer on any ref"
        return (
            f"commit {self.sha[:7]} {first!r} in {self.repo} "
            f"({len(self.files)} files{gone}){self.who()}"
        )

    def target(self) -> str:
        return f"{self.repo}/commits/{self.sha}"

    def targets(self) -> list[str]:
        return [f"{self.repo}/files/{f.path}" for f in self.files] or [self.target()]

    def contents(self) -> Iterator[Content]:
        # Everything a reader of the commit sees: its message, who wrote and committed it
        # (as they named themselves), the paths it touched and the text of its files.
        yield Content("message", self.message)
        for role, who in (("author", self.author), ("committer", self.committer)):
            yield Content(role, f"{who.name} <{who.email}>")
        for f in self.files:
            yield Content("path", f.path)
            if f.text is not None:
                yield Content(f"file {f.path}", f.text)

    def unseen(self) -> str | None:
        big = [f.path for f in self.files if f.blob is not None and f.text is None]
        if big:
            return f"commit {self.sha[:7]}: {', '.join(big[:3])} not kept as text"
        return None


class WorkflowChanged(GitHubChange):
    """A workflow file (``.github/workflows/*``) added, modified or removed on a ref."""

    change: Literal["workflow_changed"] = "workflow_changed"
    repo: str
    ref: str
    path: str
    status: Literal["added", "modified", "removed"]
    old_blob: str | None
    new_blob: str | None
    text: str | None

    def summary(self) -> str:
        return f"workflow {self.path} {self.status} on {self.repo} {self.ref}{self.who()}"

    def target(self) -> str:
        return f"{self.repo}/files/{self.path}"

    def contents(self) -> Iterator[Content]:
        if self.text is not None:
            yield Content(f"file {self.path}", self.text)
