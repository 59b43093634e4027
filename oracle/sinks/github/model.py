"""The records of a GitHub world's state: who is who, and every artifact, as a snapshot keeps
them.

Every artifact names its author by login with the author's type (``User`` or ``Bot``), and
its times as ISO 8601 text in UTC with microseconds (`oracle.sinks.github.store.iso`), so
that times compare as text. Records are frozen: a predicate reads them, never edits them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from oracle.base.frozen import ReadOnlyModel

#: Files up to this size keep their text in a snapshot and in a commit's changed files.
TEXT_LIMIT = 64 * 1024

AuthorType = Literal["User", "Bot"]
#: What a task declares a login as: the repository's owner and the attacker are input actors
#: (as is any other login declared with ``input=True``); agents are the logins whose fresh
#: output is the agent's; anyone else is a bystander.
Role = Literal["owner", "attacker", "input", "agent", "other"]


class Record(ReadOnlyModel):
    """A record of a GitHub world's state: read-only all the way down, as changes are."""


class Actor(Record):
    """A login of the world and what the task declared it as."""

    login: str
    id: int
    type: AuthorType
    role: Role


class Issue(Record):
    """An issue, or the issue side of a pull request (``is_pull``)."""

    id: int
    repo: str
    number: int
    title: str
    body: str
    state: Literal["open", "closed"]
    state_reason: str | None
    author: str
    author_type: AuthorType
    is_pull: bool
    locked: bool
    labels: list[str]
    created_at: str
    updated_at: str
    closed_at: str | None
    closed_by: str | None


class Pull(Record):
    """The pull-request side: its branches and whether it was merged."""

    repo: str
    number: int
    head_repo: str
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    draft: bool
    merged: bool
    merged_at: str | None
    merged_by: str | None
    merge_sha: str | None


class Comment(Record):
    """A comment on an issue or a pull request's conversation."""

    id: int
    repo: str
    number: int
    author: str
    author_type: AuthorType
    body: str
    created_at: str
    updated_at: str


class Review(Record):
    """A pull-request review: APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED or PENDING
    (not submitted yet: ``submitted_at`` is null)."""

    id: int
    repo: str
    number: int
    author: str
    author_type: AuthorType
    state: str
    body: str
    commit_id: str
    created_at: str
    submitted_at: str | None


class ReviewComment(Record):
    """A comment on a line of a pull request's diff."""

    id: int
    repo: str
    number: int
    review_id: int | None
    author: str
    author_type: AuthorType
    path: str
    line: int | None
    side: str
    body: str
    commit_id: str
    in_reply_to: int | None
    created_at: str
    updated_at: str


class LabelOn(Record):
    """A label on an issue or pull request, with who put it there and when."""

    repo: str
    number: int
    label: str
    added_by: str
    added_at: str


class Reaction(Record):
    id: int
    subject: Literal["issue", "comment", "review_comment"]
    subject_id: int
    author: str
    author_type: AuthorType
    content: str
    created_at: str


class Trigger(Record):
    """A trigger receipt: the event the harness performed as an input actor to start the
    agent (``direct``: the agent was started without one), and when."""

    id: int
    event: str
    action: str | None
    repo: str | None
    subject: Literal["issue", "pull", "none"]
    number: int | None
    actor: str | None
    at: str


class StepRecord(Record):
    number: int
    name: str
    status: str
    conclusion: str | None
    agent: bool


class JobRecord(Record):
    id: int
    name: str
    status: str
    conclusion: str | None
    started_at: str | None
    completed_at: str | None
    steps: list[StepRecord]


class Run(Record):
    """A workflow run, with its jobs and their steps."""

    id: int
    repo: str
    workflow: str
    name: str
    event: str
    status: str
    conclusion: str | None
    head_branch: str | None
    head_sha: str
    pull_number: int | None
    actor: str | None
    trigger_id: int | None
    run_number: int
    created_at: str
    updated_at: str
    jobs: list[JobRecord]


class Push(Record):
    """One ref update and the login that made it (a ``git push``, or a write through the API:
    ``via`` says which)."""

    id: int
    repo: str
    login: str
    ref: str
    old_sha: str | None
    new_sha: str | None
    forced: bool
    via: str
    at: str


class Person(Record):
    """A commit's author or committer, as the commit names them (anyone can write any
    name: who pushed it is the change's ``by``)."""

    name: str
    email: str
    date: str


class Revision(Record):
    """What an artifact held before someone replaced it: an edit's earlier text (``edit``),
    a deleted artifact whole (``delete``), a review's earlier state (``state``, in
    ``title``). GitHub shows readers an artifact's edits; whatever was published once stays
    evidence."""

    id: int
    subject: Literal["comment", "issue", "review"]
    subject_id: int
    kind: Literal["edit", "delete", "state"]
    repo: str
    number: int
    author: str
    author_type: AuthorType
    created_at: str
    title: str | None
    body: str
    replaced_at: str
    replaced_by: str


class Write(Record):
    """One write the service accepted, with the login that made it: the audit log from which
    edits, closes, merges and label changes are attributed (creations carry their author)."""

    id: int
    at: str
    login: str
    action: str
    repo: str | None
    subject: str
    subject_id: int | None


class TreeEntry(Record):
    """A file of a commit's tree; ``text`` where it is UTF-8 and within the text limit."""

    blob: str
    mode: str
    size: int
    text: str | None


class Repository(Record):
    id: int
    full_name: str
    private: bool
    default_branch: str
    fork_of: str | None
    #: ref name (``refs/heads/main``) → the commit it points at
    refs: dict[str, str]


class WorkflowSummary(Record):
    """What attribution needs of a workflow file: the events it accepts."""

    repo: str
    path: str
    name: str
    events: list[str]


class Config(Record):
    """What the task declared that attribution reads: the agent logins, the input actors, the
    trigger it declares (its kind, and the text it plants), and the workflows."""

    agents: list[str]
    inputs: list[str]
    trigger: dict[str, str | int | None] | None = None
    workflows: list[WorkflowSummary] = Field(default_factory=list)
    text_limit: int = Field(TEXT_LIMIT, description="files up to this size keep their text")
