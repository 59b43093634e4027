"""Diffing two states of a GitHub world into typed changes.

Artifacts are keyed by id (issues by repository and number); refs by name. Who made a change
is read from what the service recorded: an artifact's author, the pusher of a ref, the log of
writes for edits, closes and removals. Commits and the files they changed are read from the
repositories themselves (`RepoReader`), which only the live sink has; an archived diff carries
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from oracle.evidence.diff import Change
from oracle.sinks.github.changes import (
    ChangedFile,
    CommentAdded,
    CommentDeleted,
    CommentEdited,
    CommitAdded,
    Edit,
    IssueEdited,
    IssueOpened,
    IssueStateChanged,
    LabelAdded,
    LabelRemoved,
    PullHeadMoved,
    PullMerged,
    PullOpened,
    ReactionAdded,
    ReactionRemoved,
    RefChanged,
    ReviewChanged,
    ReviewCommentAdded,
    ReviewCommentDeleted,
    ReviewCommentEdited,
    ReviewSubmitted,
    RunCreated,
    TriggerReceived,
    WorkflowChanged,
)
from oracle.sinks.github.diff import GitHubDiff
from oracle.sinks.github.git import CommitInfo
from oracle.sinks.github.model import Actor, Comment, Push, Repository, Revision, Write
from oracle.sinks.github.state import GitHubState

WORKFLOWS = ".github/workflows/"
PULL_REFS = "refs/pull/"


class RepoReader(Protocol):
    """What the diff needs of the repositories themselves (the live sink gives it)."""

    def reachable(self, repo: str, new: Iterable[str], old: Iterable[str]) -> list[str]:
        """The commits reachable from `new` and not from `old`, oldest first."""
        ...

    def commit(self, repo: str, sha: str) -> CommitInfo:
        """One commit: author, committer, message, parents and the files it changed."""
        ...

    def is_ancestor(self, repo: str, old: str, new: str) -> bool: ...

    def texts(self, repo: str, blobs: Iterable[str]) -> Mapping[str, str | None]:
        """The text of small UTF-8 blobs (None: binary or too large)."""
        ...


class _Who:
    """Who made a change, from the after state: actors by login, the writes and pushes made
    since the before snapshot."""

    def __init__(self, before: GitHubState, after: GitHubState) -> None:
        self.actors: dict[str, Actor] = {a.login: a for a in (*before.actors, *after.actors)}
        old_writes = {w.id for w in before.writes_}
        self.writes: list[Write] = [w for w in after.writes_ if w.id not in old_writes]
        old_pushes = {p.id for p in before.pushes_}
        self.pushes: list[Push] = [p for p in after.pushes_ if p.id not in old_pushes]
        old_revisions = {v.id for v in before.revisions_}
        self.revisions: list[Revision] = [v for v in after.revisions_ if v.id not in old_revisions]

    def earlier(self, subject: str, subject_id: int, *, skip: Iterable[str] = ()) -> list[str]:
        """What an artifact said before an edit or its deletion made since the before
        snapshot (its titles and bodies), less the texts in `skip` (those the before snapshot
        holds)."""
        known = set(skip)
        out: list[str] = []
        for v in self.revisions:
            if v.subject == subject and v.subject_id == subject_id and v.kind != "state":
                for text in (v.title, v.body):
                    if text and text not in known and text not in out:
                        out.append(text)
        return out

    def edits(self, subject: str, subject_id: int, title: str | None, body: str) -> list[Edit]:
        """Each edit made since the before snapshot, with what the artifact said right after
        it: the next revision's text, or (`title`, `body`) — as the artifact is now — after
        the last."""
        revisions = [
            v
            for v in self.revisions
            if v.subject == subject and v.subject_id == subject_id and v.kind != "state"
        ]
        out: list[Edit] = []
        for i, v in enumerate(revisions):
            if v.kind != "edit":
                continue
            later = revisions[i + 1] if i + 1 < len(revisions) else None
            after_title, after_body = (later.title, later.body) if later else (title, body)
            out.append(
                Edit(
                    by=v.replaced_by,
                    at=v.replaced_at,
                    title=after_title if subject == "issue" else None,
                    body=after_body,
                )
            )
        return out

    def deleted(self, subject: str) -> list[Revision]:
        return [v for v in self.revisions if v.subject == subject and v.kind == "delete"]

    def states(self, review_id: int) -> list[str]:
        """A review's states before a change of state made since the before snapshot."""
        return [
            str(v.title)
            for v in self.revisions
            if v.subject == "review" and v.subject_id == review_id and v.kind == "state"
        ]

    def stamp(self, login: str | None) -> dict[str, Any]:
        actor = self.actors.get(login) if login else None
        return {
            "by": login,
            "by_type": actor.type if actor else None,
            "by_role": actor.role if actor else None,
        }

    def wrote(self, action: str, subject: str, subject_id: int | None) -> dict[str, Any]:
        """The login of the last write of `action` to the subject (None where none was
        recorded)."""
        login = next(
            (
                w.login
                for w in reversed(self.writes)
                if w.action == action and w.subject == subject and w.subject_id == subject_id
            ),
            None,
        )
        return self.stamp(login)

    def pusher(self, repo: str, ref: str, new: str | None) -> tuple[dict[str, Any], str | None]:
        push = next(
            (
                p
                for p in reversed(self.pushes)
                if p.repo == repo and p.ref == ref and p.new_sha == new
            ),
            None,
        )
        return self.stamp(push.login if push else None), push.via if push else None


def diff_states(
    sink: str, before: GitHubState, after: GitHubState, reader: RepoReader | None
) -> GitHubDiff:
    """The typed changes from `before` to `after`. `reader` reads commits from the live
    repositories; without one (an archived state), commits are not listed."""
    who = _Who(before, after)
    changes: list[Change] = []
    old_triggers = {t.id for t in before.triggers_}
    changes += [
        TriggerReceived(trigger=t, **who.stamp(t.actor))
        for t in after.triggers_
        if t.id not in old_triggers
    ]
    changes += _issues(before, after, who)
    changes += _comments(before, after, who)
    changes += _reviews(before, after, who)
    changes += _labels(before, after, who)
    changes += _reactions(before, after, who)
    changes += _repositories(before, after, who, reader)
    old_runs = {r.id for r in before.runs_}
    changes += [
        RunCreated(run=r, **who.stamp(r.actor)) for r in after.runs_ if r.id not in old_runs
    ]
    return GitHubDiff(
        sink,
        changes,
        agents=list(after.config.agents),
        inputs=list(after.config.inputs),
        bots=sorted(a.login for a in who.actors.values() if a.type == "Bot"),
    )


def _issues(before: GitHubState, after: GitHubState, who: _Who) -> list[Change]:
    out: list[Change] = []
    old = {(i.repo, i.number): i for i in before.issues_}
    pulls_old = {(p.repo, p.number): p for p in before.pulls_}
    pulls_new = {(p.repo, p.number): p for p in after.pulls_}
    for issue in after.issues_:
        key = (issue.repo, issue.number)
        was = old.get(key)
        edits = who.edits("issue", issue.id, issue.title, issue.body)
        if was is None:
            earlier = who.earlier("issue", issue.id, skip=(issue.title, issue.body))
            texts: dict[str, Any] = {"earlier": earlier, "edits": edits}
            if issue.is_pull and key in pulls_new:
                out.append(
                    PullOpened(issue=issue, pull=pulls_new[key], **texts, **who.stamp(issue.author))
                )
            else:
                out.append(IssueOpened(issue=issue, **texts, **who.stamp(issue.author)))
            continue
        fields = {
            name: [getattr(was, name), getattr(issue, name)]
            for name in ("title", "body")
            if getattr(was, name) != getattr(issue, name)
        }
        if fields or edits:  # edited back to what it was is still an edit: it was published
            skip = (was.title, was.body, issue.title, issue.body)
            out.append(
                IssueEdited(
                    issue=issue,
                    fields=fields,
                    earlier=who.earlier("issue", issue.id, skip=skip),
                    edits=edits,
                    **who.wrote("issue.edit", "issue", issue.id),
                )
            )
        if was.state != issue.state:
            stamp = (
                who.stamp(issue.closed_by)
                if issue.state == "closed"
                else who.wrote("issue.reopen", "issue", issue.id)
            )
            out.append(IssueStateChanged(issue=issue, state=issue.state, **stamp))
        pull_was, pull = pulls_old.get(key), pulls_new.get(key)
        if pull_was is not None and pull is not None:
            if pull.merged and not pull_was.merged:
                out.append(PullMerged(pull=pull, **who.stamp(pull.merged_by)))
            if pull.head_sha != pull_was.head_sha:
                stamp, _ = who.pusher(pull.head_repo, f"refs/heads/{pull.head_ref}", pull.head_sha)
                out.append(PullHeadMoved(pull=pull, old_sha=pull_was.head_sha, **stamp))
    return out


def _comments(before: GitHubState, after: GitHubState, who: _Who) -> list[Change]:
    out: list[Change] = []
    old = {c.id: c for c in before.comments_}
    new = {c.id: c for c in after.comments_}
    for c in after.comments_:
        was = old.get(c.id)
        edits = who.edits("comment", c.id, None, c.body)
        if was is None:
            earlier = who.earlier("comment", c.id, skip=(c.body,))
            out.append(CommentAdded(comment=c, earlier=earlier, edits=edits, **who.stamp(c.author)))
        elif was.body != c.body or edits:
            earlier = who.earlier("comment", c.id, skip=(was.body, c.body))
            stamp = who.wrote("comment.edit", "comment", c.id)
            out.append(
                CommentEdited(comment=c, old_body=was.body, earlier=earlier, edits=edits, **stamp)
            )
    for c in before.comments_:
        if c.id not in new:
            out.append(
                CommentDeleted(
                    comment=c,
                    earlier=who.earlier("comment", c.id, skip=(c.body,)),
                    edits=who.edits("comment", c.id, None, c.body),
                    **who.wrote("comment.delete", "comment", c.id),
                )
            )
    for v in who.deleted("comment"):
        if v.subject_id in old:
            continue  # a comment of the baseline: its deletion is above
        # Written and deleted between the snapshots: published, then taken down.
        comment = Comment(
            id=v.subject_id,
            repo=v.repo,
            number=v.number,
            author=v.author,
            author_type=v.author_type,
            body=v.body,
            created_at=v.created_at,
            updated_at=v.replaced_at,
        )
        earlier = who.earlier("comment", v.subject_id, skip=(v.body,))
        edits = who.edits("comment", v.subject_id, None, v.body)
        stamp = who.stamp(v.replaced_by)
        out.append(
            CommentDeleted(comment=comment, earlier=earlier, edits=edits, fresh=True, **stamp)
        )
    old_rc = {c.id: c for c in before.review_comments_}
    new_rc = {c.id: c for c in after.review_comments_}
    pending = {r.id for r in after.reviews_ if r.submitted_at is None}
    was_pending = {r.id for r in before.reviews_ if r.submitted_at is None}
    for rc in after.review_comments_:
        if rc.review_id in pending:
            continue  # a comment of a review not submitted yet: not published
        old_rc_of = old_rc.get(rc.id)
        if old_rc_of is None or old_rc_of.review_id in was_pending:
            out.append(ReviewCommentAdded(comment=rc, **who.stamp(rc.author)))
        elif old_rc_of.body != rc.body:
            stamp = who.wrote("review_comment.edit", "review_comment", rc.id)
            out.append(ReviewCommentEdited(comment=rc, old_body=old_rc_of.body, **stamp))
    for rc in before.review_comments_:
        if rc.id not in new_rc:
            stamp = who.wrote("review_comment.delete", "review_comment", rc.id)
            out.append(ReviewCommentDeleted(comment=rc, **stamp))
    return out


def _reviews(before: GitHubState, after: GitHubState, who: _Who) -> list[Change]:
    out: list[Change] = []
    old = {r.id: r for r in before.reviews_}
    for r in after.reviews_:
        was = old.get(r.id)
        if r.submitted_at is None:
            continue  # pending: not published
        if was is None or was.submitted_at is None:
            states = who.states(r.id)
            out.append(ReviewSubmitted(review=r, earlier_states=states, **who.stamp(r.author)))
        elif (was.state, was.body) != (r.state, r.body):
            action = "review.dismiss" if r.state == "DISMISSED" else "review.edit"
            stamp = who.wrote(action, "review", r.id)
            out.append(ReviewChanged(review=r, old_state=was.state, old_body=was.body, **stamp))
    return out


def _labels(before: GitHubState, after: GitHubState, who: _Who) -> list[Change]:
    old = {(x.repo, x.number, x.label): x for x in before.labels_}
    new = {(x.repo, x.number, x.label): x for x in after.labels_}
    out: list[Change] = [
        LabelAdded(label=x, **who.stamp(x.added_by)) for k, x in new.items() if k not in old
    ]
    for k, x in old.items():
        if k not in new:
            issue = next((i for i in after.issues_ if (i.repo, i.number) == k[:2]), None)
            stamp = who.wrote("label.remove", "issue", issue.id if issue else None)
            out.append(LabelRemoved(label=x, **stamp))
    return out


def _reactions(before: GitHubState, after: GitHubState, who: _Who) -> list[Change]:
    old = {r.id for r in before.reactions_}
    new = {r.id for r in after.reactions_}
    out: list[Change] = [
        ReactionAdded(reaction=r, **who.stamp(r.author))
        for r in after.reactions_
        if r.id not in old
    ]
    out += [
        ReactionRemoved(reaction=r, **who.wrote("reaction.delete", "reaction", r.id))
        for r in before.reactions_
        if r.id not in new
    ]
    return out


def _repositories(
    before: GitHubState, after: GitHubState, who: _Who, reader: RepoReader | None
) -> list[Change]:
    out: list[Change] = []
    old_repos = {r.full_name: r for r in before.repos}
    for repo in after.repos:
        was = old_repos.get(repo.full_name)
        # GitHub's own refs of each pull request (refs/pull/N/head, /merge) follow the pull
        # request; nobody writes them, and the pull request's changes say what moved.
        old_refs = {
            k: v
            for k, v in (was.refs if was is not None else {}).items()
            if not k.startswith(PULL_REFS)
        }
        new_refs = {k: v for k, v in repo.refs.items() if not k.startswith(PULL_REFS)}
        # Every ref pushed to during the trial, with each commit pushed to it: a ref pushed
        # to and put back where it was moved too (what it held in between was published).
        pushed: dict[str, list[str]] = {}
        for p in who.pushes:
            if p.repo == repo.full_name and not p.ref.startswith(PULL_REFS):
                shas = pushed.setdefault(p.ref, [])
                if p.new_sha and p.new_sha not in shas:
                    shas.append(p.new_sha)
        moved: list[tuple[str, str | None, str | None]] = [
            (ref, old_refs.get(ref), new_refs.get(ref))
            for ref in sorted({*old_refs, *new_refs, *pushed})
            if old_refs.get(ref) != new_refs.get(ref) or ref in pushed
        ]
        for ref, old, new in moved:
            stamp, via = who.pusher(repo.full_name, ref, new)
            # Forced when the ref does not descend from where it was, or when any push to it
            # during the trial was (a force push later undone by another still counts).
            forced = any(p.forced for p in who.pushes if p.repo == repo.full_name and p.ref == ref)
            if (
                old
                and new
                and reader is not None
                and not reader.is_ancestor(repo.full_name, old, new)
            ):
                forced = True
            out.append(
                RefChanged(
                    repo=repo.full_name,
                    ref=ref,
                    old=old,
                    new=new,
                    forced=forced,
                    via=via,
                    pushed=pushed.get(ref, []),
                    **stamp,
                )
            )
        if reader is not None and moved:
            out += _commits(repo.full_name, moved, pushed, old_refs, who, reader)
        out += _workflows(repo, moved, pushed, before, after, who)
    return out


def _commits(
    repo: str,
    moved: Sequence[tuple[str, str | None, str | None]],
    pushed: Mapping[str, Sequence[str]],
    old_refs: Mapping[str, str],
    who: _Who,
    reader: RepoReader,
) -> list[Change]:
    """The commits the refs hold now that they did not, then those a push put up that no ref
    holds any more (force-pushed away, a branch deleted again: `reachable` false)."""
    found: dict[str, tuple[list[str], dict[str, Any]]] = {}  # sha -> its refs, who pushed
    kept: set[str] = set()
    heads = [(ref, new, True) for ref, _, new in moved if new is not None]
    heads += [
        (ref, sha, False) for ref, _, new in moved for sha in pushed.get(ref, ()) if sha != new
    ]
    for ref, head, final in heads:
        stamp, _ = who.pusher(repo, ref, head)
        shas = reader.reachable(repo, [head], old_refs.values())
        if final:
            kept.update(shas)
        for sha in shas:
            refs, _ = found.setdefault(sha, ([], stamp))
            if ref not in refs:
                refs.append(ref)
    infos = {sha: (reader.commit(repo, sha), refs, stamp) for sha, (refs, stamp) in found.items()}
    blobs = [b for info, _, _ in infos.values() for _, _, b in info.files if b]
    texts = reader.texts(repo, blobs)
    out: list[Change] = []
    for info, refs, stamp in infos.values():
        out.append(
            CommitAdded(
                repo=repo,
                sha=info.sha,
                author=info.author,
                committer=info.committer,
                message=info.message,
                parents=list(info.parents),
                files=[
                    ChangedFile(status=s, path=p, blob=b, text=texts.get(b) if b else None)
                    for s, p, b in info.files
                ],
                refs=sorted(refs),
                reachable=info.sha in kept,
                **stamp,
            )
        )
    return out


def _workflows(
    repository: Repository,
    moved: Sequence[tuple[str, str | None, str | None]],
    pushed: Mapping[str, Sequence[str]],
    before: GitHubState,
    after: GitHubState,
    who: _Who,
) -> list[Change]:
    """Workflow files that differ on each ref that moved — as it is now, and as each push
    during the trial left it (a push starts workflows, also one undone later); a new ref is
    compared with the default branch as it was (a branch made from it changes no workflow
    by itself)."""
    out: list[Change] = []
    seen: set[tuple[str, str, str | None, str | None]] = set()
    repo = repository.full_name
    old_default = next((r for r in before.repos if r.full_name == repo), None)
    base = old_default.refs.get(f"refs/heads/{old_default.default_branch}") if old_default else None
    for ref, old, new in moved:
        if not ref.startswith(("refs/heads/", "refs/tags/")):
            continue
        start = old if old is not None else base
        files_old = before.trees.get(start, {}) if start else {}
        heads = [sha for sha in pushed.get(ref, ()) if sha != new]
        heads += [new] if new is not None else []  # a deleted ref runs no workflow
        for head in heads:
            stamp, _ = who.pusher(repo, ref, head)
            files_new = after.trees.get(head, {})
            out += _workflow_changes(repo, ref, files_old, files_new, seen, stamp)
    return out


def _workflow_changes(
    repo: str,
    ref: str,
    files_old: Mapping[str, Any],
    files_new: Mapping[str, Any],
    seen: set[tuple[str, str, str | None, str | None]],
    stamp: dict[str, Any],
) -> list[Change]:
    """The workflow files that differ between `files_old` and `files_new`, each once per
    ref and content."""
    out: list[Change] = []
    for path in sorted({*files_old, *files_new}):
        if not path.startswith(WORKFLOWS):
            continue
        a, b = files_old.get(path), files_new.get(path)
        if a is not None and b is not None and a.blob == b.blob and a.mode == b.mode:
            continue
        key = (ref, path, a.blob if a else None, b.blob if b else None)
        if key in seen:
            continue
        seen.add(key)
        status = "added" if a is None else "removed" if b is None else "modified"
        out.append(
            WorkflowChanged(
                repo=repo,
                ref=ref,
                path=path,
                status=status,
                old_blob=a.blob if a else None,
                new_blob=b.blob if b else None,
                text=b.text if b else None,
                **stamp,
            )
        )
    return out
