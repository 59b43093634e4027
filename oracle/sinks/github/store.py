"""The GitHub world's database: the tables the local service writes and the sink reads.

One schema (SQLAlchemy Core), so that the store lives in SQLite (the default: a file per
sandbox, restored from a template before every trial) or PostgreSQL alike. Times are seconds
since the epoch (a float, microseconds kept): attribution compares them with the trigger's.
Tokens are kept in their own table, which no snapshot reads.
"""

from __future__ import annotations

import datetime as _dt

import sqlalchemy as sa

metadata = sa.MetaData()

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("login", sa.Text, nullable=False, unique=True),
    # "User" or "Bot", as GitHub's API names the author type.
    sa.Column("type", sa.Text, nullable=False),
    # owner, attacker, input, agent or other: what the task declared the login as.
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("email", sa.Text, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("token", sa.Text, primary_key=True),
    sa.Column("user_id", sa.Integer, nullable=False),
)

repos = sa.Table(
    "repos",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("private", sa.Boolean, nullable=False),
    sa.Column("default_branch", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("fork_of", sa.Integer, nullable=True),
    sa.UniqueConstraint("owner", "name"),
)

collaborators = sa.Table(
    "collaborators",
    metadata,
    sa.Column("repo_id", sa.Integer, primary_key=True),
    sa.Column("user_id", sa.Integer, primary_key=True),
    # read, triage, write, maintain or admin
    sa.Column("permission", sa.Text, nullable=False),
)

issues = sa.Table(
    "issues",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("repo_id", sa.Integer, nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),  # open, closed
    sa.Column("state_reason", sa.Text, nullable=True),
    sa.Column("author_id", sa.Integer, nullable=False),
    sa.Column("is_pull", sa.Boolean, nullable=False),
    sa.Column("locked", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("closed_at", sa.Float, nullable=True),
    sa.Column("closed_by", sa.Integer, nullable=True),
    sa.UniqueConstraint("repo_id", "number"),
)

pulls = sa.Table(
    "pulls",
    metadata,
    sa.Column("issue_id", sa.Integer, primary_key=True),
    sa.Column("head_repo_id", sa.Integer, nullable=False),
    sa.Column("head_ref", sa.Text, nullable=False),
    sa.Column("head_sha", sa.Text, nullable=False),
    sa.Column("base_ref", sa.Text, nullable=False),
    sa.Column("base_sha", sa.Text, nullable=False),
    sa.Column("draft", sa.Boolean, nullable=False),
    sa.Column("merged", sa.Boolean, nullable=False),
    sa.Column("merged_at", sa.Float, nullable=True),
    sa.Column("merged_by", sa.Integer, nullable=True),
    sa.Column("merge_sha", sa.Text, nullable=True),
)

comments = sa.Table(
    "comments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("issue_id", sa.Integer, nullable=False),
    sa.Column("author_id", sa.Integer, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

reviews = sa.Table(
    "reviews",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("issue_id", sa.Integer, nullable=False),
    sa.Column("author_id", sa.Integer, nullable=False),
    # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED or PENDING
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("commit_id", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("submitted_at", sa.Float, nullable=True),
)

review_comments = sa.Table(
    "review_comments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("issue_id", sa.Integer, nullable=False),
    sa.Column("review_id", sa.Integer, nullable=True),
    sa.Column("author_id", sa.Integer, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("line", sa.Integer, nullable=True),
    sa.Column("side", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("commit_id", sa.Text, nullable=False),
    sa.Column("in_reply_to", sa.Integer, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

labels = sa.Table(
    "labels",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("repo_id", sa.Integer, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("color", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.UniqueConstraint("repo_id", "name"),
)

issue_labels = sa.Table(
    "issue_labels",
    metadata,
    sa.Column("issue_id", sa.Integer, primary_key=True),
    sa.Column("label_id", sa.Integer, primary_key=True),
    sa.Column("added_by", sa.Integer, nullable=False),
    sa.Column("added_at", sa.Float, nullable=False),
)

reactions = sa.Table(
    "reactions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    # issue, comment or review_comment
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("subject_id", sa.Integer, nullable=False),
    sa.Column("author_id", sa.Integer, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

triggers = sa.Table(
    "triggers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=True),
    sa.Column("repo_id", sa.Integer, nullable=True),
    # issue, pull or none; the number of the issue or pull request the event is about
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("number", sa.Integer, nullable=True),
    sa.Column("actor_id", sa.Integer, nullable=True),
    sa.Column("at", sa.Float, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("repo_id", sa.Integer, nullable=False),
    sa.Column("workflow", sa.Text, nullable=False),  # the file, .github/workflows/x.yml
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    # queued, in_progress, completed (and waiting for a run that needs approval)
    sa.Column("status", sa.Text, nullable=False),
    # success, failure, cancelled, skipped, action_required or null while it runs
    sa.Column("conclusion", sa.Text, nullable=True),
    sa.Column("head_branch", sa.Text, nullable=True),
    sa.Column("head_sha", sa.Text, nullable=False),
    sa.Column("pull_number", sa.Integer, nullable=True),
    sa.Column("actor_id", sa.Integer, nullable=True),
    sa.Column("trigger_id", sa.Integer, nullable=True),
    sa.Column("run_number", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("conclusion", sa.Text, nullable=True),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("completed_at", sa.Float, nullable=True),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column("job_id", sa.Integer, primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("conclusion", sa.Text, nullable=True),
    # a recognised agent step (a known agent action, or a step the task names)
    sa.Column("agent", sa.Boolean, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("completed_at", sa.Float, nullable=True),
)

pushes = sa.Table(
    "pushes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("repo_id", sa.Integer, nullable=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("ref", sa.Text, nullable=False),
    sa.Column("old_sha", sa.Text, nullable=True),  # null: the ref was created
    sa.Column("new_sha", sa.Text, nullable=True),  # null: the ref was deleted
    sa.Column("forced", sa.Boolean, nullable=False),
    sa.Column("via", sa.Text, nullable=False),  # git (a push) or api (contents, refs, merge)
    sa.Column("at", sa.Float, nullable=False),
)

revisions = sa.Table(
    "revisions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    # comment, issue or review: what was edited, deleted or dismissed
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("subject_id", sa.Integer, nullable=False),
    # edit (the text it held until then), delete (all it held), state (a review's state)
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("issue_id", sa.Integer, nullable=False),
    sa.Column("author_id", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("title", sa.Text, nullable=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("replaced_at", sa.Float, nullable=False),
    sa.Column("replaced_by", sa.Integer, nullable=False),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    # what was done: issue.edit, issue.close, comment.edit, label.add, pull.merge …
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("repo_id", sa.Integer, nullable=True),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("subject_id", sa.Integer, nullable=True),
)

#: The tables a snapshot reads: every one but the tokens (secrets, which no write of the
#: service changes) and the collaborators (the permissions the task declared, which none
#: changes either).
OBSERVED = tuple(t for t in metadata.sorted_tables if t.name not in ("tokens", "collaborators"))


def iso(seconds: float | None) -> str | None:
    """Seconds since the epoch as the state writes a time: ISO 8601 in UTC with microseconds
    (``2026-12-02T10:04:05.123456Z``), so that times compare as text."""
    if seconds is None:
        return None
    moment = _dt.datetime.fromtimestamp(seconds, _dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def api_time(seconds: float | None) -> str | None:
    """A time as GitHub's API writes it: to the second (``2026-12-02T10:04:05Z``)."""
    if seconds is None:
        return None
    return _dt.datetime.fromtimestamp(seconds, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
