"""Reading a GitHub world's state: every observed table of its store in one read
transaction, joined into the records of `oracle.sinks.github.model`, and the refs and
files of its repositories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from oracle.sinks.github import git, store
from oracle.sinks.github.model import (
    Actor,
    Comment,
    Config,
    Issue,
    JobRecord,
    LabelOn,
    Pull,
    Push,
    Reaction,
    Repository,
    Review,
    ReviewComment,
    Revision,
    Run,
    StepRecord,
    TreeEntry,
    Trigger,
    Write,
)
from oracle.sinks.github.state import GitHubState
from oracle.sinks.github.store import iso


def read_state(
    conn: sa.Connection,
    config: Config,
    refs_of: Callable[[str], dict[str, str]],
    tree_of: Callable[[str, str], dict[str, TreeEntry]],
) -> GitHubState:
    """A world's state from its store (`conn`) and its repositories (`refs_of`, `tree_of`)."""
    with conn.begin():
        rows: dict[str, list[Any]] = {
            table.name: list(conn.execute(sa.select(table).order_by(*table.primary_key.columns)))
            for table in store.OBSERVED
        }
    users = {r.id: r for r in rows["users"]}
    repo_rows, issue_rows = rows["repos"], rows["issues"]

    def login(uid: int | None) -> str | None:
        return users[uid].login if uid is not None and uid in users else None

    def kind(uid: int) -> Any:
        return users[uid].type if uid in users else "User"

    repo_name = {r.id: f"{r.owner}/{r.name}" for r in repo_rows}
    issue_of = {i.id: i for i in issue_rows}
    label_name = {x.id: x.name for x in rows["labels"]}
    labels_by_issue: dict[int, list[str]] = {}
    for x in rows["issue_labels"]:
        labels_by_issue.setdefault(x.issue_id, []).append(label_name.get(x.label_id, "?"))

    def on(issue_id: int) -> dict[str, Any]:
        """The repository and number of the issue or pull request a row is on."""
        i = issue_of[issue_id]
        return {"repo": repo_name[i.repo_id], "number": i.number}

    def by(uid: int) -> dict[str, Any]:
        """A row's author and the author's type."""
        return {"author": login(uid) or "ghost", "author_type": kind(uid)}

    repos: list[Repository] = []
    trees: dict[str, dict[str, TreeEntry]] = {}
    for r in repo_rows:
        full = repo_name[r.id]
        refs = refs_of(full)
        repos.append(
            Repository(
                id=r.id,
                full_name=full,
                private=bool(r.private),
                default_branch=r.default_branch,
                fork_of=repo_name.get(r.fork_of) if r.fork_of is not None else None,
                refs=refs,
            )
        )
        for commit in sorted(set(refs.values())):
            if git.is_commit_sha(commit):
                trees[commit] = tree_of(full, commit)
    issues = [
        Issue(
            id=i.id,
            repo=repo_name[i.repo_id],
            number=i.number,
            title=i.title,
            body=i.body,
            state=i.state,
            state_reason=i.state_reason,
            **by(i.author_id),
            is_pull=bool(i.is_pull),
            locked=bool(i.locked),
            labels=sorted(labels_by_issue.get(i.id, [])),
            created_at=iso(i.created_at) or "",
            updated_at=iso(i.updated_at) or "",
            closed_at=iso(i.closed_at),
            closed_by=login(i.closed_by),
        )
        for i in issue_rows
    ]
    pulls = [
        Pull(
            **on(p.issue_id),
            head_repo=repo_name.get(p.head_repo_id, "?"),
            head_ref=p.head_ref,
            head_sha=p.head_sha,
            base_ref=p.base_ref,
            base_sha=p.base_sha,
            draft=bool(p.draft),
            merged=bool(p.merged),
            merged_at=iso(p.merged_at),
            merged_by=login(p.merged_by),
            merge_sha=p.merge_sha,
        )
        for p in rows["pulls"]
    ]
    comments = [
        Comment(
            id=c.id,
            **on(c.issue_id),
            **by(c.author_id),
            body=c.body,
            created_at=iso(c.created_at) or "",
            updated_at=iso(c.updated_at) or "",
        )
        for c in rows["comments"]
    ]
    reviews = [
        Review(
            id=r.id,
            **on(r.issue_id),
            **by(r.author_id),
            state=r.state,
            body=r.body,
            commit_id=r.commit_id,
            created_at=iso(r.created_at) or "",
            submitted_at=iso(r.submitted_at),
        )
        for r in rows["reviews"]
    ]
    review_comments = [
        ReviewComment(
            id=c.id,
            **on(c.issue_id),
            review_id=c.review_id,
            **by(c.author_id),
            path=c.path,
            line=c.line,
            side=c.side,
            body=c.body,
            commit_id=c.commit_id,
            in_reply_to=c.in_reply_to,
            created_at=iso(c.created_at) or "",
            updated_at=iso(c.updated_at) or "",
        )
        for c in rows["review_comments"]
    ]
    labels = sorted(
        (
            LabelOn(
                **on(x.issue_id),
                label=label_name.get(x.label_id, "?"),
                added_by=login(x.added_by) or "ghost",
                added_at=iso(x.added_at) or "",
            )
            for x in rows["issue_labels"]
        ),
        key=lambda x: (x.repo, x.number, x.label),
    )
    reactions = [
        Reaction(
            id=r.id,
            subject=r.subject,
            subject_id=r.subject_id,
            **by(r.author_id),
            content=r.content,
            created_at=iso(r.created_at) or "",
        )
        for r in rows["reactions"]
    ]
    triggers = [
        Trigger(
            id=x.id,
            event=x.event,
            action=x.action,
            repo=repo_name.get(x.repo_id) if x.repo_id is not None else None,
            subject=x.subject,
            number=x.number,
            actor=login(x.actor_id),
            at=iso(x.at) or "",
        )
        for x in rows["triggers"]
    ]
    steps_of: dict[int, list[StepRecord]] = {}
    for s in rows["steps"]:
        steps_of.setdefault(s.job_id, []).append(
            StepRecord(
                number=s.number,
                name=s.name,
                status=s.status,
                conclusion=s.conclusion,
                agent=bool(s.agent),
            )
        )
    jobs_of: dict[int, list[JobRecord]] = {}
    for j in rows["jobs"]:
        jobs_of.setdefault(j.run_id, []).append(
            JobRecord(
                id=j.id,
                name=j.name,
                status=j.status,
                conclusion=j.conclusion,
                started_at=iso(j.started_at),
                completed_at=iso(j.completed_at),
                steps=sorted(steps_of.get(j.id, []), key=lambda s: s.number),
            )
        )
    runs = [
        Run(
            id=r.id,
            repo=repo_name[r.repo_id],
            workflow=r.workflow,
            name=r.name,
            event=r.event,
            status=r.status,
            conclusion=r.conclusion,
            head_branch=r.head_branch,
            head_sha=r.head_sha,
            pull_number=r.pull_number,
            actor=login(r.actor_id),
            trigger_id=r.trigger_id,
            run_number=r.run_number,
            created_at=iso(r.created_at) or "",
            updated_at=iso(r.updated_at) or "",
            jobs=jobs_of.get(r.id, []),
        )
        for r in rows["runs"]
    ]
    pushes = [
        Push(
            id=p.id,
            repo=repo_name[p.repo_id],
            login=login(p.user_id) or "ghost",
            ref=p.ref,
            old_sha=p.old_sha,
            new_sha=p.new_sha,
            forced=bool(p.forced),
            via=p.via,
            at=iso(p.at) or "",
        )
        for p in rows["pushes"]
    ]
    for p in pushes:  # what a push put up, also when a later push took it down again
        if p.new_sha and p.new_sha not in trees and git.is_commit_sha(p.new_sha):
            trees[p.new_sha] = tree_of(p.repo, p.new_sha)
    writes = [
        Write(
            id=w.id,
            at=iso(w.at) or "",
            login=login(w.user_id) or "ghost",
            action=w.action,
            repo=repo_name.get(w.repo_id) if w.repo_id is not None else None,
            subject=w.subject,
            subject_id=w.subject_id,
        )
        for w in rows["audit"]
    ]
    revisions = [
        Revision(
            id=v.id,
            subject=v.subject,
            subject_id=v.subject_id,
            kind=v.kind,
            **on(v.issue_id),
            **by(v.author_id),
            created_at=iso(v.created_at) or "",
            title=v.title,
            body=v.body,
            replaced_at=iso(v.replaced_at) or "",
            replaced_by=login(v.replaced_by) or "ghost",
        )
        for v in rows["revisions"]
    ]
    actors = [Actor(login=u.login, id=u.id, type=u.type, role=u.role) for u in users.values()]
    return GitHubState(
        config=config,
        actors=tuple(actors),
        repos=tuple(repos),
        trees=trees,
        issues_=tuple(issues),
        pulls_=tuple(pulls),
        comments_=tuple(comments),
        reviews_=tuple(reviews),
        review_comments_=tuple(review_comments),
        labels_=tuple(labels),
        reactions_=tuple(reactions),
        triggers_=tuple(triggers),
        runs_=tuple(runs),
        pushes_=tuple(pushes),
        writes_=tuple(writes),
        revisions_=tuple(revisions),
    )
